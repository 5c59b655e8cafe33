"""SSH to one device, shaped like fabric's Connection (fleet fan-out: fleet/group.py).

    with Connection(device) as c:          # connects on first use
        c.run(["mkdir", "-p", ".edge-sdk/packages"])
        c.put("m.edgepkg", ".edge-sdk/packages/<sha256>.edgepkg")

Host keys are strict: a key is accepted only if it is in edge-sdk's own known_hosts file
(${EDGE_SDK_HOME:-~/.config/edge-sdk}/known_hosts, written by `edge-sdk fleet trust`) or pinned in
the fleet file (`host_key:`). An unknown or changed key is a DeviceError that shows the
fingerprint; nothing is ever accepted silently. Every remote argument is shlex-quoted, so a name
with shell metacharacters stays one literal argument; when a pipeline is needed, pass values as
positional parameters: run(["sh", "-c", 'sha256sum "$1"', "sh", path]). Remote paths are POSIX and
relative paths start at the login user's home, for commands and SFTP alike.
"""
from __future__ import annotations

import logging
import os
import posixpath
import shlex
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from edge_sdk.errors import DeviceError
from edge_sdk.fleet.config import Device
from edge_sdk.fleet.disk_space import free_kib, no_space
from edge_sdk.fleet.ssh_connect import fingerprint, known_hosts_name, open_client  # noqa: F401 (re-exported)

# paramiko logs a cut connection from its transport thread; with no handler Python prints that to
# stderr. The failure reaches the caller as a DeviceError, so keep the terminal clean.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def edge_sdk_home() -> Path:
    return Path(os.environ.get("EDGE_SDK_HOME") or Path.home() / ".config" / "edge-sdk")


