"""timing/elf.py and threads.tvm_functions on the runtime bundle's real aarch64 libtvm_runtime.so (stripped:
dynamic symbols only), and threads.runtime_blocks on blocks placed in its functions: a block in a hidden
(unexported) function is attributed to that function; the thread pool's yield loop, the PLT stub it calls and
libc's sched_yield are kept out of the threads' work. Host only (no qemu), a few seconds.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.timing import elf, threads
from edge_sdk.timing.profile import ADD, Mapping, PerInference
from edge_sdk.timing.symbols import function_extents

READELF = shutil.which("aarch64-linux-gnu-readelf") or shutil.which("readelf")
LIBC = Path("/usr/aarch64-linux-gnu/lib/libc.so.6")  # libc6-arm64-cross: what the qemu runner's prefix maps


@pytest.fixture(scope="module")
def libtvm() -> Path:
    from edge_sdk.runtime import ensure_bundle

    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs g++-aarch64-linux-gnu (tools/setup.sh) for the aarch64 runtime bundle")
    return ensure_bundle("aarch64") / "lib" / "libtvm_runtime.so"


def _named(path: Path, pattern: str) -> tuple[int, int]:
    return next((lo, hi) for lo, hi, n in function_extents(str(path)) if re.search(pattern, n))


def test_fde_extents_are_readelfs(libtvm):
    if READELF is None:
        pytest.skip("needs readelf (binutils)")
    text = subprocess.run([READELF, "--debug-dump=frames", str(libtvm)], capture_output=True, text=True,
                          check=True).stdout
    want = sorted({(int(a, 16), int(b, 16)) for a, b in re.findall(r"FDE cie=\w+ pc=(\w+)\.\.(\w+)", text) if a != b})
    got = elf.fde_extents(str(libtvm))
    assert got == tuple(want)
    # stripped: far more functions than exported symbols, and every exported function starts an FDE
    named = function_extents(str(libtvm))
    assert len(got) > 5 * len(named)
    starts = {lo for lo, _ in got}
    assert all(lo in starts for lo, hi, _ in named if hi - lo > 4)


def test_plt_stubs_and_direct_calls(libtvm):
    stubs = {name: (addr, value) for addr, (name, value) in elf.plt_names(str(libtvm)).items()}
    yield_lo, _ = _named(libtvm, r"threading::YieldThread\(\)")
    # an exported function of this library: its stub names it and its address; libc's: address 0
    assert stubs["_ZN3tvm7runtime9threading11YieldThreadEv"][1] == yield_lo
    assert stubs["sched_yield"][1] == 0 and stubs["malloc"][1] == 0
    pcs, targets = elf.branch_edges(str(libtvm))
    # YieldThread is one instruction: a tail call (B) to sched_yield's stub
    assert targets[pcs == yield_lo].tolist() == [stubs["sched_yield"][0]]


def _profile(at: dict[str, list[int]], bases: dict[str, tuple[Path, int]]) -> PerInference:
    """One vCPU that ran one block at each address (file key -> ELF addresses), the files mapped at bases."""
    blocks = [(bases[k][1] + a, 1, b"\x1f\x20\x03\xd5") for k, addrs in at.items() for a in addrs]  # nop
    maps = [Mapping(base, base + 0x1000_0000, 0, str(path)) for path, base in bases.values()]
    counts = {0: np.ones((len(blocks), len(ADD)))}
    return PerInference(blocks, counts, np.full(len(blocks), -1), maps, meta={"threads": 4})


def test_hidden_functions_are_work_and_the_yield_loops_are_not(libtvm):
    starts, ends, pool = threads.tvm_functions(str(libtvm), libtvm.stat().st_mtime)
    stubs = {name: addr for addr, (name, _v) in elf.plt_names(str(libtvm)).items()}
    named = {lo for lo, _hi, _n in function_extents(str(libtvm))}
    pcs, targets = elf.branch_edges(str(libtvm))
    owner = np.searchsorted(starts, pcs, side="right") - 1
    yield_stub = stubs["_ZN3tvm7runtime9threading11YieldThreadEv"]
    waits = sorted({int(i) for i in owner[targets == yield_stub] if int(starts[i]) not in named})
    assert waits, "no hidden function calls YieldThread"  # the pool's launch / worker loops (thread_pool.cc)
    assert pool[waits].all()
    # hidden work: a hidden function that calls malloc and is not pool code (the VM's objects, workspaces)
    mallocs = {int(i) for i in owner[targets == stubs["malloc"]]}
    work = next(i for i in sorted(mallocs) if int(starts[i]) not in named and not pool[i])
    alloc_lo, _ = _named(libtvm, r"^TVMBackendAllocWorkspace$")
    at = {"tvm": [int(starts[work]), int(starts[work]) + 4, int(starts[waits[0]]) + 8, yield_stub,
                  stubs["malloc"], alloc_lo, int(ends[-1]) + 0x10_0000]}
    bases = {"tvm": (libtvm, 0x55_0000_0000)}
    want = [False, False, True, True, False, False, True]  # the last: in no function, stays out
    if LIBC.is_file():
        sched_lo, sched_hi = _named(LIBC, r"^(__)?sched_yield$")
        at["libc"] = [sched_lo, sched_hi - 4, _named(LIBC, r"^(__libc_)?malloc$")[0]]
        bases["libc"] = (LIBC, 0x66_0000_0000)
        want += [True, True, False]
    pi = _profile(at, bases)
    skip = threads.runtime_blocks(pi)
    assert skip.tolist() == want
    # the hidden function's blocks are runtime work the epochs leave out: what combine adds to the span
    outside = threads.library_blocks(pi) & ~skip
    assert outside[:2].all() and not outside[2:4].any()
