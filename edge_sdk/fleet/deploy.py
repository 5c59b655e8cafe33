"""Deploy packages to devices: runtime bundle once, content-addressed upload, on-device checks, atomic switch.

    pkgs = [LocalPackage.load(p) for p in paths]        # verified here first (open_package)
    report = deploy(devices, pkgs)                      # FleetResults; each value a DeviceDeploy
    report.all_ok, [r.value.package_bytes_sent for r in report]

The device layout is fleet/paths.py's.

Why this order: nothing becomes `current` before its bytes were hashed on the device (sha256sum)
and its golden pair ran there with the installed runner (`edge-runner --expect`, so the device
needs no Python). A switch is `ln -s` to a temporary name then `mv -T` (rename(2)), so at every
instant `current` names a complete, checked install. A failure at any step removes what this
attempt wrote and leaves `current` untouched; leftovers of a cut connection (temporary names
only) are swept at the start of the next deploy to that device.
"""
from __future__ import annotations

import json
import posixpath
import re
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.errors import DeviceError, EdgeError, PackageError
from edge_sdk.fleet.config import Device
from edge_sdk.fleet.group import FleetResults, for_each_device
from edge_sdk.fleet.paths import REMOTE_ROOT, RUNTIME, model_dir, package_file, runner
from edge_sdk.fleet.ssh import Connection
from edge_sdk.package import MANIFEST, MEMBERS, open_package, sha256_file

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
Progress = Callable[[str, str, int, int], None]  # (device name, step text, bytes done, bytes total)

# The device-side steps, POSIX sh + coreutils + tar only; arguments come as "$1"... never spliced
# into the text. The Ansible playbook (inventory.py) runs these same scripts.
EXTRACT_RUNTIME_SH = r"""set -e
arc=$1 tmp=$2 id=$3
tar -tzvf "$arc" | while IFS= read -r l; do case $l in -*|d*) ;; *)
  echo "refusing the runtime archive: a member is not a regular file or directory (a link could point outside the install root): $l" >&2; exit 4 ;; esac; done
tar -tzf "$arc" | while IFS= read -r m; do case $m in "$id"|"$id/"*) ;; *) m=..; esac; case /$m/ in */../*)
  echo "refusing the runtime archive: a member path leaves $id/ (path traversal)" >&2; exit 4 ;; esac; done
mkdir "$tmp"
tar -xzf "$arc" -C "$tmp" --no-same-owner
for n in "$tmp"/* "$tmp"/.[!.]*; do
  if [ -e "$n" ] && [ "$n" != "$tmp/$id" ]; then echo "unexpected entry in the archive: ${n##*/}" >&2; exit 4; fi
done
cd "$tmp/$id"
cat > ../checklist
sha256sum -c --quiet --strict ../checklist
odd=$(find . ! -type d ! -type f -print | head -n 3)
if [ -n "$odd" ]; then echo "not regular files: $odd" >&2; exit 4; fi
want=$(wc -l < ../checklist)
have=$(find . -type f ! -name bundle.json -print | wc -l)
if [ "$want" != "$have" ]; then echo "the bundle has $have files, bundle.json lists $want" >&2; exit 4; fi"""
PLACE_RUNTIME_SH = r"""set -e
rm -rf "$2"
mv -T "$1/$5" "$2"
rm -rf "$1" "$3"
ln -s "$5" "${2%/*}/.current.tmp-$4"
mv -T "${2%/*}/.current.tmp-$4" "${2%/*}/current"
"""
EXTRACT_PACKAGE_SH = r"""set -e
tar -tvf "$1" | while IFS= read -r l; do case $l in -*) ;; *)
  echo "refusing the package: a member is not a regular file (a link could point outside the install root): $l" >&2; exit 4 ;; esac; done
names=$(tar -tf "$1")
printf '%s\n' "$names" | while IFS= read -r m; do case $m in "$3"|"$4"|"$5"|"$6"|"$7") ;; *)
  echo "refusing the package: unexpected member '$m' (path traversal or an extra file)" >&2; exit 4 ;; esac; done
if [ "$(printf '%s\n' "$names" | sort -u | wc -l)" != 5 ] || [ "$(printf '%s\n' "$names" | wc -l)" != 5 ]; then
  echo "refusing the package: members missing or repeated" >&2; exit 4; fi
mkdir -p "$2"
tar -xf "$1" -C "$2" --no-same-owner "$3" "$4" "$5" "$6" "$7"
cd "$2"
sha256sum -c --quiet --strict -
n=$(find . ! -type d -print | wc -l)
if [ "$n" != 5 ] || [ -n "$(find . ! -type d ! -type f -print)" ]; then echo "unexpected entries after extraction" >&2; exit 4; fi"""
SWITCH_SH = r"""set -e
cd "$1"
sha=$2 tmp=${3##*/} tag=$4
if [ -e "$sha" ]; then mv -T "$sha" ".old-$tag"; fi
mv -T "$tmp" "$sha"
rm -rf ".old-$tag"
old=$(readlink current || true)
if [ -n "$old" ] && [ "$old" != "$sha" ]; then ln -s "$old" ".previous.tmp-$tag"; mv -T ".previous.tmp-$tag" previous; fi
ln -s "$sha" ".current.tmp-$tag"
mv -T ".current.tmp-$tag" current
keep=$(readlink previous || true)
for d in *; do
  if [ -d "$d" ] && [ ! -L "$d" ] && [ "$d" != "$sha" ] && [ "$d" != "$keep" ]; then rm -rf "$d"; fi
done"""


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

    @classmethod
    def load(cls, path: str | Path) -> LocalPackage:
        path = Path(path)
        with tempfile.TemporaryDirectory(prefix="edgepkg-check-") as tmp:
            m = open_package(path, Path(tmp)).manifest  # every member's sha256, no links or extras
        name = _SAFE.sub("_", f"{m['model']['name']}-{m['variant']}")
        return cls(path, sha256_file(path), path.stat().st_size, name, m["target"]["arch"], m["target"]["name"],
                   float(m["golden"]["rtol"]), float(m["golden"]["atol"]),
                   {n: v["sha256"] for n, v in m["members"].items()})

    def checklist(self) -> bytes:
        """sha256sum -c input for the extracted members."""
        return "".join(f"{self.members[n]}  {n}\n" for n in MEMBERS).encode()