def default_known_hosts() -> Path:
    return edge_sdk_home() / "known_hosts"


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Connection:
    """One SSH session to one device; connects lazily, closes on context exit.

    io_timeout bounds every wait for the device inside an open session (an SFTP reply, window
    space for a write): a link that goes silent (cable pulled, Wi-Fi gone) sends no reset, and
    TCP alone would retry for ~15 minutes. After such a failure the session is closed, so the
    next call reconnects (bounded by connect_timeout: the device's, from the fleet file, unless
    given) instead of waiting on a dead one again. Connecting is ssh_connect.open_client."""

    def __init__(self, device: Device, *, known_hosts: str | os.PathLike | None = None,
                 connect_timeout: float | None = None, io_timeout: float = 60.0):
        self.device = device
        self.known_hosts = Path(known_hosts) if known_hosts is not None else default_known_hosts()
        self.connect_timeout = device.connect_timeout if connect_timeout is None else connect_timeout
        self.io_timeout = io_timeout
        self.bytes_sent = 0  # file bytes moved by put(); deploy reports these
        self.bytes_received = 0
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.device} {'open' if self.is_connected else 'closed'}>"

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def is_connected(self) -> bool:
        return self._client is not None and self._client.get_transport() is not None \
            and self._client.get_transport().is_active()

    @property
    def client(self) -> paramiko.SSHClient:
        if not self.is_connected:
            self.open()
        return self._client

    def open(self) -> None:
        self.close()
        self._client = open_client(self.device, known_hosts=self.known_hosts, connect_timeout=self.connect_timeout,
                                   io_timeout=self.io_timeout)

    def close(self) -> None:
        """Close quietly: closing a session whose link died sends a last packet that can only fail."""
        sftp, client, self._sftp, self._client = self._sftp, self._client, None, None
        for thing in (sftp, client):
            if thing is not None:
                try:
                    thing.close()
                except (OSError, paramiko.SSHException, EOFError):
                    pass

    # -- commands ----------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = 60.0,
            input: bytes | None = None) -> Result:  # noqa: A002 - subprocess.run's name
        """Run argv on the device (each argument shell-quoted); stdout/stderr are decoded UTF-8."""
        argv = tuple(os.fspath(a) for a in argv)
        if not argv:
            raise ValueError("run() needs at least a program name")
        command = " ".join(shlex.quote(a) for a in argv)
        try:
            chan = self.client.get_transport().open_session(timeout=self.connect_timeout)
            chan.settimeout(self.io_timeout)
            chan.exec_command(command)
            if input is not None:
                chan.sendall(input)
            chan.shutdown_write()
            out, err, code = _collect(chan, timeout)
        except (OSError, paramiko.SSHException, EOFError) as e:
            self.close()  # a dead session: the next call reconnects rather than waiting on it
            raise DeviceError(f"device {self.device}: `{short_command(command)}` failed: the connection broke "
                              f"({_why(e, self.io_timeout)})") from None
        if code is None:
            raise DeviceError(f"device {self.device}: `{short_command(command)}` timed out after {timeout:g} s")
        if code == -1:  # paramiko's value when no exit status came: a cut connection or a signal
            raise DeviceError(f"device {self.device}: `{short_command(command)}` ended without an exit status "
                              f"(connection cut or command killed by a signal)")
        result = Result(argv, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code)
        if check and code != 0:
            raise exit_error(self.device, command, result)
        return result

    # -- files -------------------------------------------------------------------------------
    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = self.client.open_sftp()
                self._sftp.get_channel().settimeout(self.io_timeout)
            except (OSError, paramiko.SSHException, EOFError) as e:
                raise DeviceError(f"device {self.device}: cannot open SFTP: {e}") from None
        return self._sftp

    def put(self, local: str | os.PathLike, remote_path: str, *,
            progress: Callable[[int, int], None] | None = None, sha256: str | None = None) -> int:
        """Upload to a temporary name beside remote_path, then rename, so a cut transfer never
        leaves a half-written file under the final name. With sha256, the device hashes the
        temporary file (sha256sum) first: a damaged transfer is removed and never takes the final
        name. Returns the bytes sent."""
        parent, base = posixpath.split(remote_path)
        tmp = posixpath.join(parent, f".{base}.part-{uuid.uuid4().hex[:8]}")
        try:
            attrs = self.sftp.put(os.fspath(local), tmp, callback=progress, confirm=True)
            self.bytes_sent += attrs.st_size
            if sha256 is not None:
                got = self.sha256(tmp)
                if got != sha256:
                    self._remove_quietly(tmp)
                    raise DeviceError(f"device {self.device}: upload of {local} to {remote_path} arrived damaged: "
                                      f"sha256 on the device is {got}, expected {sha256}; removed it")
            self.sftp.posix_rename(tmp, remote_path)
        except FileNotFoundError as e:
            self._remove_quietly(tmp)
            raise DeviceError(f"device {self.device}: cannot upload {local} to {remote_path}: {e}") from None
        except (TimeoutError, paramiko.SSHException, EOFError) as e:
            self.close()  # the session is dead or wedged; deploy's next step reconnects to clean up
            raise DeviceError(f"device {self.device}: upload of {local} to {remote_path} failed: the connection "
                              f"broke ({_why(e, self.io_timeout)})") from None
        except OSError as e:  # the device refused a write (SFTP status): the session still works
            self._remove_quietly(tmp)
            full = self._disk_full(parent, os.path.getsize(local))
            raise DeviceError(f"device {self.device}: upload of {local} to {remote_path} failed: {full or e}") from None
        return attrs.st_size

    def sha256(self, remote_path: str) -> str | None:
        """The file's sha256 computed on the device (sha256sum), or None if it does not exist."""
        r = self.run(["sh", "-c", 'test -f "$1" || exit 3; sha256sum < "$1"', "sh", remote_path], check=False,
                     timeout=600)
        if r.exit_code == 3:
            return None
        if r.exit_code != 0 or not r.stdout.split():
            raise DeviceError(f"device {self.device}: sha256sum {remote_path} failed: {r.stderr.strip()[-400:]}")
        return r.stdout.split()[0]

    def get(self, remote_path: str, local: str | os.PathLike, *,
            progress: Callable[[int, int], None] | None = None) -> int:
        """Download to a temporary name beside `local`, then os.replace. Returns the bytes received."""
        local = Path(local)
        tmp = local.with_name(f".{local.name}.part-{uuid.uuid4().hex[:8]}")
        try:
            self.sftp.get(remote_path, os.fspath(tmp), callback=progress)
            os.replace(tmp, local)
        except (OSError, paramiko.SSHException, EOFError) as e:
            tmp.unlink(missing_ok=True)
            raise DeviceError(f"device {self.device}: download of {remote_path} failed: {e}") from None
        size = local.stat().st_size
        self.bytes_received += size
        return size

    def readlink(self, remote_path: str) -> str | None:
        """Where the symlink at remote_path points, or None if it is not a link or does not exist."""
        return self._ask(f"readlink {remote_path}", lambda: self.sftp.readlink(remote_path), None)

    def listdir(self, remote_path: str) -> list[tuple[str, int]]:
        """(name, st_mode) of each entry of a remote folder, links not followed; [] if it cannot be read."""
        return self._ask(f"listing {remote_path}", lambda: [
            (a.filename, a.st_mode or 0) for a in self.sftp.listdir_attr(remote_path)], [])

    def read_text(self, remote_path: str) -> str | None:
        """A small remote file's text, or None if it does not exist or cannot be read."""
        def read():
            with self.sftp.open(remote_path, "r") as f:
                return f.read(1 << 20).decode("utf-8", "replace")
        return self._ask(f"reading {remote_path}", read, None)

    def _ask(self, what: str, fn, default):
        """fn()'s answer; `default` where the device says no (OSError: no such file, not a link); a
        dropped connection (paramiko raises a bare EOFError) is a DeviceError naming the device."""
        try:
            return fn()
        except OSError:
            return default
        except (paramiko.SSHException, EOFError) as e:
            raise DeviceError(f"device {self.device}: {what}: connection lost: {_why(e, self.io_timeout)}") from None

    def _disk_full(self, remote_dir: str, need: int) -> str:
        """The cause SFTP hides: OpenSSH's sftp-server reports ENOSPC as a bare "Failure", so ask
        df how much room the directory has; "" when that is not the explanation."""
        free = free_kib(self, remote_dir)
        if free is None or free * 1024 >= need:
            return ""
        return no_space(free, remote_dir, need, "the file")

    def _remove_quietly(self, remote_path: str) -> None:
        try:
            self.sftp.remove(remote_path)
        except (OSError, paramiko.SSHException, EOFError, DeviceError):
            pass  # the connection itself is gone; the device-side cleanup is deploy's job


