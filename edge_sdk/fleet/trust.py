"""`fleet trust` (record host keys on purpose) and `fleet status` (what each device has and how it is).

Connections refuse keys they do not know (ssh.py); trust() is the one explicit step that learns
them. It shows every fingerprint so the user can compare it with the device's console, never
overwrites a changed key unless asked (replace=True), and checks pinned keys instead of recording
them. The known_hosts file is rewritten atomically under a lock.

status() reads the device layout of fleet/paths.py (any part may be missing: then it reports none).
"""
from __future__ import annotations

import fcntl
import os
import posixpath
import re
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import paramiko

from edge_sdk.errors import DeviceError, EdgeError
from edge_sdk.fleet.config import Device
from edge_sdk.fleet.group import FleetResults, for_each_device
from edge_sdk.fleet.paths import CURRENT_RUNTIME, MODELS, PACKAGES, RUNTIME
from edge_sdk.fleet.ssh import Connection
from edge_sdk.fleet.ssh_connect import fingerprint, known_hosts_name, tcp_connect, wait_for_banner

_SHA = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class TrustRecord:
    device: Device
    key_type: str
    fingerprint: str
    state: str  # "added", "known" (already recorded), "pinned" (matches the fleet file), "replaced"
    key: paramiko.PKey = field(repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.device.name:<16} {self.device.address:<28} {self.key_type} {self.fingerprint}  {self.state}"


def fetch_host_key(device: Device, *, timeout: float | None = None) -> paramiko.PKey:
    """The key the device's sshd offers, without logging in (timeout None: the device's connect_timeout)."""
    timeout = device.connect_timeout if timeout is None else timeout
    sock = tcp_connect(device, timeout)
    try:
        wait_for_banner(device, sock, timeout)
    except DeviceError:
        sock.close()
        raise
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = timeout
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except (OSError, paramiko.SSHException, EOFError) as e:
        raise DeviceError(f"device {device}: SSH handshake failed: {e or type(e).__name__}") from None
    finally:
        transport.close()


