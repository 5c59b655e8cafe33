"""The work directory of a counted qemu run: every guest runs in the one path $EDGE_SDK_CACHE/emulate/work.

Paths are part of what the guest computes (its cwd, __file__ of a guest script, the strings it hashes), so the
instruction counts stay identical run to run only if every run sees the same directory. One lock on that
directory serialised every counted run of a machine: with two test workers (or two bench runs) one qemu waited
while the other ran, a core idle.

As root (mount namespaces), a run takes one of N slots instead (N = the host's cores; emulate/slot<i>, one flock
each): its qemu starts in a private mount namespace in which its slot is bind-mounted on emulate/work, so the
guest's cwd is emulate/work as before while N runs proceed at once; the host side reads and writes the slot.
Without root, or when EDGE_SDK_QEMU_SLOTS=1, the one locked directory as before. Either way emulate/lock is held
(shared by slot holders, exclusive by the one-directory mode) so the two modes never mix.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from edge_sdk.runtime.bundle import cache_root

LOCK_LOG = "EDGE_SDK_LOCK_LOG"  # a file: each workdir() turn appends when it asked, got and let go of its lock
SLOTS_ENV = "EDGE_SDK_QEMU_SLOTS"  # how many runs at once (as root; default: the host's cores)
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x00020000, 4096, 16384, 1 << 18
_GUEST_CWD: dict[Path, Path] = {}  # a slot held now -> the path its guest sees (emulate/work)
_binds: list[bool] = []  # whether this process can bind a slot (probed once)


# resolved here, in the parent: the child between fork and exec (subprocess's preexec_fn) only calls them
_LIBC = ctypes.CDLL(None, use_errno=True)
_UNSHARE, _MOUNT = _LIBC.unshare, _LIBC.mount


def _enter(slot: bytes, fixed: bytes) -> None:
    """In the child, before exec: a private mount namespace with `slot` bind-mounted on `fixed`, cwd there."""
    if (_UNSHARE(_CLONE_NEWNS) != 0 or _MOUNT(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0
            or _MOUNT(slot, fixed, None, _MS_BIND, None) != 0):
        raise OSError(ctypes.get_errno(), "cannot bind the run's slot on emulate/work")
    os.chdir(fixed)


def _slots(root: Path) -> int:
    n = int(os.environ.get(SLOTS_ENV) or os.cpu_count() or 1)
    if n <= 1 or os.geteuid() != 0:
        return 1
    if not _binds:
        probe = root / "slot-probe"
        probe.mkdir(exist_ok=True)
        (root / "work").mkdir(exist_ok=True)
        try:
            subprocess.run(["true"], preexec_fn=partial(_enter, os.fsencode(probe), os.fsencode(root / "work")),
                           check=True)
            _binds.append(True)
        except (OSError, subprocess.SubprocessError):
            _binds.append(False)
    return n if _binds[0] else 1


def run_kwargs(work: Path) -> dict:
    """subprocess.run's arguments that start a guest in `work` as the guest sees it."""
    fixed = _GUEST_CWD.get(work)
    if fixed is None:
        return {"cwd": work}
    return {"cwd": work, "preexec_fn": partial(_enter, os.fsencode(work), os.fsencode(fixed))}


def _take_slot(root: Path, n: int):
    """(lock file, slot index): the first free of n slots, polling while all are taken."""
    while True:
        for i in range(n):
            fh = open(root / f"slot{i}.lock", "w")  # noqa: SIM115 (closed by the caller)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fh, i
            except BlockingIOError:
                fh.close()
        time.sleep(0.05)


@contextmanager
def workdir():
    """A directory for one counted run, seen by its guest as emulate/work (see the module's doc)."""
    root = cache_root() / "emulate"
    root.mkdir(parents=True, exist_ok=True)
    n = _slots(root)
    with open(root / "lock", "w") as lock:
        asked = time.time()
        fcntl.flock(lock, fcntl.LOCK_SH if n > 1 else fcntl.LOCK_EX)
        slot_lock, i = _take_slot(root, n) if n > 1 else (None, None)
        got = time.time()
        work = root / ("work" if i is None else f"slot{i}")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        if i is not None:
            # the bind's target: made here, not only by the probe (once a process), since the cache root can
            # change between runs of one process (a test's private EDGE_SDK_CACHE; the bind then failed ENOENT)
            (root / "work").mkdir(exist_ok=True)
            _GUEST_CWD[work] = root / "work"
        try:
            yield work
        finally:
            _GUEST_CWD.pop(work, None)
            shutil.rmtree(work, ignore_errors=True)
            if slot_lock is not None:
                slot_lock.close()
            _log_turn(asked, got, i)


def _log_turn(asked: float, got: float, slot: int | None) -> None:  # read by tests/suite_timeline.py
    if where := os.environ.get(LOCK_LOG):
        with open(where, "a") as fh:  # one short write per line: O_APPEND keeps lines whole across processes
            fh.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", ""), "pid": os.getpid(),
                                 "slot": slot, "asked": round(asked, 3), "got": round(got, 3),
                                 "released": round(time.time(), 3)}) + "\n")
