"""Deploy packages to devices: runtime bundle once, content-addressed upload, on-device checks, atomic switch.

    pkgs = [LocalPackage.load(p) for p in paths]        # verified here first (open_package)
    report = deploy(devices, pkgs)                      # FleetResults; each value a DeviceDeploy
    report.all_ok, [r.value.package_bytes_sent for r in report]

The device layout is fleet/paths.py's.

Why this order: nothing becomes `current` before its bytes were hashed on the device (sha256sum),
its signature was checked there (the bundle's verify_package.py: Ed25519 over the manifest, by a
key the host trusts and pushed to the device) and its golden pair ran there with the installed
runner (`edge-runner --expect`). A switch is `ln -s` to a temporary name then `mv -T` (rename(2)),
and the live copy is never touched before another checked copy is live (device_scripts.py), so at
every instant `current` names a complete, checked install. The whole device session holds the
device lock (device_lock.py): a concurrent deploy, rollback or tune waits rather than sweeping this
one's files. Leftovers of a cut connection are swept at the start of the next locked session,
never what `current` or `previous` names.
"""
from __future__ import annotations

import json
import posixpath
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.errors import DeviceError, EdgeError
from edge_sdk.fleet.config import Device
from edge_sdk.fleet.device_lock import device_lock
from edge_sdk.fleet.disk_space import on_disk, room_for
from edge_sdk.fleet.device_scripts import (EXTRACT_PACKAGE_SH, EXTRACT_RUNTIME_SH, GC_PACKAGES_SH, PLACE_RUNTIME_SH,
                                           SWITCH_SH, VERIFY_PACKAGE_SH)
from edge_sdk.fleet.group import FleetResults, for_each_device
from edge_sdk.fleet.paths import REMOTE_ROOT, RUNTIME, model_dir, package_file, runner
from edge_sdk.fleet.runtime_install import TRUSTED_KEYS, LocalBundle, _check_bundle_archive, install_runtime, \
    prepare
from edge_sdk.fleet.ssh import Connection
from edge_sdk.package import MANIFEST, MEMBERS, open_package, sha256_file
from edge_sdk.runtime.result import runner_segments

# The device-side scripts live in device_scripts.py; these names stay importable from here (the
# Ansible playbook in inventory.py and tune read them from deploy).
__all__ = ["EXTRACT_PACKAGE_SH", "EXTRACT_RUNTIME_SH", "PLACE_RUNTIME_SH", "SWITCH_SH", "DeployFailed", "DeviceDeploy",
           "LocalBundle", "LocalPackage", "PackageOutcome", "_check_bundle_archive", "_prepare", "check_golden_on_device",
           "deploy", "deploy_device", "install_package", "install_runtime"]
_prepare = prepare  # tune/device_runner.py's name for it

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
Progress = Callable[[str, str, int, int], None]  # (device name, step text, bytes done, bytes total)


@dataclass(frozen=True)
class LocalPackage:
    """A package checked on this machine, with what the device needs to check it again."""

    path: Path
    sha256: str
    size: int
    name: str  # models/<name>: "<model>-<variant>"
    arch: str
    target: str
    rtol: float
    atol: float
    members: dict = field(repr=False)  # member -> sha256
    segments: tuple[str, ...] = ()  # edge-runner's per-output golden check (runtime/result.runner_segments)

    @classmethod
    def load(cls, path: str | Path) -> LocalPackage:
        path = Path(path)
        with tempfile.TemporaryDirectory(prefix="edgepkg-check-") as tmp:
            m = open_package(path, Path(tmp)).manifest  # every member's sha256, no links or extras
        name = _SAFE.sub("_", f"{m['model']['name']}-{m['variant']}")
        return cls(path, sha256_file(path), path.stat().st_size, name, m["target"]["arch"], m["target"]["name"],
                   float(m["golden"]["rtol"]), float(m["golden"]["atol"]),
                   {n: v["sha256"] for n, v in m["members"].items()}, tuple(runner_segments(m)))

    def checklist(self) -> bytes:
        """sha256sum -c input for the extracted members."""
        return "".join(f"{self.members[n]}  {n}\n" for n in MEMBERS).encode()


@dataclass
class PackageOutcome:
    package: str  # local file name
    name: str
    sha256: str
    action: str = "failed"  # "installed", "unchanged", "failed"
    bytes_sent: int = 0
    golden: dict | None = None  # the runner's golden entry (ok, max_abs_err, ...)
    note: str = ""
    error: str | None = None


