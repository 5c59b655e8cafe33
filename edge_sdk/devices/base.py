"""The life cycle the two sshd stand-in fleets share: loopback.py (real sshd servers on 127.0.0.x)
and emulated_pi.py (arm64 Debian userlands under qemu, one set of namespaces each).

    fleet = LoopbackFleet.start(3, "/tmp/fleet")          # or EmulatedFleet.start(1, "/tmp/pis", trust=True)
    fleet.stop_device("loop2"); fleet.start_device("loop2")   # a device loses power, comes back
    LoopbackFleet.load("/tmp/fleet").stop()               # reattach from the state file, stop everything

start() makes the folder, a client key every device authorizes, provisions the devices
(_create), spawns and waits for each, then writes the state file (STATE), fleet.yaml and, with
trust=True, known_hosts; a failure anywhere stops what was started. stop() powers every device
off, removes what each one set up (_remove_device) and the files start() wrote. A subclass names
STATE, Error and CLIENT_COMMENT and writes those steps.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar


class StandInError(RuntimeError):
    pass


class StandInFleet:
    """Start with Cls.start(n, root); reattach with Cls.load(root)."""

    STATE: ClassVar[str]  # the state file in root
    DEVICE: ClassVar[type]  # the device dataclass (its fields are the state file's)
    Error: ClassVar[type[StandInError]] = StandInError
    KIND: ClassVar[str] = "stand-in devices"  # for messages: "loopback devices", "emulated Pis"
    CLIENT_COMMENT: ClassVar[str] = "edge-sdk stand-in client"
    READY_TIMEOUT: ClassVar[float] = 10.0  # seconds a device may take to answer after its spawn
    POLL: ClassVar[float] = 0.005

    def __init__(self, root: Path, fleet_id: str, devices: list):
        self.root, self.fleet_id, self.devices = Path(root), fleet_id, devices
        self._procs: dict[str, subprocess.Popen] = {}

    fleet_yaml = property(lambda self: self.root / "fleet.yaml")
    client_key = property(lambda self: self.root / "client_ed25519")

    def __getitem__(self, name: str):
        return {d.name: d for d in self.devices}[name]

    # -- life cycle ------------------------------------------------------------------------------
    @classmethod
    def start(cls, n: int, root: str | os.PathLike, *, trust: bool = False, timeout: float | None = None, **options):
        cls._check_start(n, **options)
        root = Path(root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        if (root / cls.STATE).exists():
            raise cls.Error(f"{root} already holds {cls.KIND}: stop them first (stop --dir {root})")
        fleet = cls(root, secrets.token_hex(3), [])
        try:
            keygen(fleet.client_key, cls.CLIENT_COMMENT, error=cls.Error)
            fleet._create(n, **options)
            fleet._save()
            for dev in fleet.devices:
                fleet._spawn(dev)
            fleet._save()
            for dev in fleet.devices:
                fleet._wait_ready(dev, cls.READY_TIMEOUT if timeout is None else timeout)
            fleet._save()
            write_atomic(fleet.fleet_yaml, "\n".join(fleet._fleet_yaml_lines()), 0o644)
            if trust:
                fleet.write_known_hosts(root / "known_hosts")
        except BaseException:
            fleet.stop()
            raise
        return fleet

    @classmethod
    def load(cls, root: str | os.PathLike):
        root = Path(root).resolve()
        try:
            state = json.loads((root / cls.STATE).read_text())
        except FileNotFoundError:
            raise cls.Error(f"no {cls.KIND} in {root} ({cls.STATE} missing)") from None
        return cls(root, state["fleet_id"], [cls.DEVICE(**d) for d in state["devices"]])

    def stop(self) -> None:
        """Power every device off, undo what it set up, delete what start() wrote."""
        for dev in self.devices:
            self.stop_device(dev.name)
        problems = []
        for dev in self.devices:
            problems += self._remove_device(dev)
        for name in (self.STATE, "fleet.yaml", "known_hosts", "client_ed25519", "client_ed25519.pub"):
            (self.root / name).unlink(missing_ok=True)
        try:
            self.root.rmdir()  # only if nothing else was put there
        except OSError:
            pass
        problems += self._leftovers()
        if problems:
            raise self.Error("stopped, but: " + "; ".join(problems))

    def stop_device(self, name: str) -> None:
        """Take one device down: every session it serves ends (a Pi losing power)."""
        dev = self[name]
        self._power_off(dev, self._procs.pop(name, None))
        dev.pid = None
        if (self.root / self.STATE).exists():
            self._save()

    def start_device(self, name: str, *, timeout: float | None = None) -> None:
        """Bring a stopped device back on the same address and port."""
        dev = self[name]
        if dev.pid:
            raise self.Error(f"{name} is running")
        self._spawn(dev)
        self._wait_ready(dev, self.READY_TIMEOUT if timeout is None else timeout)
        self._save()

    def write_known_hosts(self, path: str | os.PathLike) -> Path:
        """Record every device's key, as `edge-sdk fleet trust` would (for demos and tests)."""
        path = Path(path)
        lines = [f"{d.ip if d.port == 22 else f'[{d.ip}]:{d.port}'} {public_host_key(d)}\n" for d in self.devices]
        write_atomic(path, "".join(lines), 0o600)
        return path

    # -- the subclass's steps ----------------------------------------------------------------------
    @classmethod
    def _check_start(cls, n: int, **options) -> None:
        """Refuse before anything is written (not root, a tool missing, n out of range)."""

    def _create(self, n: int, **options) -> None:
        """Append and provision n devices (folders, keys, users or namespaces)."""
        raise NotImplementedError

    def _spawn(self, dev) -> None:
        """Start the device's server; set dev.pid and self._procs[dev.name]."""
        raise NotImplementedError

    def _answers(self, dev) -> bool:
        """The device accepts SSH connections."""
        try:
            with socket.create_connection((dev.ip, dev.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _exit_message(self, dev, proc: subprocess.Popen) -> str:
        return f"{dev.name} ({dev.ip}:{dev.port}) exited with {proc.returncode}:\n" + _tail(dev.log)

    def _power_off(self, dev, proc: subprocess.Popen | None) -> None:
        raise NotImplementedError

    def _remove_device(self, dev) -> list[str]:
        """Undo what _create set up for dev; the problems met (empty when clean)."""
        raise NotImplementedError

    def _leftovers(self) -> list[str]:
        return []

    def _fleet_yaml_lines(self) -> list[str]:
        raise NotImplementedError

    # -- shared steps --------------------------------------------------------------------------------
    def _wait_ready(self, dev, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        proc = self._procs.get(dev.name)
        while True:
            if proc is not None and proc.poll() is not None:
                raise self.Error(self._exit_message(dev, proc))
            if self._answers(dev):
                return
            if time.monotonic() > deadline:
                raise self.Error(f"{dev.name}: sshd not answering on {dev.ip}:{dev.port} after {timeout:g} s; "
                                 f"see {dev.log}")
            time.sleep(self.POLL)

    def _save(self) -> None:
        state = {"fleet_id": self.fleet_id, "devices": [asdict(d) for d in self.devices]}
        write_atomic(self.root / self.STATE, json.dumps(state, indent=1), 0o644)


# -- helpers both scripts use ------------------------------------------------------------------------
def public_host_key(dev) -> str:
    """'ssh-ed25519 AAAA...' as a fleet file's host_key or a known_hosts line takes it."""
    return " ".join(dev.host_key_file.with_suffix(".pub").read_text().split()[:2])


def run(argv: list[str], *, check: bool = True, retry_lock: bool = False,
        error: type[StandInError] = StandInError) -> subprocess.CompletedProcess:
    """subprocess.run capturing text; `error` on a non-zero exit when check. retry_lock: retry
    while another process holds /etc/passwd's lock (useradd/userdel)."""
    for attempt in range(50):
        p = subprocess.run(argv, capture_output=True, text=True)
        if not (retry_lock and p.returncode != 0 and "lock" in p.stderr.lower()):
            break
        time.sleep(0.05 + 0.01 * attempt)
    if check and p.returncode != 0:
        raise error(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def keygen(path: Path, comment: str, *, error: type[StandInError] = StandInError) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", os.fspath(path)], error=error)


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def write_atomic(path: Path, text: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""
