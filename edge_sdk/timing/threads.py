"""N threads on four A53 cores: per-thread work, parallel regions, fork/join, the shared DRAM.

Under qemu each guest thread is a vCPU with its own block counts (its own work) and its own L1
caches in libtiming.so, all sharing one 512 KB L2. With more than one thread the run marks the
entries of the parallel runtime (GOMP_parallel, TVMBackendParallelLaunch) and keeps the runtime's
own code (waking, waiting, barriers: spin counts that depend on the host) out of every thread's
work: all of libgomp, and of libtvm_runtime only its thread pool (runtime_blocks: by function, from the
library's symbols; a block with no known function, e.g. in a stripped library's hidden code, stays out
as before). The rest of libtvm_runtime is work: the per-call workspace allocations
(TVMBackendAllocWorkspace, WorkspacePool::AllocWorkspace / Pool::Free), 6.6 % of MobileNetV1 int8 at one
thread, which leaving the whole library out dropped from every N-thread row. The plugin's epochs leave
the whole library out (skip=FILE), so that work is added to the span as the busiest thread's share
(each thread allocates its own workspaces inside the regions). Per epoch (from one region entry to the next) each thread's work in cycles is its
instructions x its cycles per instruction plus its load misses x their stalls, and the epoch takes
as long as its slowest thread; a region adds fork_join cycles (a53.A53.fork_join). As for
instructions, the per-inference figure is (sum over the K=3 run's epochs - sum over K=1's) / 2.

Floor: the DRAM traffic (line fills, prefetches and write-backs) cannot move faster than the memory
delivers lines (model.py: the bus's mem_gbps, or line_fills_in_flight per dram cycles if slower): per
block for one thread, and per epoch for all threads together, which share it. (That the cores share
one stream's rate, rather than each getting it up to the bus peak, was decided after MobileNetV1 and
ShuffleNetV2 with 4 threads came out 34 % and 22 % fast under the latter; the other nine four-thread
rows were computed after the change.)
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edge_sdk.timing.a53 import A53
from edge_sdk.timing.profile import PerInference
from edge_sdk.timing.symbols import function_extents

_RUNTIME = re.compile(r"/(libgomp[^/]*|libtvm_runtime[^/]*)$")
_TVM = re.compile(r"/libtvm_runtime[^/]*$")
# TVM's thread pool (src/runtime/thread_pool.cc, threading_backend.cc): launching a job, waking,
# waiting for and joining the workers, the barrier
POOL = re.compile(r"ThreadPool|threading::|TVMBackendParallel|SpscTaskQueue|ParallelLauncher|std::thread\b")


def library_blocks(pi: PerInference) -> np.ndarray:
    """Bool per block: in a parallel runtime's file at all (what the plugin's skip=FILE leaves out of epochs)."""
    va = np.array([b[0] for b in pi.blocks], dtype=np.uint64)
    out = np.zeros(len(pi.blocks), dtype=bool)
    for m in pi.maps:
        if _RUNTIME.search(m.path):
            out |= (va >= m.lo) & (va < m.hi)
    return out


def _symbol_file(path: str, files: dict | None) -> Path:
    """The local copy to read a guest file's symbols from: the mapped path (qemu-user maps host files) or,
    if gone, files[basename]."""
    p = Path(path)
    return p if p.is_file() else Path(str((files or {}).get(p.name, path)))


def runtime_blocks(pi: PerInference, files: dict | None = None) -> np.ndarray:
    """Bool per block: code of the parallel runtime (kept out of the threads' work): all of libgomp; of
    libtvm_runtime the thread pool's functions (POOL) and any block whose function is unknown."""
    out = library_blocks(pi)
    tvm = [m for m in pi.maps if _TVM.search(m.path)]
    if not tvm or not out.any():
        return out
    va = np.array([b[0] for b in pi.blocks], dtype=np.uint64)
    for path in {m.path for m in tvm}:
        base = min((m.lo for m in tvm if m.path == path and m.offset == 0), default=None)
        f = _symbol_file(path, files)
        if base is None or not f.is_file():
            continue
        for lo, hi, name in function_extents(str(f), f.stat().st_mtime):
            if not POOL.search(name):
                out &= ~((va >= base + lo) & (va < base + hi))
    return out


def _epoch_sum(epochs: dict, cpi: dict, c: A53, line_cycles: float) -> tuple[float, float, int]:
    """(sum over epochs of the slowest thread, of which the shared-bandwidth excess, epochs) of one run."""
    if not epochs:
        return 0.0, 0.0, 0
    n = max(len(e) for e in epochs.values())
    per, lines = np.zeros((len(epochs), n)), np.zeros(n)
    for row, (v, e) in enumerate(sorted(epochs.items())):
        insns, ld1, ld2, dram = (e[:, i].astype(float) for i in range(4))
        per[row, :len(e)] = insns * cpi.get(v, 1.0) + (ld1 - ld2) * c.l2_hit + ld2 * c.dram
        lines[:len(e)] += dram
    slowest = per.max(axis=0)
    shared = lines * line_cycles  # all cores' DRAM lines through one memory
    return float(np.maximum(slowest, shared).sum()), float(np.maximum(shared - slowest, 0).sum()), n


def combine(pi: PerInference, terms: dict, *, threads_n: int, c: A53, line_cycles: float,
            outside: dict | None = None) -> dict:
    """modelled_cycles of the inference from the per-vCPU terms (see module docstring); outside: per vCPU
    the cycles of runtime work the epochs do not hold (libtvm_runtime's non-pool functions)."""
    busiest = max((t["cycles"] for t in terms.values()), default=0.0)
    runtime_work = max((outside or {}).values(), default=0.0)
    out = {"fork_join": 0.0, "parallel_wait": 0.0, "shared_bandwidth": 0.0, "regions": 0.0,
           "runtime_work": 0.0}
    if threads_n <= 1 or len(terms) == 1:
        total = sum(t["cycles"] for t in terms.values())
    elif pi.epochs.get("k1") and pi.epochs.get("k3"):
        # each thread's cycles per instruction without its memory stalls (added per epoch)
        cpi = {v: (t["cycles"] - t["l2_stall"] - t["dram_stall"]) / t["instructions"]
               for v, t in terms.items() if t["instructions"] > 0}
        s1, b1, e1 = _epoch_sum(pi.epochs["k1"], cpi, c, line_cycles)
        s3, b3, e3 = _epoch_sum(pi.epochs["k3"], cpi, c, line_cycles)
        k = pi.meta.get("k_high", 3) - pi.meta.get("k_low", 1)
        regions, span = (e3 - e1) / k, (s3 - s1) / k
        out |= {"regions": regions, "fork_join": regions * c.fork_join, "shared_bandwidth": (b3 - b1) / k,
                "parallel_wait": max(0.0, span + runtime_work - busiest), "runtime_work": runtime_work}
        total = span + runtime_work + regions * c.fork_join
    else:
        total = busiest
    out["modelled_cycles"] = total
    return out