@dataclass
class DeviceDeploy:
    device: Device
    runtime: str = ""  # "installed", "present"
    runtime_bytes_sent: int = 0
    packages: list[PackageOutcome] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def package_bytes_sent(self) -> int:
        return sum(p.bytes_sent for p in self.packages)

    @property
    def bytes_sent(self) -> int:
        return self.runtime_bytes_sent + self.package_bytes_sent

    @property
    def ok(self) -> bool:
        return self.error is None and all(p.error is None for p in self.packages)


class DeployFailed(DeviceError):
    """A device's deploy failed; `.report` holds what did and did not happen there."""

    def __init__(self, report: DeviceDeploy, message: str):
        super().__init__(message)
        self.report = report


def deploy(devices: Sequence[Device], packages: Sequence[LocalPackage], *, known_hosts=None,
           max_workers: int = 4, progress: Progress | None = None, connect_timeout: float | None = None,
           connection_factory: Callable[..., Connection] = Connection) -> FleetResults:
    """Deploy every package to every device. Every device is connected to at once (group.py's pool, which
    grows with the fleet: a silent device costs one connect timeout, in parallel with the others); the
    transfers and installs run on at most max_workers devices at once. connect_timeout None: each
    device's own (the fleet file's). Never stops at a failed device; each result's value (or
    error.report) is a DeviceDeploy."""
    bundles = {arch: LocalBundle.for_arch(arch) for arch in sorted({p.arch for p in packages})}
    busy = threading.BoundedSemaphore(max_workers)

    def one(device: Device) -> DeviceDeploy:
        with connection_factory(device, known_hosts=known_hosts, connect_timeout=connect_timeout) as conn:
            try:
                conn.open()  # outside the semaphore: waiting on a silent device holds no transfer slot
            except EdgeError as e:
                raise DeployFailed(DeviceDeploy(device, error=str(e)), str(e)) from None
            with busy:
                report = deploy_device(conn, packages, bundles, progress=progress)
        if not report.ok:
            failed = [f"{p.package}: {p.error}" for p in report.packages if p.error]
            raise DeployFailed(report, report.error or "; ".join(failed))
        return report

    return for_each_device(devices, one)


def deploy_device(conn: Connection, packages: Sequence[LocalPackage], bundles: dict[str, LocalBundle], *,
                  progress: Progress | None = None) -> DeviceDeploy:
    """One device, packages in order; a failed package does not stop the next one."""
    dev = conn.device
    report = DeviceDeploy(dev)
    t0 = time.monotonic()
    say = (lambda text, done=0, total=0: progress(dev.name, text, done, total)) if progress else (lambda *a, **k: None)
    try:
        say("connecting")
        with device_lock(conn, "deploy"):
            return _deploy_locked(conn, packages, bundles, report, say, t0)
    except EdgeError as e:
        report.error = str(e)
        report.seconds = time.monotonic() - t0
        return report


def _deploy_locked(conn: Connection, packages, bundles, report: DeviceDeploy, say, t0: float) -> DeviceDeploy:
    dev = conn.device
    try:
        arch = prepare(conn)
        wanted = sorted({p.arch for p in packages})
        if wanted != [arch]:
            raise DeviceError(f"device {dev}: it is {arch}, but the packages are built for {', '.join(wanted)} "
                              f"(target {', '.join(sorted({p.target for p in packages}))})")
        report.runtime, report.runtime_bytes_sent = install_runtime(conn, bundles[arch], say=say)
    except EdgeError as e:
        report.error = str(e)
        report.seconds = time.monotonic() - t0
        return report
    for pkg in packages:
        outcome = PackageOutcome(pkg.path.name, pkg.name, pkg.sha256)
        report.packages.append(outcome)
        try:
            install_package(conn, pkg, bundles[arch], outcome, say=say)
        except EdgeError as e:
            outcome.action, outcome.error = "failed", str(e)
    try:
        _gc_packages(conn)
    except EdgeError:
        pass  # only housekeeping: a device that went away is reported above
    say("done" if report.ok else "FAILED")
    report.seconds = time.monotonic() - t0
    return report


