"""N threads on four A53 cores: per-thread work, parallel regions, fork/join, the shared DRAM.

Under qemu each guest thread is a vCPU with its own block counts (its own work) and its own L1
caches in libtiming.so, all sharing one 512 KB L2. With more than one thread the run marks the
entries of the parallel runtime (GOMP_parallel, TVMBackendParallelLaunch) and keeps the runtime's
own code (waking, waiting, barriers: spin counts that depend on the host) out of every thread's
work: all of libgomp, and of libtvm_runtime only its thread pool (runtime_blocks). The rest of
libtvm_runtime is work: the VM's interpreter, tensor and storage objects, the per-call workspace
allocations (TVMBackendAllocWorkspace, WorkspacePool), which leaving the whole library out dropped from
every N-thread row. The plugin's epochs leave the whole library out (skip=FILE), so that work is added to
the span as the busiest thread's share (runtime_work; each thread allocates its own workspaces inside the
regions, the VM's work is the main thread's between them).

Which of libtvm_runtime's code is the pool (tvm_functions): the aarch64 library is stripped (dynamic symbols
only), so its functions are the FDE extents of its .eh_frame (elf.fde_extents: every function has one,
hidden or exported; 2,341 in 0.27's, 233 named) and its PLT stubs (elf.plt_names). A function is pool code if
  1. its name (an exported one's) matches POOL (the pool's own entry points and threading:: helpers); or
  2. it waits: a direct BL / B to a yield (YIELD: libc's sched_yield, or TVM's threading::YieldThread, a
     tail call to it). Waiting in thread_pool.cc is a poll loop around that call (ParallelLauncher's
     WaitForJobs, SpscTaskQueue::Pop's spin before it sleeps, TVMBackendParallelBarrier); in 0.27 four
     call sites, all in pool code (the launch, the worker loop, the barrier); or
  3. it is hidden and only pool code calls it directly (at least one caller; repeated to a fixed point).
A PLT stub is what it jumps to: pool if that is a yield or a pool function of this library, else work.
A block in no function stays out. libc's sched_yield itself (the spin's system call) is kept out of the
threads' work too (libc's own symbols), and out of the plugin's epochs (qemu.plugin_args gives its extent as
skip=libc.so.6@LO-HI; a libtiming.so built before that option reads it as a file name no path holds, and its
epochs keep the spins: rebuild with tools/build_qemu_plugins.sh). Per epoch (from one region entry to the next) each thread's work in cycles is its
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

import functools
import re
from pathlib import Path

import numpy as np

from edge_sdk.timing.a53 import A53
from edge_sdk.timing.profile import PerInference
from edge_sdk.timing import elf
from edge_sdk.timing.symbols import function_extents

_RUNTIME = re.compile(r"/(libgomp[^/]*|libtvm_runtime[^/]*)$")
_TVM = re.compile(r"/libtvm_runtime[^/]*$")
# TVM's thread pool (src/runtime/thread_pool.cc, threading_backend.cc): launching a job, waking,
# waiting for and joining the workers, the barrier
POOL = re.compile(r"ThreadPool|threading::|TVMBackendParallel|SpscTaskQueue|ParallelLauncher|std::thread\b")
# what a waiting thread calls between polls, as nm -C or .dynsym (mangled) spells it
YIELD = re.compile(r"^(__)?sched_yield$|^_ZN3tvm7runtime9threading11YieldThreadEv$|threading::YieldThread\(\)")
_LIBC = re.compile(r"/libc[.-][^/]*$")


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


@functools.lru_cache(maxsize=16)
def tvm_functions(path: str, mtime: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, pool) of libtvm_runtime's functions by start (ELF addresses; pool: bool per function, the
    rule in the module docstring). Empty if the file cannot be read. mtime only keys the cache."""
    named = function_extents(path, mtime)
    plt = elf.plt_names(path, mtime)
    ext = {lo: hi for lo, hi in elf.fde_extents(path, mtime)}
    for lo, hi, _ in named:
        ext.setdefault(lo, hi)
    stub = {a: n for a, n in plt.items() if a not in ext}
    ext |= {a: a + 16 for a in stub}
    starts = np.array(sorted(ext), dtype=np.int64)
    ends = np.array([ext[a] for a in starts], dtype=np.int64)
    if not len(starts):
        return starts, ends, np.zeros(0, dtype=bool)
    index = {int(a): i for i, a in enumerate(starts)}
    name = [""] * len(starts)
    for lo, _hi, n in named:
        i = int(np.searchsorted(starts, lo, side="right")) - 1
        if i >= 0 and starts[i] <= lo < ends[i] and not name[i]:
            name[i] = n
    hidden = np.array([not n and int(a) not in stub for n, a in zip(name, starts, strict=True)])
    pool = np.array([bool(n and (POOL.search(n) or YIELD.search(n))) for n in name])
    yields = {int(a) for a in starts[pool] if YIELD.search(name[index[int(a)]])}
    yields |= {a for a, (n, _v) in stub.items() if YIELD.search(n)}
    # direct calls between functions (caller index, callee index), a function's own jumps left out
    pcs, targets = elf.branch_edges(path, mtime)
    caller = np.searchsorted(starts, pcs, side="right") - 1
    callee = np.searchsorted(starts, targets, side="right") - 1
    ok = (caller >= 0) & (callee >= 0)
    ok[ok] &= (pcs[ok] < ends[caller[ok]]) & (targets[ok] == starts[callee[ok]]) & (caller[ok] != callee[ok])
    caller, callee = caller[ok], callee[ok]
    waits = np.isin(starts[callee], np.array(sorted(yields), dtype=np.int64))
    pool[np.unique(caller[waits])] = True
    stub_to = {index[a]: index.get(v) if v else None for a, (_n, v) in stub.items()}  # stub -> this library's function
    for a, (n, _v) in stub.items():
        pool[index[a]] |= bool(YIELD.search(n))
    while True:
        # a stub is what it jumps to; a hidden function whose every direct caller is pool code is pool code
        for s_i, t_i in stub_to.items():
            if t_i is not None and pool[t_i]:
                pool[s_i] = True
        called = np.zeros(len(starts), dtype=bool)
        called[callee] = True
        by_other = np.zeros(len(starts), dtype=bool)
        by_other[callee[~pool[caller]]] = True
        grow = hidden & called & ~by_other & ~pool
        if not grow.any():
            return starts, ends, pool
        pool |= grow


