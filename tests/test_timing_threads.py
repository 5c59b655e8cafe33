"""timing/threads.py on a real 4-thread profile: our runner (the session's small pi3 MobileNetV1, conftest)
at TVM_NUM_THREADS=4 under qemu with libtiming.so. The thread pool's waiting is left out of the threads'
work; libtvm_runtime's other work (the VM's calls) is counted. No test asserts a speed.
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.timing import threads
from edge_sdk.timing.symbols import Symbolizer, function_extents


@pytest.fixture(scope="module")
def four_threads(pi3_package):
    from edge_sdk.package import open_package
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing.session import timing_session

    with tempfile.TemporaryDirectory() as tmp:
        pkg = open_package(pi3_package, Path(tmp))
        lib = pkg.member("model.so")
        with timing_session() as seen:
            E.count_runner(lib=lib, params=pkg.member("params.bin"), input=pkg.golden_input, threads=4)
        pi = seen[str(lib)]
        from edge_sdk.timing.model import model_profile

        m = model_profile(pi, threads_n=4, clock_ghz=1.2, mem_gbps=4.0, symbol_files={"model.so": lib})
    return pi, m


def _functions(pi) -> list[str]:
    """Per block the libtvm_runtime function whose extent holds it ("" elsewhere or in a hidden function)."""
    sym = Symbolizer(pi.maps)
    out = []
    for va, _n, _code in pi.blocks:
        path = sym.file_of(va)
        if path is None or "libtvm_runtime" not in path:
            out.append("")
            continue
        rel = va - sym.base[path]
        out.append(next((n for lo, hi, n in function_extents(path) if lo <= rel < hi), ""))
    return out


def _ran(pi) -> np.ndarray:
    return sum(c[:, 0] for c in pi.counts.values()) > 0


@pytest.mark.qemu
def test_allocations_are_work_and_the_pool_is_not(four_threads):
    pi, m = four_threads
    assert len(pi.counts) == 4  # four vCPUs: the main thread and three pool workers
    skip, lib = threads.runtime_blocks(pi), threads.library_blocks(pi)
    names = _functions(pi)
    ran = _ran(pi)
    work = np.array([bool(n) and not threads.POOL.search(n) for n in names]) & lib & ran  # the VM's calls
    pool = np.array([bool(threads.POOL.search(n)) for n in names]) & lib & ran
    assert work.any() and pool.any()
    assert not skip[work].any()  # counted at N threads
    assert skip[pool].all()      # left out
    # no thread takes kernel scratch from the runtime's WorkspacePool: each has it on its own stack
    # (compiler/stack_scratch; before it, every thread allocated its workspaces inside the regions)
    assert not (np.array(["Workspace" in n for n in names]) & ran).any()
    assert m["threads"] == 4 and m["regions"] > 0


@pytest.mark.qemu
def test_without_the_librarys_symbols_the_whole_library_stays_out(four_threads):
    pi, _m = four_threads
    moved = dataclasses.replace(pi, maps=[dataclasses.replace(mp, path="/nonexistent/" + Path(mp.path).name)
                                          for mp in pi.maps])
    assert (threads.runtime_blocks(moved) == threads.library_blocks(pi)).all()
    assert threads.library_blocks(pi).sum() > threads.runtime_blocks(pi).sum()


@pytest.mark.qemu
def test_hidden_runtime_work_is_counted_and_the_spins_are_not(four_threads):
    from edge_sdk.timing import cost
    from edge_sdk.timing.a53 import DEFAULT
    from edge_sdk.timing.model import thread_terms

    pi, m = four_threads
    skip, lib, ran = threads.runtime_blocks(pi), threads.library_blocks(pi), _ran(pi)
    sym = Symbolizer(pi.maps)
    # libtvm_runtime's hidden functions (in no exported symbol's extent) that are not the pool: work
    hidden_work = lib & ran & ~skip & np.array([n == "" for n in _functions(pi)])
    assert hidden_work.any()
    bc = cost.block_costs(pi.blocks, pi.pred, DEFAULT)
    per = [thread_terms(c, bc, DEFAULT, ~skip)["per_block"] for c in pi.counts.values()]
    # the span carries them: runtime_work is the busiest vCPU's runtime work, hidden functions included
    assert m["cycles_split"]["runtime_work"] >= max(p[hidden_work].sum() for p in per) > 0
    # the spins: libc's sched_yield ran (the pool's workers poll between jobs) and is no thread's work
    spin = np.array([sym.lookup(va)[1] in ("sched_yield", "__sched_yield") for va, _n, _c in pi.blocks]) & ran
    assert spin.any() and skip[spin].all()
    assert all(p[spin].sum() == 0 for p in per)