def trust(devices: Sequence[Device], known_hosts_path: str | os.PathLike, *, replace: bool = False,
          max_workers: int | None = None, timeout: float | None = None) -> FleetResults:
    """Fetch each device's host key and record it; per-device results carry a TrustRecord.
    A key that differs from the recorded one fails that device unless replace=True."""
    path = Path(known_hosts_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _locked(path):
        known = _load(path)

        def one(device: Device) -> TrustRecord:
            key = fetch_host_key(device, timeout=timeout)
            record = lambda state: TrustRecord(device, key.get_name(), fingerprint(key), state, key)  # noqa: E731
            if device.host_key:
                pin = device.host_key
                if pin == fingerprint(key) or pin == f"{key.get_name()} {key.get_base64()}":
                    return record("pinned")
                raise DeviceError(f"device {device}: offers {key.get_name()} {fingerprint(key)}, which does not "
                                  f"match the host_key pinned in {device.where}")
            name = known_hosts_name(device)
            entries = known.lookup(name) or {}
            old = entries.get(key.get_name())
            if old is not None and old == key:
                return record("known")
            if entries and not replace:
                was = ", ".join(f"{t} {fingerprint(k)}" for t, k in entries.items())
                raise DeviceError(
                    f"device {device}: host key CHANGED: recorded {was}, the device offers "
                    f"{key.get_name()} {fingerprint(key)}; not replacing it",
                    hint="if you know the device was reinstalled, run `edge-sdk fleet trust --replace`")
            return record("replaced" if entries else "added")

        results = for_each_device(devices, one, max_workers=max_workers)
        changed = [r for r in results if r.ok and r.value.state in ("added", "replaced")]
        if changed:
            for r in changed:
                known[known_hosts_name(r.device)] = {r.value.key_type: r.value.key}
            _save(known, path)
    return results


def _load(path: Path) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    if path.exists():
        try:
            keys.load(os.fspath(path))
        except (OSError, paramiko.SSHException) as e:
            raise DeviceError(f"cannot read known_hosts {path}: {e}") from None
    return keys


def _save(keys: paramiko.HostKeys, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for entry in keys._entries:
                line = entry.to_line()
                if line:
                    f.write(line)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _locked:
    def __init__(self, path: Path):
        self.lock_path = path.with_name(path.name + ".lock")

    def __enter__(self):
        self.fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        os.close(self.fd)


# -- status ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelState:
    current: str | None  # where models/<model>/current points (None: no link)
    package_sha256: str | None  # the sha256 in that target's name, if any


@dataclass(frozen=True)
class DeviceStatus:
    device: Device
    reachable: bool
    error: str | None = None
    arch: str | None = None  # uname -m
    free_bytes: int | None = None  # free space of the home file system
    temperature_c: float | None = None
    clock_mhz: float | None = None
    runtime_versions: tuple[str, ...] = ()
    runtime_current: str | None = None
    packages: tuple[str, ...] = ()  # sha256 of every stored package
    models: dict[str, ModelState] = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["device"] = self.device.name
        d["address"] = self.device.address
        return d


def status(device: Device, *, known_hosts: str | os.PathLike | None = None, timeout: float | None = None,
           connection_factory: Callable[..., Connection] = Connection) -> DeviceStatus:
    """Everything `fleet status` shows for one device; an unreachable device is a status, not an error."""
    try:
        with connection_factory(device, known_hosts=known_hosts, connect_timeout=timeout) as c:
            c.open()  # connect now, so a refusal is reported as unreachable
            return _gather(c)
    except EdgeError as e:  # every device gets a row: a bad pinned key or a failed command is its error
        return DeviceStatus(device, reachable=False, error=str(e))


def fleet_status(devices: Sequence[Device], *, known_hosts: str | os.PathLike | None = None,
                 max_workers: int | None = None, timeout: float | None = None,
                 connection_factory: Callable[..., Connection] = Connection) -> FleetResults:
    return for_each_device(devices, lambda d: status(d, known_hosts=known_hosts, timeout=timeout,
                                                     connection_factory=connection_factory),
                           max_workers=max_workers)


def _gather(c: Connection) -> DeviceStatus:
    arch = c.run(["uname", "-m"], timeout=30).stdout.strip() or None
    df = c.run(["df", "-Pk", "."], check=False, timeout=30).stdout.splitlines()
    free = None
    if len(df) >= 2 and len(df[-1].split()) >= 4 and df[-1].split()[3].isdigit():
        free = int(df[-1].split()[3]) * 1024
    temp = _number(c.read_text("/sys/class/thermal/thermal_zone0/temp"), 1000.0)
    clock = _number(c.read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"), 1000.0)
    versions = tuple(sorted(n for n, mode in c.listdir(RUNTIME) if stat.S_ISDIR(mode) and n != "current"))
    current_rt = c.readlink(CURRENT_RUNTIME)
    packages = tuple(sorted(n[: -len(".edgepkg")] for n, mode in c.listdir(PACKAGES)
                            if n.endswith(".edgepkg") and _SHA.fullmatch(n[: -len(".edgepkg")])))
    models = {}
    for name, mode in c.listdir(MODELS):
        if stat.S_ISDIR(mode):
            link = c.readlink(posixpath.join(MODELS, name, "current"))
            sha = _SHA.search(link) if link else None
            models[name] = ModelState(link, sha.group(0) if sha else None)
    return DeviceStatus(c.device, reachable=True, arch=arch, free_bytes=free, temperature_c=temp,
                        clock_mhz=clock, runtime_versions=versions,
                        runtime_current=posixpath.basename(current_rt.rstrip("/")) if current_rt else None,
                        packages=packages, models=dict(sorted(models.items())))


def _number(text: str | None, divisor: float) -> float | None:
    try:
        return round(int(text.strip()) / divisor, 1) if text else None
    except ValueError:
        return None
