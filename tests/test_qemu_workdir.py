"""The qemu runner's work directory (edge_sdk/qemu/workdir.py): a run in a second slot (as root, bind-mounted in
its own mount namespace) sees the same cwd as the one locked directory, so its instruction count is the same."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edge_sdk.qemu import runner as E
from edge_sdk.qemu import workdir as W

# prints its cwd and walks it byte by byte, so its count depends on the path it sees
CWD_C = r"""
#include <stdio.h>
#include <unistd.h>
int main(void) { char b[4096]; unsigned h = 0; getcwd(b, sizeof b);
  for (char *p = b; *p; p++) h = h * 31 + (unsigned char)*p; printf("%s %u\n", b, h); return 0; }
"""


def _count(exe: Path) -> tuple[int, str, Path]:
    with E.workdir() as work:
        n = E.count_once([str(exe)], prefix=E.runner_prefix("cortex-a53"), cpu="cortex-a53", work=work, guest_env={})
        return n, (work / "stdout.txt").read_text().split()[0], work


@pytest.mark.qemu
def test_a_second_slot_sees_the_same_cwd_and_counts_the_same(tmp_path, monkeypatch):
    if shutil.which("qemu-aarch64") is None or shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs qemu-user and gcc-aarch64-linux-gnu")
    if os.geteuid() != 0:
        pytest.skip("slots need root (mount namespaces)")
    monkeypatch.setattr(W, "cache_root", lambda: tmp_path / "cache")  # its own emulate/ (plugins stay found)
    exe = tmp_path / "cwd"
    (tmp_path / "cwd.c").write_text(CWD_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", str(tmp_path / "cwd.c"), "-o", str(exe)], check=True)
    fixed = tmp_path / "cache" / "emulate" / "work"
    monkeypatch.setenv(W.SLOTS_ENV, "1")
    one = _count(exe)
    assert one[1:] == (str(fixed), fixed)
    monkeypatch.setenv(W.SLOTS_ENV, "2")
    W._binds.clear()
    fixed.parent.mkdir(parents=True, exist_ok=True)
    with open(fixed.parent / "slot0.lock", "w") as taken:  # another run holds slot 0
        fcntl.flock(taken, fcntl.LOCK_EX)
        two = _count(exe)
    assert two[2] == fixed.parent / "slot1"  # the host side used slot 1 ...
    assert two[:2] == one[:2]  # ... and its guest saw emulate/work and ran as many instructions
    assert not any(fixed.iterdir())  # the mount stayed in the run's namespace


@pytest.mark.qemu
def test_a_slot_run_under_a_cache_root_the_probe_never_saw(tmp_path, monkeypatch):
    """The probe runs once a process; a later run under another cache root (a test's private EDGE_SDK_CACHE, as
    tests/test_tune_modelled.py sets) still has its emulate/work to bind on (it failed: preexec_fn, ENOENT)."""
    if shutil.which("qemu-aarch64") is None or shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs qemu-user and gcc-aarch64-linux-gnu")
    if os.geteuid() != 0:
        pytest.skip("slots need root (mount namespaces)")
    exe = tmp_path / "cwd"
    (tmp_path / "cwd.c").write_text(CWD_C)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", str(tmp_path / "cwd.c"), "-o", str(exe)], check=True)
    monkeypatch.setenv(W.SLOTS_ENV, "2")
    W._binds.clear()
    monkeypatch.setattr(W, "cache_root", lambda: tmp_path / "first")
    _count(exe)
    assert W._binds == [True]  # probed under the first root
    monkeypatch.setattr(W, "cache_root", lambda: tmp_path / "second")
    n, cwd, work = _count(exe)
    assert cwd == str(tmp_path / "second" / "emulate" / "work") and work.name.startswith("slot")