def _in(va: np.ndarray, base: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per address: the index of the function (starts/ends, ELF addresses of a file mapped at base) holding it,
    -1 for none."""
    rel = va.astype(np.int64) - base
    i = np.searchsorted(starts, rel, side="right") - 1
    hit = (i >= 0) & (rel < ends[np.maximum(i, 0)]) if len(starts) else np.zeros(len(va), dtype=bool)
    return np.where(hit, i, -1)


def _bases(pi: PerInference, pattern: re.Pattern) -> dict[str, int]:
    """{mapped path: its load base} of the files whose path matches pattern."""
    return {p: min(m.lo for m in pi.maps if m.path == p and m.offset == 0)
            for p in {m.path for m in pi.maps if pattern.search(m.path)}
            if any(m.path == p and m.offset == 0 for m in pi.maps)}


def runtime_blocks(pi: PerInference, files: dict | None = None) -> np.ndarray:
    """Bool per block: code of the parallel runtime (kept out of the threads' work): all of libgomp; of
    libtvm_runtime the thread pool's functions (tvm_functions) and any block in no function; libc's
    sched_yield."""
    out = library_blocks(pi)
    va = np.array([b[0] for b in pi.blocks], dtype=np.uint64)
    if out.any():
        for path, base in _bases(pi, _TVM).items():
            f = _symbol_file(path, files)
            if not f.is_file():
                continue
            starts, ends, pool = tvm_functions(str(f), f.stat().st_mtime)
            mine = _mapped(pi, path, va) & out
            i = _in(va[mine], base, starts, ends)
            out[np.nonzero(mine)[0][i >= 0]] = pool[i[i >= 0]]
    for path, base in _bases(pi, _LIBC).items():
        f = _symbol_file(path, files)
        if f.is_file():
            for lo, hi, name in function_extents(str(f), f.stat().st_mtime):
                if YIELD.search(name):
                    out |= (va >= base + lo) & (va < base + hi)
    return out


def _mapped(pi: PerInference, path: str, va: np.ndarray) -> np.ndarray:
    """Bool per address: inside one of path's mappings."""
    out = np.zeros(len(va), dtype=bool)
    for m in pi.maps:
        if m.path == path:
            out |= (va >= m.lo) & (va < m.hi)
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