@dataclass(frozen=True)
class LocalBundle:
    id: str  # "<version>-<arch>", the archive's top folder and the device's runtime/<id>
    arch: str
    archive: Path
    sha256: str  # of the archive
    size: int
    manifest_sha256: str  # of bundle.json: equal on the device means this bundle is installed
    files: dict = field(repr=False)  # relative path -> sha256

    @classmethod
    def for_arch(cls, arch: str) -> LocalBundle:
        from edge_sdk.runtime.bundle import bundle_archive, ensure_bundle, read_bundle_manifest, verify_bundle

        root = ensure_bundle(arch)
        problems = verify_bundle(root)
        if problems:
            raise EdgeError(f"runtime bundle {root} is damaged: {'; '.join(problems)}",
                            hint="rebuild it: python -c 'from edge_sdk.runtime.bundle import ensure_bundle; "
                                 f"ensure_bundle(\"{arch}\", rebuild=True)'")
        archive = bundle_archive(arch)
        _check_bundle_archive(archive, root.name)
        meta = read_bundle_manifest(root)
        return cls(root.name, arch, archive, sha256_file(archive), archive.stat().st_size,
                   sha256_file(root / "bundle.json"), {k: v["sha256"] for k, v in meta["files"].items()})

    def checklist(self) -> bytes:
        return "".join(f"{sha}  {rel}\n" for rel, sha in sorted(self.files.items())).encode()


