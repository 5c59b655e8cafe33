"""A fleet of real OpenSSH servers on 127.0.0.2, 127.0.0.3, ... for tests and demos.

Each device has its own host key, Unix user, home, authorized_keys and sshd (Debian's
/usr/sbin/sshd, started without systemd in ~20 ms), so the SDK talks to it exactly as to a Pi
over the network. Needs root (it creates users) and /usr/sbin/sshd.

    python -m edge_sdk.devices.loopback start --n 3 --dir /tmp/fleet [--trust]
    EDGE_SDK_HOME=/tmp/fleet edge-sdk fleet status --fleet /tmp/fleet/fleet.yaml   # with --trust
    python -m edge_sdk.devices.loopback stop --dir /tmp/fleet

Layout of DIR: fleet.yaml, client_ed25519 (the key every device authorizes), loopback.json (state),
known_hosts (only with --trust), and one folder per device with sshd_config, sshd.log, its host key
and home/ (the user's home: ~/.edge-sdk lands there). Ports are picked free on each address, so
several fleets (several engineers) can run side by side; users are named per fleet
(ep<fleet id>d<n>) and deleted by stop, so no two fleets share a home.
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.devices.base import StandInError, StandInFleet, keygen, kill_quietly, public_host_key, run

SSHD = "/usr/sbin/sshd"
STATE = "loopback.json"

_CONFIG = """\
# written by edge_sdk.devices.loopback
ListenAddress {ip}:{port}
HostKey {dir}/ssh_host_ed25519_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers {user}
Subsystem sftp internal-sftp
PrintMotd no
MaxStartups 64:30:128
MaxSessions 32
LogLevel VERBOSE
"""


class LoopbackError(StandInError):
    pass


@dataclass
class LoopDevice:
    name: str
    ip: str
    port: int
    user: str
    dir: str
    pid: int | None = None

    home = property(lambda self: Path(self.dir) / "home")
    config = property(lambda self: Path(self.dir) / "sshd_config")
    log = property(lambda self: Path(self.dir) / "sshd.log")
    host_key_file = property(lambda self: Path(self.dir) / "ssh_host_ed25519_key")

    def public_host_key(self) -> str:
        """'ssh-ed25519 AAAA...' as a fleet file's host_key or a known_hosts line takes it."""
        return public_host_key(self)