def _collect(chan: paramiko.Channel, timeout: float | None) -> tuple[bytes, bytes, int | None]:
    """Drain stdout and stderr together (reading one while the other fills would stall the
    channel window), until the exit status arrives; exit code None on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out, err, idle = [], [], 0.001
    while True:
        busy = False
        while chan.recv_ready():
            out.append(chan.recv(65536))
            busy = True
        while chan.recv_stderr_ready():
            err.append(chan.recv_stderr(65536))
            busy = True
        # the exit status may come before the last output: finish only after the output's EOF too
        if (chan.exit_status_ready() and (chan.eof_received or chan.closed)
                and not chan.recv_ready() and not chan.recv_stderr_ready()):
            return b"".join(out), b"".join(err), chan.recv_exit_status()
        if chan.closed and not busy:
            raise EOFError("channel closed without an exit status")
        if deadline is not None and time.monotonic() > deadline:
            chan.close()
            return b"".join(out), b"".join(err), None
        if busy:
            idle = 0.001
        else:
            time.sleep(idle)
            idle = min(idle * 2, 0.02)


def _why(e: BaseException, io_timeout: float) -> str:
    if isinstance(e, TimeoutError):
        return f"no answer from the device for {io_timeout:g} s"
    if isinstance(e, EOFError) and not str(e):  # what a TCP_USER_TIMEOUT / keepalive expiry looks like
        return f"the device closed it or stopped answering (nothing acknowledged for up to {io_timeout:g} s)"
    return str(e) or type(e).__name__


def exit_error(device: Device, command: str, result: Result) -> DeviceError:
    """The error for a remote command that exited non-zero: the command and the tail of its output."""
    tail = result.stderr.strip()[-800:] or result.stdout.strip()[-800:]
    return DeviceError(f"device {device}: `{short_command(command)}` exited with {result.exit_code}"
                       + (f": {tail}" if tail else ""))


def short_command(command: str) -> str:
    return command if len(command) <= 120 else command[:117] + "..."
