"""One lock per device around every operation that changes its install (deploy, rollback, tune's
prepare, runtime install), so two of them never interleave or sweep each other's files.

    with device_lock(conn, "deploy"):      # waits for another holder, up to `wait` seconds
        ...

The lock is flock(1) on ~/.edge-sdk/runtime/lock (beside the bundles: device state, never swept), held
by a process on the device that lives as long as one SSH channel and the host's heartbeat on it (a
byte every 15 s). Closing the channel, or 60 s without a byte (a host or link that died without
closing), ends the process and frees the lock, so a dead host never leaves a device locked for long.
Re-entrant per connection: deploy holds it for the
whole device session and the steps it calls (prepare, install_runtime) take it again for free.
"""
from __future__ import annotations

import contextlib
import posixpath
import shlex
import threading
from collections.abc import Iterator

import paramiko

from edge_sdk.errors import DeviceError
from edge_sdk.fleet.paths import RUNTIME

LOCK = posixpath.join(RUNTIME, "lock")
_HELD = "_edge_sdk_lock"  # attribute on the Connection: [depth, channel]


@contextlib.contextmanager
def device_lock(conn, what: str, *, wait: float = 600.0) -> Iterator[None]:
    held = getattr(conn, _HELD, None)
    if held:  # nested: free, unless the connection broke and took the lock with it (then take it again)
        if not held[1].alive():
            held[1] = _acquire(conn, what, wait)
        held[0] += 1
        try:
            yield
        finally:
            held[0] -= 1
        return
    held = [1, _acquire(conn, what, wait)]
    setattr(conn, _HELD, held)
    try:
        yield
    finally:
        setattr(conn, _HELD, None)
        held[1].close()


BEAT_S, SILENCE_S = 15, 60  # the host sends a byte every BEAT_S; the device lets go after SILENCE_S without one


def lock_command(wait: float) -> str:
    """What holds the lock on the device: prints `locked` once it has it, then reads the host's heartbeat
    bytes; end of input, or SILENCE_S without a byte (a host gone without closing), ends it."""
    return (f"mkdir -p {shlex.quote(RUNTIME)} && exec flock -w {int(wait)} {shlex.quote(LOCK)} "
            f"sh -c 'echo locked; while [ -n \"$(timeout {SILENCE_S} head -c 1)\" ]; do :; done'")


class _Heartbeat(threading.Thread):
    def __init__(self, holder):
        super().__init__(daemon=True, name="edge-sdk-device-lock")
        self.holder, self.stopped = holder, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(BEAT_S):
            try:
                self.holder.beat()
            except (OSError, EOFError, ValueError, paramiko.SSHException):
                return  # the session is gone: the device lets go after SILENCE_S

    def stop(self) -> None:
        self.stopped.set()


class _Channel:
    """The holder over SSH: one session channel running lock_command."""

    def __init__(self, conn, command: str, wait: float):
        transport = conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise EOFError("the SSH session is closed")
        self.channel = transport.open_session()
        self.channel.settimeout(wait + 30)
        self.channel.exec_command(command)

    def first_line(self) -> bytes:
        got = b""
        while not got.endswith(b"\n"):
            chunk = self.channel.recv(64)
            if not chunk:
                break
            got += chunk
        return got

    def beat(self) -> None:
        self.channel.send(b".")

    def alive(self) -> bool:
        t = self.channel.get_transport()
        return not self.channel.closed and t is not None and t.is_active()

    def close(self) -> None:
        self.channel.close()


def _acquire(conn, what: str, wait: float):
    """Start the holder (Connection's SSH channel, or the connection's own start_holder: the stand-in's)."""
    start = getattr(conn, "start_holder", None)
    try:
        holder = start(lock_command(wait)) if start else _Channel(conn, lock_command(wait), wait)
        got = holder.first_line()
    except (TimeoutError, OSError, EOFError, paramiko.SSHException) as e:  # paramiko: a bare EOFError on a cut
        why = str(e) or f"{type(e).__name__}: the connection was lost"
        raise DeviceError(f"device {conn.device}: cannot take the device lock for {what}: {why}") from None
    if got.strip() != b"locked":
        holder.close()
        raise DeviceError(f"device {conn.device}: another edge-sdk operation held the device lock ({LOCK}) for "
                          f"more than {wait:.0f} s; {what} did not start",
                          hint="wait for the other deploy, rollback or tune to finish, then retry")
    return _Beating(holder)


class _Beating:
    """A holder with its heartbeat thread: close() stops both."""

    def __init__(self, holder):
        self.holder, self.heart = holder, _Heartbeat(holder)
        self.heart.start()

    def alive(self) -> bool:
        return self.holder.alive()

    def close(self) -> None:
        self.heart.stop()
        self.holder.close()
