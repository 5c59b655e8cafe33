"""libtiming.so's lockstep (edge_sdk/qemu/plugins/timing.c, lockstep=Q): guest threads stay within Q
instructions of each other whatever the host's scheduling of qemu's threads, so the shared L2 of a 4-thread
count sees them in near-lockstep order, as a Pi's four cores run them. Checked from inside the guest: two
threads run the same loop and each records how far the other's iteration count ever was from its own."""
from __future__ import annotations

import shutil
import subprocess

import pytest

SKEW_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static volatile long iters[2];
static long skew[2];
static long n;
static void *run(void *arg) {
  long me = (long)arg, most = 0;
  for (long i = 0; i < n; i++) {
    iters[me] = i + 1;
    long other = iters[1 - me];
    if (other == 0) continue;  /* the other thread has not started its loop yet (libc's thread start) */
    long d = i + 1 - other;
    d = d < 0 ? -d : d;
    most = d > most ? d : most;
  }
  skew[me] = most;
  return NULL;
}
int main(int argc, char **argv) {
  n = atol(argv[1]);
  pthread_t t[2];
  for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, run, (void *)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("%ld %ld\n", skew[0], skew[1]);
  return 0;
}
"""


@pytest.mark.qemu
def test_threads_stay_within_the_lockstep_window(tmp_path):
    from edge_sdk.qemu.runner import plugin_dir
    from edge_sdk.timing.qemu import LOCKSTEP_INSNS

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc")
    (tmp_path / "k.c").write_text(SKEW_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", "-pthread", str(tmp_path / "k.c"), "-o", str(tmp_path / "k")],
                   check=True)
    lib = plugin_dir(timing=True) / "libtiming.so"
    n = 3_000_000  # ~10 instructions an iteration: 30 M each, far more than the window
    out = tmp_path / "prof"
    run = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-plugin",
                          f"{lib},out={out},lockstep={LOCKSTEP_INSNS}", str(tmp_path / "k"), str(n)],
                         capture_output=True, text=True, check=True, timeout=600)
    skew = [int(x) for x in run.stdout.split()]
    meta = dict(ln[2:].strip().partition(" ")[::2] for ln in out.read_text().splitlines() if ln.startswith("T "))
    assert meta["lockstep"].split()[0] == str(LOCKSTEP_INSNS)
    waits, timeouts = (int(meta["lockstep"].split(f"{k}=")[1].split()[0]) for k in ("waits", "timeouts"))
    if timeouts:
        pytest.skip(f"the host held a thread past the wait limit {timeouts} times (load): the bound is not in force")
    # Identical loops: a window of Q instructions is at most Q / (instructions an iteration >= 6) iterations,
    # plus the block the window is checked at.
    assert max(skew) <= LOCKSTEP_INSNS // 6 + 100, (skew, waits)
    assert max(skew) > 0  # the threads did run concurrently (each saw the other move)