def _check_bundle_archive(archive: Path, top: str) -> None:
    """Refuse, before anything is sent, an archive whose members would leave runtime/<top>/ when
    extracted (absolute or ../ paths) or that holds links: the device refuses them too
    (EXTRACT_RUNTIME_SH), this only says so without a connection."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
    except (OSError, tarfile.TarError) as e:
        raise PackageError(f"runtime bundle archive {archive}: unreadable ({e})") from None
    for m in members:
        parts = m.name.split("/")
        if parts[0] != top or ".." in parts or m.name.startswith("/"):
            raise PackageError(f"runtime bundle archive {archive}: member '{m.name}' is outside {top}/ "
                               f"(path traversal); rebuild the bundle")
        if not (m.isfile() or m.isdir()):
            raise PackageError(f"runtime bundle archive {archive}: member '{m.name}' is a link or special file "
                               f"(-> '{m.linkname}'); rebuild the bundle")


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
           max_workers: int = 4, progress: Progress | None = None, connect_timeout: float = 10.0,
           connection_factory: Callable[..., Connection] = Connection) -> FleetResults:
    """Deploy every package to every device, devices in parallel (at most max_workers at once).
    Never stops at a failed device; each result's value (or error.report) is a DeviceDeploy."""
    bundles = {arch: LocalBundle.for_arch(arch) for arch in sorted({p.arch for p in packages})}

    def one(device: Device) -> DeviceDeploy:
        with connection_factory(device, known_hosts=known_hosts, connect_timeout=connect_timeout) as conn:
            report = deploy_device(conn, packages, bundles, progress=progress)
        if not report.ok:
            failed = [f"{p.package}: {p.error}" for p in report.packages if p.error]
            raise DeployFailed(report, report.error or "; ".join(failed))
        return report

    return for_each_device(devices, one, max_workers=max_workers)


def deploy_device(conn: Connection, packages: Sequence[LocalPackage], bundles: dict[str, LocalBundle], *,
                  progress: Progress | None = None) -> DeviceDeploy:
    """One device, packages in order; a failed package does not stop the next one."""
    dev = conn.device
    report = DeviceDeploy(dev)
    t0 = time.monotonic()
    say = (lambda text, done=0, total=0: progress(dev.name, text, done, total)) if progress else (lambda *a, **k: None)
    try:
        say("connecting")
        arch = _prepare(conn)
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


def _prepare(conn: Connection) -> str:
    """Create the layout, sweep temporary names a cut deploy left behind; return `uname -m`."""
    script = r"""set -e
mkdir -p "$1/runtime" "$1/packages" "$1/models"
rm -rf "$1"/runtime/.*.tmp-* "$1"/runtime/.*.part-* "$1"/runtime/.*.tar.gz "$1"/runtime/.current.tmp-* \
       "$1"/packages/.*.part-* "$1"/models/*/.*.tmp-* "$1"/models/*/.current.tmp-* "$1"/models/*/.previous.tmp-* \
       "$1"/models/*/.old-*
uname -m"""
    return conn.run(["sh", "-c", script, "sh", REMOTE_ROOT], timeout=120).stdout.strip()


