"""libtiming.so's skip=FILE@LO-HI (edge_sdk/qemu/plugins/timing.c): the code range's blocks are counted per block
but left out of the epochs' sums, as qemu.plugin_args asks for libc's sched_yield (a thread pool's spin calls it
between polls: no work). A guest program calls sched_yield inside marked regions; its epochs hold every executed
instruction except sched_yield's with the range, and all of them without it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

YIELDS_C = r"""
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) void region(long yields) {
  for (long i = 0; i < yields; i++) {
    sched_yield();
    sink += i;
  }
}
int main(int argc, char **argv) {
  for (int r = 0; r < 4; r++) region(atol(argv[1]));
  printf("%ld\n", sink);
  return 0;
}
"""
PREFIX = Path("/usr/aarch64-linux-gnu")


def _epochs_and_yields(tmp_path: Path, exe: Path, extra: list[str]) -> tuple[int, int, int]:
    """(instructions in the epochs, instructions in libc's sched_yield, all instructions) of one run."""
    from edge_sdk.qemu.runner import plugin_dir
    from edge_sdk.timing.profile import read_profile
    from edge_sdk.timing.qemu import yield_ranges
    from edge_sdk.timing.symbols import symbol_value

    out = tmp_path / f"prof{len(extra)}"
    args = [f"out={out}", f"mark={exe.name}@{symbol_value(exe, 'region'):x}", *extra]
    subprocess.run(["qemu-aarch64", "-L", str(PREFIX), "-plugin", f"{plugin_dir(timing=True) / 'libtiming.so'},"
                    + ",".join(args), str(exe), "300"], capture_output=True, text=True, check=True, timeout=300)
    prof = read_profile(out)
    (_name, lo, hi), = yield_ranges([PREFIX])
    base = min(m.lo for m in prof.maps if m.path.endswith("/libc.so.6") and m.offset == 0)
    va = np.array([b[0] for b in prof.blocks], dtype=np.int64)
    n = np.array([b[1] for b in prof.blocks], dtype=np.int64)
    insns = prof.counts[0][:, 0] * n
    in_yield = (va >= base + lo) & (va < base + hi)
    return int(prof.epochs[0][:, 0].sum()), int(insns[in_yield].sum()), int(insns.sum())


@pytest.mark.qemu
def test_a_skip_range_leaves_sched_yield_out_of_the_epochs(tmp_path):
    from edge_sdk.timing.qemu import yield_ranges

    if shutil.which("aarch64-linux-gnu-gcc") is None or not (PREFIX / "lib" / "libc.so.6").is_file():
        pytest.skip("needs aarch64-linux-gnu-gcc and libc6-arm64-cross")
    (tmp_path / "yields.c").write_text(YIELDS_C)
    exe = tmp_path / "yields"
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", str(tmp_path / "yields.c"), "-o", str(exe)], check=True)
    (name, lo, hi), = yield_ranges([PREFIX])
    whole, yields, total = _epochs_and_yields(tmp_path, exe, [])
    assert yields >= 4 * 300 * 3  # the calls ran (mov x8 / svc, then the return path)
    assert whole == total  # no skip: every instruction is in some epoch
    skipped, yields2, total2 = _epochs_and_yields(tmp_path, exe, [f"skip={name}@{lo:x}-{hi:x}"])
    assert (yields2, total2) == (yields, total)  # the blocks still ran and are still counted per block
    assert skipped == total - yields, ("libtiming.so predates skip=FILE@LO-HI: rebuild it "
                                       "(bash tools/build_qemu_plugins.sh)")