def install_package(conn: Connection, pkg: LocalPackage, bundle: LocalBundle, outcome: PackageOutcome, *,
                    say=lambda *a, **k: None) -> None:
    """Upload (unless the device already holds these bytes), extract, check, golden-run, switch."""
    content = package_file(pkg.sha256)
    models = model_dir(pkg.name)
    label = f"{pkg.name} {pkg.sha256[:12]}"
    say(f"{label}: checking", 0, pkg.size)
    have = conn.sha256(content)
    current = conn.readlink(posixpath.join(models, "current"))
    if have == pkg.sha256 and current == pkg.sha256 and _members_ok(conn, posixpath.join(models, pkg.sha256), pkg):
        outcome.action = "unchanged"
        say(f"{label}: unchanged", pkg.size, pkg.size)
        return
    uploaded = False
    if have is not None and have != pkg.sha256:
        conn.run(["rm", "-f", content])
        outcome.note = f"removed a damaged copy (sha256 {have[:12]}...) and uploaded again"
    if have != pkg.sha256:
        outcome.bytes_sent = conn.put(pkg.path, content, sha256=pkg.sha256,
                                      progress=lambda done, total: say(f"{label}: upload", done, total))
        uploaded = True
    tmp = posixpath.join(models, f".{pkg.sha256}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        say(f"{label}: extract + sha256", pkg.size, pkg.size)
        with room_for(conn, models, on_disk([pkg.size]), step=f"extracting {label}", what="the extracted package"):
            conn.run(["sh", "-c", EXTRACT_PACKAGE_SH, "sh", content, tmp, MANIFEST, *MEMBERS],
                     input=pkg.checklist(), timeout=300)
        say(f"{label}: signature check on the device", pkg.size, pkg.size)
        verify_on_device(conn, tmp, pkg, runtime=posixpath.join(RUNTIME, bundle.id))
        say(f"{label}: golden check on the device", pkg.size, pkg.size)
        outcome.golden = check_golden_on_device(conn, tmp, pkg, runtime=posixpath.join(RUNTIME, bundle.id))
        say(f"{label}: switch", pkg.size, pkg.size)
        _switch(conn, models, pkg.sha256, tmp)
    except EdgeError:
        live = _live(conn, posixpath.join(models, "current"))  # a stopped switch may have made tmp live
        keep = live in (posixpath.basename(tmp), pkg.sha256)
        _cleanup(conn, *([] if keep else [tmp]), *([content] if uploaded and not keep else []))
        raise
    outcome.action = "installed"


def verify_on_device(conn: Connection, install_dir: str, pkg: LocalPackage, *, runtime: str) -> None:
    """The bundle's verifier: signature by a trusted key, every member as the signed manifest says."""
    r = conn.run(["sh", "-c", VERIFY_PACKAGE_SH, "sh", runtime, install_dir, TRUSTED_KEYS], check=False, timeout=300)
    if r.exit_code != 0:
        raise DeviceError(f"device {conn.device}: {pkg.path.name} {r.stderr.strip()[-600:] or 'refused'} "
                          f"(checked on the device, exit {r.exit_code})")


def check_golden_on_device(conn: Connection, install_dir: str, pkg: LocalPackage, *, runtime: str) -> dict:
    """Run the package's golden input with the device's runner; DeviceError on any mismatch."""
    j = lambda name: posixpath.join(install_dir, name)  # noqa: E731
    r = conn.run([runner(runtime), "--lib", j("model.so"), "--params", j("params.bin"),
                  "--input", j("golden_input.npy"), "--expect", j("golden_output.npy"), "--rtol", repr(pkg.rtol),
                  "--atol", repr(pkg.atol), *pkg.segments, "--warmup", "0", "--repeat", "1"], check=False,
                 timeout=900)
    if r.exit_code != 0:
        raise DeviceError(f"device {conn.device}: golden check of {pkg.path.name} failed on the device "
                          f"(edge-runner exit {r.exit_code}): {r.stderr.strip()[-600:]}")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])["golden"]
    except (IndexError, KeyError, ValueError):
        raise DeviceError(f"device {conn.device}: edge-runner printed no golden result: {r.stdout[-300:]}") from None


def _switch(conn: Connection, folder: str, sha: str, tmp: str) -> None:
    """tmp -> <sha>; previous -> old current; current -> <sha> (each a rename); drop other versions."""
    with device_lock(conn, "switch"):
        conn.run(["sh", "-c", SWITCH_SH, "sh", folder, sha, tmp, uuid.uuid4().hex[:8]], timeout=120)


def _gc_packages(conn: Connection) -> None:
    """Delete stored package files no model's current or previous names (old versions, failures)."""
    conn.run(["sh", "-c", GC_PACKAGES_SH, "sh", REMOTE_ROOT], check=False, timeout=120)


def _members_ok(conn: Connection, install_dir: str, pkg: LocalPackage) -> bool:
    r = conn.run(["sh", "-c", 'cd "$1" && sha256sum -c --quiet --strict -', "sh", install_dir],
                 input=pkg.checklist(), check=False, timeout=300)
    return r.exit_code == 0


def _live(conn: Connection, link: str) -> str | None:
    """What `link` names, or "?" when the device cannot say (then nothing is removed)."""
    try:
        return conn.readlink(link)
    except EdgeError:
        return "?"


def _cleanup(conn: Connection, *paths: str) -> None:
    """Best effort: on a cut connection this cannot run, and _prepare sweeps the names next time."""
    try:
        conn.run(["rm", "-rf", "--", *paths], check=False, timeout=60)
    except EdgeError:
        pass