class LoopbackFleet(StandInFleet):
    """Start with LoopbackFleet.start(n, root, first_ip=2); reattach with LoopbackFleet.load(root)."""

    STATE = STATE
    DEVICE = LoopDevice
    Error = LoopbackError
    KIND = "loopback devices"
    CLIENT_COMMENT = "edge-sdk loopback client"

    @classmethod
    def _check_start(cls, n: int, *, first_ip: int = 2) -> None:
        if os.geteuid() != 0:
            raise LoopbackError("the loopback fleet creates Unix users: run it as root")
        if not os.access(SSHD, os.X_OK):
            raise LoopbackError(f"{SSHD} not found: apt-get install openssh-server")
        if not 1 <= n <= 250 - first_ip:
            raise LoopbackError(f"--n must be from 1 to {250 - first_ip}")

    def _create(self, n: int, *, first_ip: int = 2) -> None:
        os.chmod(self.root, 0o711)
        _check_traversable(self.root)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        for i in range(n):
            ip = f"127.0.0.{first_ip + i}"
            name = f"loop{i + 1}"
            dev = LoopDevice(name, ip, _free_port(ip), f"ep{self.fleet_id}d{i + 1}", os.fspath(self.root / name))
            self.devices.append(dev)
            self._provision(dev)

    def _power_off(self, dev: LoopDevice, proc: subprocess.Popen | None) -> None:
        if dev.pid and _is_our_sshd(dev.pid, dev.config):
            # sshd's per-connection children call setsid(), so the listener's process group does
            # not hold them: kill them by parentage, children before parents, so that each is
            # reaped by its living parent (an orphan's zombie would wait for init, and a zombie
            # still owned by the device user makes userdel refuse)
            for pid in reversed(_descendants(dev.pid)):
                kill_quietly(pid)  # a cut connection, as when a Pi loses power
                deadline = time.monotonic() + 0.5
                while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.002)  # until its parent has reaped it
            os.kill(dev.pid, signal.SIGTERM)
            _wait_gone(dev.pid, proc)
        for pid in _processes_of(dev.user):  # commands orphaned by a closed channel keep running
            kill_quietly(pid)

    def _remove_device(self, dev: LoopDevice) -> list[str]:
        # -f: a zombie left to init (a command orphaned before we stopped the device) still
        # counts as the user's process, and init reaps it in its own time
        p = _run(["userdel", "-f", dev.user], check=False, retry_lock=True)
        shutil.rmtree(dev.dir, ignore_errors=True)
        if p.returncode not in (0, 6):  # 6: no such user (never created)
            return [f"userdel {dev.user}: {p.stderr.strip()}"]
        return []

    def start_device(self, name: str, *, new_host_key: bool = False, timeout: float | None = None) -> None:
        """Bring a stopped device back on the same address and port (optionally reinstalled:
        a new host key, which a client that trusted the old one must refuse)."""
        dev = self[name]
        if dev.pid:
            raise LoopbackError(f"{name} is running")
        if new_host_key:
            for f in (dev.host_key_file, dev.host_key_file.with_suffix(".pub")):
                f.unlink(missing_ok=True)
            keygen(dev.host_key_file, f"{name} host key", error=LoopbackError)
        super().start_device(name, timeout=timeout)

    # -- steps ---------------------------------------------------------------------------------
    def _provision(self, dev: LoopDevice) -> None:
        Path(dev.dir).mkdir(mode=0o711)
        os.chmod(dev.dir, 0o711)
        keygen(dev.host_key_file, f"{dev.name} host key", error=LoopbackError)
        _run(["useradd", "-M", "-d", os.fspath(dev.home), "-s", "/bin/sh", "-p", "*", dev.user], retry_lock=True)
        ssh_dir = dev.home / ".ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        shutil.copyfile(self.client_key.with_suffix(".pub"), ssh_dir / "authorized_keys")
        os.chmod(dev.home, 0o755)
        for p in (dev.home, ssh_dir, ssh_dir / "authorized_keys"):
            shutil.chown(p, dev.user, dev.user)
        dev.config.write_text(_CONFIG.format(ip=dev.ip, port=dev.port, dir=dev.dir, user=dev.user))

    def _spawn(self, dev: LoopDevice) -> None:
        dev.log.touch()
        proc = subprocess.Popen([SSHD, "-D", "-f", os.fspath(dev.config), "-E", os.fspath(dev.log)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self._procs[dev.name] = proc
        dev.pid = proc.pid

    def _exit_message(self, dev: LoopDevice, proc: subprocess.Popen) -> str:
        return f"sshd for {dev.name} ({dev.ip}:{dev.port}) exited with {proc.returncode}:\n" + dev.log.read_text()[-2000:]

    def _fleet_yaml_lines(self) -> list[str]:
        lines = ["# written by edge_sdk.devices.loopback: real sshd servers on loopback addresses",
                 f"defaults: {{key: {self.client_key}, target: host}}", "devices:"]
        lines += [f"  {d.name}: {{host: {d.user}@{d.ip}:{d.port}, tags: [loopback]}}" for d in self.devices]
        return lines + ["groups:", "  loopback: {match: {tags: [loopback]}}", ""]


# -- helpers --------------------------------------------------------------------------------------
def _run(argv: list[str], *, check: bool = True, retry_lock: bool = False) -> subprocess.CompletedProcess:
    return run(argv, check=check, retry_lock=retry_lock, error=LoopbackError)


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _check_traversable(root: Path) -> None:
    """The device users must reach their homes under root: every ancestor needs o+x."""
    for p in [root, *root.parents]:
        if not os.stat(p).st_mode & 0o001:
            raise LoopbackError(f"{p} is not searchable by other users (mode {oct(os.stat(p).st_mode & 0o777)}), "
                                f"so the device users cannot reach their homes; pick a --dir elsewhere (e.g. under /tmp)")


def _is_our_sshd(pid: int, config: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # sshd rewrites its title ("sshd: /usr/sbin/sshd -D -f CFG ... [listener]"): match a substring
    return b"sshd" in cmdline and b" " + os.fsencode(config) + b" " in cmdline.replace(b"\0", b" ") + b" "


def _wait_gone(pid: int, proc: subprocess.Popen | None, timeout: float = 5.0) -> None:
    if proc is not None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_quietly(pid)
            proc.wait()
        return
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            kill_quietly(pid)
            deadline += timeout
        time.sleep(0.01)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _processes_of(user: str) -> list[int]:
    """Live (non-zombie) processes of a device user: all ours, since the user is unique to the fleet."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and _alive(int(entry)):
                    out.append(int(entry))
            except OSError:
                continue
    return out


def _alive(pid: int) -> bool:
    """Running and not a zombie (a zombie whose parent is gone waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start N sshd devices and write DIR/fleet.yaml")
    s.add_argument("--n", type=int, default=3)
    s.add_argument("--dir", required=True)
    s.add_argument("--first-ip", type=int, default=2, help="last octet of the first address (127.0.0.X)")
    s.add_argument("--trust", action="store_true", help="also write DIR/known_hosts (use EDGE_SDK_HOME=DIR)")
    t = sub.add_parser("stop", help="stop the fleet in DIR, delete its users and DIR")
    t.add_argument("--dir", required=True)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "start":
            fleet = LoopbackFleet.start(args.n, args.dir, first_ip=args.first_ip, trust=args.trust)
            for d in fleet.devices:
                print(f"{d.name}: {d.user}@{d.ip}:{d.port} pid {d.pid}")
            print(f"fleet file: {fleet.fleet_yaml}")
        else:
            LoopbackFleet.load(args.dir).stop()
    except LoopbackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
