"""Emulated Raspberry Pis: real aarch64 Debian userlands (bookworm or trixie, the suites Raspberry Pi
OS 64-bit is built on), each with its own arm64 sshd.

Each device is a copy-on-write overlay over one cached arm64 root filesystem, with its own
hostname (UTS namespace), network namespace reached through a veth pair (host 10.a.b.1, device
10.a.b.2), host key and authorized_keys. Its sshd is the rootfs's arm64 /usr/sbin/sshd, run by
qemu-user-static through binfmt_misc with QEMU_CPU=cortex-a53 (a Pi 3's core); every session
the SDK opens runs aarch64 code. Emulated, so slow: ~0.5 s per SSH login, models run ~10-50x
slower than on a Pi. Needs root, debootstrap, qemu-user-static and binfmt-support.

    python -m edge_sdk.devices.emulated_pi build [--suite trixie]      # once per suite, ~4-6 min, cached
    python -m edge_sdk.devices.emulated_pi start --n 1 --dir /tmp/pis [--trust] [--suite trixie]
    EDGE_SDK_HOME=/tmp/pis edge-sdk fleet status --fleet /tmp/pis/fleet.yaml   # with --trust
    python -m edge_sdk.devices.emulated_pi stop --dir /tmp/pis

Cleanliness: each device's mounts (overlay, /proc, /dev, /run) are made inside a private mount
namespace whose only processes are the device's, and its pid namespace ends when its sshd (pid
1 there) is killed; so stopping a device, or even killing it, leaves no mount behind. stop()
then deletes the network namespace (which removes the veth pair) and the device folder.
"""
from __future__ import annotations

import argparse
import fcntl
import ipaddress
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.devices.base import StandInError, StandInFleet, keygen, kill_quietly, public_host_key, run

SUITES = ("bookworm", "trixie")  # Raspberry Pi OS 12 (Python 3.11) and 13 (Python 3.13)
SUITE_ENV = "EDGE_SDK_PI_SUITE"  # the default suite when none is given (bookworm if unset)
PACKAGES = "python3,python3-numpy,openssh-server,coreutils"
MIRROR = "http://deb.debian.org/debian"
USER, UID = "pi", 1000
STATE = "emulated.json"
_BUILD_REV = "1"  # bump when the rootfs recipe changes

_SSHD_CONFIG = """\
# written by edge_sdk.devices.emulated_pi
ListenAddress {ip}:22
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers {user}
Subsystem sftp internal-sftp
SetEnv QEMU_CPU=cortex-a53
UseDNS no
PrintMotd no
MaxStartups 32:30:64
LogLevel VERBOSE
"""

# Run (host /bin/sh) inside fresh mount/UTS/pid namespaces, in the device's network namespace.
_BOOT = r"""
set -eu
lower=$1 upper=$2 work=$3 root=$4 name=$5 log=$6
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p -m 755 "$root/run/sshd"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
hostname "$name"
export QEMU_CPU=cortex-a53
exec chroot "$root" /usr/sbin/sshd -D -f /etc/ssh/sshd_config.edge-sdk -E "$log"
"""


class EmulatedError(StandInError):
    """An emulated Pi could not be built, started or stopped."""


def cache_root() -> Path:
    return Path(os.environ.get("EDGE_SDK_CACHE") or "~/.cache/edge-sdk").expanduser()


def default_suite() -> str:
    return check_suite(os.environ.get(SUITE_ENV) or SUITES[0])


def check_suite(suite: str) -> str:
    if suite not in SUITES:
        raise EmulatedError(f"unknown suite {suite!r}: choose one of {', '.join(SUITES)}")
    return suite


def rootfs_dir(suite: str | None = None) -> Path:
    return cache_root() / "rootfs" / f"{check_suite(suite or default_suite())}-arm64-r{_BUILD_REV}"