def install_runtime(conn: Connection, bundle: LocalBundle, *, say=lambda *a, **k: None) -> tuple[str, int]:
    """Install the bundle under runtime/<id> unless that exact bundle (same bundle.json) is there."""
    final = posixpath.join(RUNTIME, bundle.id)
    if conn.sha256(posixpath.join(final, "bundle.json")) == bundle.manifest_sha256:
        _link(conn, RUNTIME, "current", bundle.id)
        return "present", 0
    tag = uuid.uuid4().hex[:8]
    archive = posixpath.join(RUNTIME, f".{bundle.id}.tar.gz")
    tmp = posixpath.join(RUNTIME, f".{bundle.id}.tmp-{tag}")
    sent = 0
    try:
        say(f"runtime {bundle.id}", 0, bundle.size)
        sent = conn.put(bundle.archive, archive, sha256=bundle.sha256,
                        progress=lambda done, total: say(f"runtime {bundle.id}", done, total))
        say("runtime: checking on the device")
        conn.run(["sh", "-c", EXTRACT_RUNTIME_SH, "sh", archive, tmp, bundle.id], input=bundle.checklist(),
                 timeout=600)
        conn.run(["sh", "-c", PLACE_RUNTIME_SH, "sh", tmp, final, archive, tag, bundle.id])
    except EdgeError:
        _cleanup(conn, tmp, archive)
        raise
    return "installed", sent


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
        conn.run(["sh", "-c", EXTRACT_PACKAGE_SH, "sh", content, tmp, MANIFEST, *MEMBERS], input=pkg.checklist(),
                 timeout=300)
        say(f"{label}: golden check on the device", pkg.size, pkg.size)
        outcome.golden = check_golden_on_device(conn, tmp, pkg, runtime=posixpath.join(RUNTIME, bundle.id))
        say(f"{label}: switch", pkg.size, pkg.size)
        _switch(conn, models, pkg.sha256, tmp)
    except EdgeError:
        _cleanup(conn, tmp, *([content] if uploaded else []))
        raise
    outcome.action = "installed"


def check_golden_on_device(conn: Connection, install_dir: str, pkg: LocalPackage, *, runtime: str) -> dict:
    """Run the package's golden input with the device's runner; DeviceError on any mismatch."""
    j = lambda name: posixpath.join(install_dir, name)  # noqa: E731
    r = conn.run([runner(runtime), "--lib", j("model.so"), "--params", j("params.bin"),
                  "--input", j("golden_input.npy"), "--expect", j("golden_output.npy"), "--rtol", repr(pkg.rtol),
                  "--atol", repr(pkg.atol), "--warmup", "0", "--repeat", "1"], check=False, timeout=900)
    if r.exit_code != 0:
        raise DeviceError(f"device {conn.device}: golden check of {pkg.path.name} failed on the device "
                          f"(edge-runner exit {r.exit_code}): {r.stderr.strip()[-600:]}")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])["golden"]
    except (IndexError, KeyError, ValueError):
        raise DeviceError(f"device {conn.device}: edge-runner printed no golden result: {r.stdout[-300:]}") from None


def _switch(conn: Connection, folder: str, sha: str, tmp: str) -> None:
    """tmp -> <sha>; previous -> old current; current -> <sha> (each a rename); drop other versions."""
    conn.run(["sh", "-c", SWITCH_SH, "sh", folder, sha, tmp, uuid.uuid4().hex[:8]], timeout=120)


def _gc_packages(conn: Connection) -> None:
    """Delete stored package files no model's current or previous names (old versions, failures)."""
    script = r"""cd "$1" || exit 0
keep=$(for l in models/*/current models/*/previous; do readlink "$l"; done 2>/dev/null | tr '\n' ' ')
for f in packages/*.edgepkg; do
  s=${f##*/}; s=${s%.edgepkg}
  case " $keep " in *" $s "*) ;; *) rm -f "$f" ;; esac
done"""
    conn.run(["sh", "-c", script, "sh", REMOTE_ROOT], check=False, timeout=120)


def _link(conn: Connection, parent: str, name: str, target: str) -> None:
    tag = uuid.uuid4().hex[:8]
    conn.run(["sh", "-c", 'set -e; cd "$1"; ln -s "$3" ".$2.tmp-$4"; mv -T ".$2.tmp-$4" "$2"', "sh",
              parent, name, target, tag])


def _members_ok(conn: Connection, install_dir: str, pkg: LocalPackage) -> bool:
    r = conn.run(["sh", "-c", 'cd "$1" && sha256sum -c --quiet --strict -', "sh", install_dir],
                 input=pkg.checklist(), check=False, timeout=300)
    return r.exit_code == 0


def _cleanup(conn: Connection, *paths: str) -> None:
    """Best effort: on a cut connection this cannot run, and _prepare sweeps the names next time."""
    try:
        conn.run(["rm", "-rf", "--", *paths], check=False, timeout=60)
    except EdgeError:
        pass
