"""Room on the device for a deploy step, said the same way at every stage (upload, package extraction,
runtime install):

    device loop1 (...): extracting mobilenet_v1-float32 a1b2c3d4e5f6 failed: No space left on device:
    812 KiB free in .edge-sdk/models/mobilenet_v1-float32 on the device, the extracted package needs 3416 KiB

room_for() asks df before a step that writes a known amount and refuses when it cannot fit, so nothing
is half-written; a step that runs out anyway (the estimate was short, something else filled the
disk) gets the same message instead of tar's or cp's stderr with the device script quoted.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from edge_sdk.errors import DeviceError, EdgeError

NO_SPACE = ("No space left on device", "Disk quota exceeded")  # ENOSPC, EDQUOT as coreutils and tar say them
BLOCK = 4096


def on_disk(sizes) -> int:
    """Bytes that files of these sizes take on a filesystem of BLOCK-byte blocks."""
    return sum(-(-s // BLOCK) * BLOCK for s in sizes)


def free_kib(conn, remote_dir: str) -> int | None:
    """df's available KiB for remote_dir on the device; None when df cannot say."""
    try:
        r = conn.run(["df", "-Pk", "--", remote_dir], check=False, timeout=30)
        return int(r.stdout.splitlines()[-1].split()[3])
    except (EdgeError, IndexError, ValueError):
        return None


def no_space(free: int | None, remote_dir: str, need: int, what: str) -> str:
    have = "? KiB" if free is None else f"{free} KiB"
    return f"No space left on device: {have} free in {remote_dir} on the device, {what} needs {-(-need // 1024)} KiB"


def is_no_space(error: BaseException) -> bool:
    return any(s in str(error) for s in NO_SPACE)


@contextmanager
def room_for(conn, remote_dir: str, need: int, *, step: str, what: str) -> Iterator[None]:
    """Refuse `step` before it starts when df says `need` bytes do not fit under remote_dir; an ENOSPC
    inside it becomes the same message (module docstring)."""
    free = free_kib(conn, remote_dir)
    if free is not None and free * 1024 < need:
        raise DeviceError(f"device {conn.device}: {step} failed: {no_space(free, remote_dir, need, what)}")
    try:
        yield
    except DeviceError as e:
        if not is_no_space(e):
            raise
        raise DeviceError(f"device {conn.device}: {step} failed: {no_space(free, remote_dir, need, what)}") from None