# -- prerequisites and the root filesystem -------------------------------------------------------
def check_host() -> None:
    """Root, the tools, and binfmt_misc running aarch64 ELF files through qemu (registered if needed)."""
    if os.geteuid() != 0:
        raise EmulatedError("emulated Pis need root (namespaces, mounts, chroot)")
    for tool, pkg in (("debootstrap", "debootstrap"), ("qemu-aarch64-static", "qemu-user-static"),
                      ("update-binfmts", "binfmt-support"), ("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            raise EmulatedError(f"'{tool}' not found: apt-get install {pkg}")
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if not (binfmt / "status").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", os.fspath(binfmt)])
    entry = binfmt / "qemu-aarch64"
    if not entry.exists():
        _run(["update-binfmts", "--enable", "qemu-aarch64"])
    text = entry.read_text() if entry.exists() else ""
    if "enabled" not in text.splitlines()[:1] or "F" not in _flags(text):
        raise EmulatedError(f"binfmt_misc entry {entry} is not enabled with the F (fix-binary) flag, so a "
                            f"chroot cannot find qemu:\n{text}\nrun: update-binfmts --enable qemu-aarch64")


def _flags(text: str) -> str:
    return next((ln.split(":", 1)[1] for ln in text.splitlines() if ln.startswith("flags:")), "")


def build_rootfs(suite: str | None = None, *, mirror: str = MIRROR, log=print) -> Path:
    """The cached arm64 rootfs of `suite` (debootstrap, ~4-6 min once): user `pi` (uid 1000, key login only), no host keys."""
    final = rootfs_dir(suite := suite or default_suite())
    if (final / ".edge-sdk-rootfs").exists():
        return final
    check_host()
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:  # one build: a second process waits, then
        fcntl.flock(lock, fcntl.LOCK_EX)  # finds the first's rootfs (no second debootstrap)
        return final if (final / ".edge-sdk-rootfs").exists() else _build_rootfs(suite, final, mirror, log)


def _build_rootfs(suite: str, final: Path, mirror: str, log) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.build-", dir=final.parent))
    os.chmod(tmp, 0o755)
    t0 = time.monotonic()
    try:
        log(f"emulated_pi: debootstrap {suite} arm64 into {tmp} (takes minutes)")
        p = subprocess.run(["debootstrap", "--arch=arm64", "--variant=minbase", f"--include={PACKAGES}",
                            suite, os.fspath(tmp), mirror], capture_output=True, text=True)
        if p.returncode != 0:
            raise EmulatedError(f"debootstrap failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
        for key in (tmp / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        _run(["chroot", os.fspath(tmp), "useradd", "-m", "-u", str(UID), "-s", "/bin/bash", "-p", "*", USER])
        _run(["chroot", os.fspath(tmp), "apt-get", "clean"])
        shutil.rmtree(tmp / "var/lib/apt/lists", ignore_errors=True)
        (tmp / "var/lib/apt/lists/partial").mkdir(parents=True)
        (tmp / ".edge-sdk-rootfs").write_text(json.dumps(
            {"suite": suite, "packages": PACKAGES, "mirror": mirror, "seconds": round(time.monotonic() - t0, 1)}))
        if final.exists():
            _rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            _rmtree(tmp)
    log(f"emulated_pi: rootfs ready in {time.monotonic() - t0:.0f} s: {final}")
    return final


# -- devices --------------------------------------------------------------------------------------
@dataclass
class PiDevice:
    name: str
    ip: str  # the device's address (inside its network namespace)
    host_ip: str  # the host end of the veth pair
    netns: str
    veth: str
    dir: str
    pid: int | None = None  # the `unshare` process holding the device's namespaces
    port: int = 22
    suite: str = SUITES[0]  # the Debian suite of its root filesystem

    host_key_file = property(lambda self: Path(self.dir) / "upper/etc/ssh/ssh_host_ed25519_key")
    log = property(lambda self: Path(self.dir) / "sshd.log")

    def public_host_key(self) -> str:
        return public_host_key(self)


class EmulatedFleet(StandInFleet):
    """Start with EmulatedFleet.start(n, root); reattach with EmulatedFleet.load(root)."""

    STATE = STATE
    DEVICE = PiDevice
    Error = EmulatedError
    KIND = "emulated Pis"
    CLIENT_COMMENT = "edge-sdk emulated-pi client"
    READY_TIMEOUT = 120.0
    POLL = 0.1

    @classmethod
    def _check_start(cls, n: int, suite: str | None = None) -> None:
        check_host()
        if not 1 <= n <= 16:
            raise EmulatedError("--n must be from 1 to 16")
        build_rootfs(suite)

    def _create(self, n: int, suite: str | None = None) -> None:
        suite = suite or default_suite()
        for i, net in enumerate(_free_subnets(n)):
            hosts = list(net.hosts())
            dev = PiDevice(f"pi{i + 1}", str(hosts[1]), str(hosts[0]), f"edge-pi-{self.fleet_id}-{i + 1}",
                           f"ep{self.fleet_id}{i + 1}", os.fspath(self.root / f"pi{i + 1}"), suite=suite)
            self.devices.append(dev)
            self._provision(dev)
            self._save()
            self._network(dev)

    def _remove_device(self, dev: PiDevice) -> list[str]:
        """Delete the device's network namespace (and veth) and its folder."""
        problems = []
        if Path(f"/run/netns/{dev.netns}").exists():
            p = _run(["ip", "netns", "del", dev.netns], check=False)
            if p.returncode != 0:
                problems.append(f"ip netns del {dev.netns}: {p.stderr.strip()}")
        _run(["ip", "link", "del", dev.veth], check=False)  # normally gone with the namespace
        try:
            _rmtree(Path(dev.dir))
        except EmulatedError as e:
            problems.append(str(e))
        return problems

    def _leftovers(self) -> list[str]:
        left = [m for m in _mounts() if any(m.startswith(d.dir) for d in self.devices)]
        return [f"mounts left: {left}"] if left else []

    def _power_off(self, dev: PiDevice, proc: subprocess.Popen | None) -> None:
        """Every process in the device's pid namespace dies, its mounts go with them."""
        if dev.pid and _is_ours(dev.pid, dev.dir):
            kill_quietly(dev.pid)  # unshare --kill-child: its child (pid 1 there) gets SIGKILL
            if proc is not None:
                proc.wait(10)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{dev.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        deadline = time.monotonic() + 10  # the namespace's mounts go when its last process has gone
        while any(m.startswith(dev.dir) for m in _mounts()) and time.monotonic() < deadline:
            time.sleep(0.02)

    # -- steps ---------------------------------------------------------------------------------
    def _provision(self, dev: PiDevice) -> None:
        d = Path(dev.dir)
        for sub in ("upper/etc/ssh", "work", "root"):
            (d / sub).mkdir(parents=True)
        os.chmod(d / "upper", 0o755)
        upper = d / "upper"
        for p in ("etc", "etc/ssh"):
            os.chmod(upper / p, 0o755)
        keygen(dev.host_key_file, f"{dev.name} host key", error=EmulatedError)
        (upper / "etc/ssh/sshd_config.edge-sdk").write_text(_SSHD_CONFIG.format(ip=dev.ip, user=USER))
        (upper / "etc/hostname").write_text(dev.name + "\n")
        ssh_dir = upper / "home" / USER / ".ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        os.chmod(upper / "home", 0o755)
        shutil.copyfile(self.client_key.with_suffix(".pub"), ssh_dir / "authorized_keys")
        for p in (upper / "home" / USER, ssh_dir, ssh_dir / "authorized_keys"):
            os.chown(p, UID, UID)
        os.chmod(upper / "home" / USER, 0o755)

    def _network(self, dev: PiDevice) -> None:
        ns = ["ip", "netns", "exec", dev.netns]
        _run(["ip", "netns", "add", dev.netns])
        _run(["ip", "link", "add", dev.veth, "type", "veth", "peer", "name", "eth0", "netns", dev.netns])
        _run(["ip", "addr", "add", f"{dev.host_ip}/30", "dev", dev.veth])
        _run(["ip", "link", "set", dev.veth, "up"])
        _run([*ns, "ip", "addr", "add", f"{dev.ip}/30", "dev", "eth0"])
        _run([*ns, "ip", "link", "set", "eth0", "up"])
        _run([*ns, "ip", "link", "set", "lo", "up"])

    def _spawn(self, dev: PiDevice) -> None:
        d = Path(dev.dir)
        shutil.rmtree(d / "work", ignore_errors=True)
        (d / "work").mkdir()
        log = d / "upper/var/log/sshd.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        dev.log.unlink(missing_ok=True)
        dev.log.symlink_to(log)
        argv = ["ip", "netns", "exec", dev.netns, "unshare", "--mount", "--uts", "--pid", "--fork",
                "--kill-child=SIGKILL", "/bin/sh", "-c", _BOOT, "edge-pi-boot",
                os.fspath(rootfs_dir(dev.suite)), os.fspath(d / "upper"), os.fspath(d / "work"), os.fspath(d / "root"),
                dev.name, "/var/log/sshd.log"]
        boot_log = open(d / "boot.log", "wb")  # noqa: SIM115 - kept by the child
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=boot_log, stderr=boot_log,
                                start_new_session=True)
        boot_log.close()
        self._procs[dev.name] = proc
        dev.pid = proc.pid

    def _answers(self, dev: PiDevice) -> bool:
        """Ready when sshd answers with its banner (it is listening and running under qemu)."""
        try:
            with socket.create_connection((dev.ip, 22), timeout=2) as s:
                s.settimeout(10)
                return s.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def _exit_message(self, dev: PiDevice, proc: subprocess.Popen) -> str:
        boot = (Path(dev.dir) / "boot.log").read_text(errors="replace")[-2000:]
        return (f"{dev.name} exited with {proc.returncode} while starting:\n{boot}\n"
                + dev.log.read_text(errors="replace")[-2000:])

    def _fleet_yaml_lines(self) -> list[str]:
        suites = ", ".join(sorted({d.suite for d in self.devices}))
        lines = [f"# written by edge_sdk.devices.emulated_pi: arm64 Debian {suites} under qemu, one namespace each",
                 f"defaults: {{user: {USER}, key: {self.client_key}, target: pi3}}", "devices:"]
        lines += [f"  {d.name}: {{host: {d.ip}, tags: [emulated]}}" for d in self.devices]
        return lines + ["groups:", "  emulated: {match: {tags: [emulated]}}", ""]


# -- helpers --------------------------------------------------------------------------------------
def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    return run(argv, check=check, error=EmulatedError)


def _free_subnets(n: int) -> list[ipaddress.IPv4Network]:
    """n /30 networks in 10.200.0.0/13 that no interface or route here uses (random, so fleets of
    several engineers do not collide)."""
    used = [ipaddress.ip_network(w, strict=False) for line in _run(["ip", "-4", "route", "show", "table", "all"]).stdout
            .splitlines() for w in line.split()[:1] if w[0].isdigit()]
    out: list[ipaddress.IPv4Network] = []
    rng = random.Random()
    while len(out) < n:
        net = ipaddress.ip_network(f"10.{rng.randint(200, 207)}.{rng.randint(0, 255)}.{rng.randrange(0, 256, 4)}/30")
        if not any(net.overlaps(u) for u in used + out):
            out.append(net)
    return out


def _rmtree(path: Path) -> None:
    """rm -rf that never descends into a mount (debootstrap mounts /proc, /sys, maybe /dev in
    the target; a failed run may leave them): unmount first, refuse if that fails."""
    path = Path(path).resolve()
    inside = [m for m in _mounts() if m == os.fspath(path) or m.startswith(os.fspath(path) + "/")]
    for m in sorted(inside, key=len, reverse=True):
        _run(["umount", "-R", "-l", m], check=False)
    left = [m for m in _mounts() if m == os.fspath(path) or m.startswith(os.fspath(path) + "/")]
    if left:
        raise EmulatedError(f"not deleting {path}: still mounted there: {left}")
    shutil.rmtree(path, ignore_errors=True)


def _mounts() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


def _is_ours(pid: int, marker: str) -> bool:
    """The pid still runs our boot command (pids get reused)."""
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help=f"build (or find) the cached arm64 rootfs under {cache_root()}/rootfs")
    b.add_argument("--mirror", default=MIRROR)
    b.add_argument("--suite", choices=SUITES, help=f"Debian suite (default: ${SUITE_ENV} or {SUITES[0]})")
    s = sub.add_parser("start", help="start N emulated Pis and write DIR/fleet.yaml")
    s.add_argument("--n", type=int, default=1)
    s.add_argument("--dir", required=True)
    s.add_argument("--trust", action="store_true", help="also write DIR/known_hosts (use EDGE_SDK_HOME=DIR)")
    s.add_argument("--suite", choices=SUITES, help=f"Debian suite (default: ${SUITE_ENV} or {SUITES[0]})")
    t = sub.add_parser("stop", help="stop the emulated Pis in DIR and delete their namespaces and DIR")
    t.add_argument("--dir", required=True)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            print(build_rootfs(args.suite, mirror=args.mirror))
        elif args.cmd == "start":
            t0 = time.monotonic()
            fleet = EmulatedFleet.start(args.n, args.dir, trust=args.trust, suite=args.suite)
            for d in fleet.devices:
                print(f"{d.name}: {USER}@{d.ip} (netns {d.netns}, pid {d.pid})")
            print(f"started in {time.monotonic() - t0:.1f} s; fleet file: {fleet.fleet_yaml}")
        else:
            EmulatedFleet.load(args.dir).stop()
    except EmulatedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
