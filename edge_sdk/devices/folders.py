"""A stand-in for fleet.ssh.Connection: each "device" is a local folder (its home), commands run by
subprocess in it, files are copied. No SSH, no host keys, no network: the fleet logic (fan-out
results, deploy order, rollback decisions, error reports) gets quick tests that need no sshd.
The real-sshd stand-ins (devices/loopback.py, devices/emulated_pi.py) stay the truth for SSH itself.

    devices = StandInDevices(tmp_path)                   # homes under tmp_path/<device name>
    report = deploy(fleet, [pkg], connection_factory=devices.connect)
    devices.down.add("cam2")                             # cam2 now refuses connections
    devices.log                                          # [(device, "run"/"put"/"get", argv or paths), ...]

It runs the same device-side code the real connection does (POSIX sh, coreutils, tar, the
runtime bundle's edge-runner), here on this machine, so packages must be built for the host.
`hook(device name, operation, args)` runs before every operation and may raise DeviceError to
fail that step on purpose.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.errors import DeviceError
from edge_sdk.fleet.config import Device
from edge_sdk.fleet.ssh import Connection, Result, short_command, exit_error

Hook = Callable[[str, str, tuple], None]  # (device name, "connect"/"run"/"put"/"get", arguments)


@dataclass
class StandInDevices:
    """Local folders standing in for devices; `connect` is a deploy/status/rollback connection_factory."""

    root: Path
    down: set[str] = field(default_factory=set)  # device names that refuse connections (powered off)
    hook: Hook | None = None
    log: list[tuple[str, str, tuple]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def home(self, device: Device | str) -> Path:
        home = Path(self.root) / (device if isinstance(device, str) else device.name)
        home.mkdir(parents=True, exist_ok=True)
        return home

    def connect(self, device: Device, **options) -> StandInConnection:
        return StandInConnection(device, self, **options)

    def record(self, device: Device, op: str, args: tuple) -> None:
        with self._lock:
            self.log.append((device.name, op, args))
        if self.hook is not None:
            self.hook(device.name, op, args)

    def runs(self, name: str) -> list[tuple[str, ...]]:
        """The argv of every command run on device `name`, in order."""
        return [args for dev, op, args in self.log if dev == name and op == "run"]


@dataclass
class _Holder:
    """A local process that holds the device lock (device_lock.py) while its input is open."""

    process: subprocess.Popen

    def first_line(self) -> bytes:
        return self.process.stdout.readline()

    def beat(self) -> None:
        self.process.stdin.write(b".")
        self.process.stdin.flush()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


class StandInConnection(Connection):
    """Connection's interface over a local folder (see the module docstring); a stand-in, not SSH."""

    def __init__(self, device: Device, devices: StandInDevices, *, known_hosts=None, connect_timeout: float | None = None,
                 io_timeout: float = 60.0):
        super().__init__(device, known_hosts=known_hosts or os.devnull, connect_timeout=connect_timeout,
                         io_timeout=io_timeout)
        self.devices = devices
        self._open = False

    def __repr__(self) -> str:
        return f"<StandInConnection {self.device} {'open' if self._open else 'closed'}>"

    @property
    def home(self) -> Path:
        return self.devices.home(self.device)

    @property
    def is_connected(self) -> bool:
        return self._open

    @property
    def client(self):
        raise TypeError("a stand-in connection has no SSH client")

    @property
    def sftp(self):
        raise TypeError("a stand-in connection has no SFTP session")

    def open(self) -> None:
        self.devices.record(self.device, "connect", ())
        if self.device.name in self.devices.down:
            self._open = False
            raise DeviceError(f"device {self.device}: unreachable: [stand-in] the device is down")
        self._open = True

    def close(self) -> None:
        self._open = False

    def _ensure_open(self) -> None:
        if not self._open:
            self.open()

    def _local(self, remote_path: str) -> Path:
        return Path(remote_path) if os.path.isabs(remote_path) else self.home / remote_path

    def start_holder(self, command: str) -> _Holder:
        """device_lock's holder: `command` (sh) in this device's folder, input kept open until close()."""
        self._ensure_open()
        p = subprocess.Popen(["sh", "-c", command], cwd=self.home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        return _Holder(p)

    # -- the operations fleet code uses ----------------------------------------------------------
    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = 60.0,
            input: bytes | None = None) -> Result:  # noqa: A002 - Connection.run's name
        argv = tuple(os.fspath(a) for a in argv)
        if not argv:
            raise ValueError("run() needs at least a program name")
        self._ensure_open()
        self.devices.record(self.device, "run", argv)
        command = " ".join(shlex.quote(a) for a in argv)
        env = {"HOME": os.fspath(self.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        try:
            p = subprocess.run(argv, cwd=self.home, input=input if input is not None else b"", capture_output=True,
                               timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"device {self.device}: `{short_command(command)}` timed out after {timeout:g} s") from None
        except OSError as e:  # no such program: as sh reports it over SSH
            p = subprocess.CompletedProcess(argv, 127, b"", f"sh: 1: {argv[0]}: {e.strerror}\n".encode())
        result = Result(argv, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), p.returncode)
        if check and result.exit_code != 0:
            raise exit_error(self.device, command, result)
        return result

    def put(self, local, remote_path: str, *, progress=None, sha256: str | None = None) -> int:
        """Copy to a temporary name beside remote_path, check sha256 there, rename (as Connection.put)."""
        self._ensure_open()
        self.devices.record(self.device, "put", (os.fspath(local), remote_path))
        parent, base = os.path.split(remote_path)
        tmp = os.path.join(parent, f".{base}.part-{uuid.uuid4().hex[:8]}")
        try:
            shutil.copyfile(local, self._local(tmp))
        except OSError as e:
            self._local(tmp).unlink(missing_ok=True)
            raise DeviceError(f"device {self.device}: cannot upload {local} to {remote_path}: {e}") from None
        size = self._local(tmp).stat().st_size
        self.bytes_sent += size
        if progress is not None:
            progress(size, size)
        if sha256 is not None and self.sha256(tmp) != sha256:
            self._local(tmp).unlink(missing_ok=True)
            raise DeviceError(f"device {self.device}: upload of {local} to {remote_path} arrived damaged; removed it")
        os.replace(self._local(tmp), self._local(remote_path))
        return size

    def get(self, remote_path: str, local, *, progress=None) -> int:
        self._ensure_open()
        self.devices.record(self.device, "get", (remote_path, os.fspath(local)))
        local = Path(local)
        tmp = local.with_name(f".{local.name}.part-{uuid.uuid4().hex[:8]}")
        try:
            shutil.copyfile(self._local(remote_path), tmp)
            os.replace(tmp, local)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise DeviceError(f"device {self.device}: download of {remote_path} failed: {e}") from None
        size = local.stat().st_size
        self.bytes_received += size
        return size

    def readlink(self, remote_path: str) -> str | None:
        self._ensure_open()
        try:
            return os.readlink(self._local(remote_path))
        except OSError:
            return None

    def listdir(self, remote_path: str) -> list[tuple[str, int]]:
        self._ensure_open()
        try:
            return [(e.name, e.stat(follow_symlinks=False).st_mode) for e in os.scandir(self._local(remote_path))]
        except OSError:
            return []

    def read_text(self, remote_path: str) -> str | None:
        self._ensure_open()
        try:
            with open(self._local(remote_path), "rb") as f:
                return f.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            return None
