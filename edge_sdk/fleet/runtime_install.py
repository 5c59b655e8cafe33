"""The runtime half of a deploy: the device layout and its sweep, the signed runtime bundle, and the
re-check of every installed model before runtime/current moves to a new bundle.

    with device_lock(conn, "deploy"):
        arch = prepare(conn)                         # layout, sweep of cut runs, `uname -m`
        install_runtime(conn, LocalBundle.for_arch(arch))   # pushes the keys the device's verifier accepts

A bundle counts as installed only when every file hashes as its bundle.json says (a damaged file
is repaired by installing again, live copy untouched until the new one is live). bundle.json is
signed with the user's key (bundle.sig.json); the device checks that signature with the verifier
of the runtime it already runs (the new bundle's own on a first install) before placing it.
"""
from __future__ import annotations

import json
import posixpath
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.errors import DeviceError, EdgeError, PackageError
from edge_sdk.fleet.device_lock import device_lock
from edge_sdk.fleet.disk_space import BLOCK, on_disk, room_for
from edge_sdk.fleet.device_scripts import EXTRACT_RUNTIME_SH, LINK_RUNTIME_SH, PLACE_RUNTIME_SH, PREPARE_SH
from edge_sdk.fleet.paths import CURRENT_RUNTIME, MODELS, REMOTE_ROOT, RUNTIME, runner
from edge_sdk.package import sha256_file
from edge_sdk.runtime.result import runner_segments

TRUSTED_KEYS = posixpath.join(RUNTIME, "trusted-keys.json")  # what verify_package.py accepts on the device


@dataclass(frozen=True)
class LocalBundle:
    id: str  # "<version>-<arch>", the archive's top folder and the device's runtime/<id>
    arch: str
    archive: Path
    sha256: str  # of the archive
    size: int
    manifest_sha256: str  # of bundle.json: equal on the device means this bundle is installed
    files: dict = field(repr=False)  # relative path -> sha256
    signature: bytes = field(default=b"", repr=False)  # bundle.sig.json: Ed25519 over bundle.json
    unpacked: int = 0  # bytes the extracted bundle takes on the device (4 KiB blocks, folders included)

    @classmethod
    def for_arch(cls, arch: str) -> LocalBundle:
        from edge_sdk.runtime.bundle import bundle_archive, ensure_bundle, read_bundle_manifest, verify_bundle
        from edge_sdk.signing import sign_manifest

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
                   sha256_file(root / "bundle.json"), {k: v["sha256"] for k, v in meta["files"].items()},
                   sign_manifest((root / "bundle.json").read_bytes()),
                   _unpacked_size(archive))

    def checklist(self) -> bytes:
        return "".join(f"{sha}  {rel}\n" for rel, sha in sorted(self.files.items())).encode()


def _unpacked_size(archive: Path) -> int:
    """What the archive's members take once extracted (a folder: one block)."""
    with tarfile.open(archive, "r:gz") as tar:
        return on_disk(m.size if m.isfile() else BLOCK for m in tar.getmembers())


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


def prepare(conn) -> str:
    """Create the layout, sweep what cut runs left (never what current or previous names); `uname -m`,
    after refusing a 32-bit OS by name (check_64_bit)."""
    with device_lock(conn, "prepare"):
        out = conn.run(["sh", "-c", PREPARE_SH, "sh", REMOTE_ROOT], timeout=300).stdout.split()
    return check_64_bit(conn.device, out[0] if out else "", out[1] if len(out) > 1 else "")


def check_64_bit(device, machine: str, bits: str) -> str:
    """`machine` (uname -m), unless the device runs a 32-bit ARM OS: the runtime bundle and the packages
    are aarch64 builds, which a 32-bit userland (armv6l, armv7l, or armhf on a 64-bit kernel) cannot run."""
    if machine.startswith("arm") or (machine == "aarch64" and bits == "32"):
        what = machine if machine != "aarch64" else "a 64-bit kernel (aarch64) with a 32-bit (armhf) userland"
        raise DeviceError(
            f"device {device}: it runs a 32-bit ARM OS ({what}); edge-sdk's device runtime and packages are "
            "64-bit (aarch64) only",
            hint="install Raspberry Pi OS (64-bit), Bookworm or Trixie (arm64), e.g. with Raspberry Pi Imager: "
                 "a Pi 3, Pi Zero 2 W, Pi 4 or Pi 5 runs it (a Pi 1, Zero or Zero W, ARMv6, cannot)")
    return machine


def push_trusted_keys(conn) -> None:
    """The device's verifier trusts the keys this machine trusts (written atomically, under the lock)."""
    from edge_sdk.signing import trusted_file_bytes

    with device_lock(conn, "trusted keys"):
        conn.run(["sh", "-c", 'set -e; cat > "$1.tmp"; mv -f "$1.tmp" "$1"', "sh", TRUSTED_KEYS],
                 input=trusted_file_bytes())


def runtime_intact(conn, bundle: LocalBundle) -> bool:
    """The device has runtime/<id> with every file as bundle.json lists it (not bundle.json alone)."""
    final = posixpath.join(RUNTIME, bundle.id)
    if conn.sha256(posixpath.join(final, "bundle.json")) != bundle.manifest_sha256:
        return False
    r = conn.run(["sh", "-c", 'cd "$1" && sha256sum -c --quiet --strict -', "sh", final], input=bundle.checklist(),
                 check=False, timeout=600)
    return r.exit_code == 0


def install_runtime(conn, bundle: LocalBundle, *, say=lambda *a, **k: None) -> tuple[str, int]:
    """Install the bundle under runtime/<id> unless it is there intact; runtime/current -> it once every
    installed model passes its golden check with it. Returns ("present" | "installed" | "repaired", bytes)."""
    with device_lock(conn, "runtime install"):
        push_trusted_keys(conn)  # the verifier below (and deploy's, after) accepts the keys this machine trusts
        if runtime_intact(conn, bundle):
            if conn.readlink(CURRENT_RUNTIME) != bundle.id:
                recheck_models(conn, posixpath.join(RUNTIME, bundle.id))
                _link_runtime(conn, bundle.id)
            return "present", 0
        repair = conn.run(["test", "-e", posixpath.join(RUNTIME, bundle.id)], check=False).exit_code == 0
        sent = _place(conn, bundle, say)
        if conn.readlink(CURRENT_RUNTIME) != bundle.id:
            recheck_models(conn, posixpath.join(RUNTIME, bundle.id))
            _link_runtime(conn, bundle.id)
        return ("repaired" if repair else "installed"), sent


def _place(conn, bundle: LocalBundle, say) -> int:
    tag = uuid.uuid4().hex[:8]
    archive = posixpath.join(RUNTIME, f".{bundle.id}.tar.gz")
    tmp = posixpath.join(RUNTIME, f".{bundle.id}.tmp-{tag}")
    try:
        say(f"runtime {bundle.id}", 0, bundle.size)
        sent = conn.put(bundle.archive, archive, sha256=bundle.sha256,
                        progress=lambda done, total: say(f"runtime {bundle.id}", done, total))
        say("runtime: checking on the device")
        with room_for(conn, RUNTIME, bundle.unpacked, step=f"installing the runtime {bundle.id}",
                      what="the unpacked runtime"):
            conn.run(["sh", "-c", EXTRACT_RUNTIME_SH, "sh", archive, tmp, bundle.id], input=bundle.checklist(),
                     timeout=600)
            _verify_bundle_signature(conn, bundle, posixpath.join(tmp, bundle.id))
            conn.run(["sh", "-c", PLACE_RUNTIME_SH, "sh", tmp, posixpath.join(RUNTIME, bundle.id), archive, tag,
                      bundle.id, "place"])
    except EdgeError:
        try:  # never remove what runtime/current names (a stopped repair points it into tmp)
            live = (conn.readlink(CURRENT_RUNTIME) or "").split("/")[0]
            conn.run(["rm", "-rf", "--", *([] if live == posixpath.basename(tmp) else [tmp]), archive], check=False)
        except EdgeError:
            pass  # a cut connection: the next prepare sweeps it (keeping what current names)
        raise
    return sent


def _verify_bundle_signature(conn, bundle: LocalBundle, new_root: str) -> None:
    """bundle.sig.json into the new bundle, checked by the running runtime's verifier when it has one."""
    conn.run(["sh", "-c", 'cat > "$1"', "sh", posixpath.join(new_root, "bundle.sig.json")], input=bundle.signature)
    verifier = CURRENT_RUNTIME
    has = conn.run(["test", "-f", posixpath.join(CURRENT_RUNTIME, "edge_sdk_runtime/verify_package.py")], check=False)
    if has.exit_code != 0:
        verifier = new_root  # a first install: only the new bundle's own verifier is there
    r = conn.run(["sh", "-c", 'exec python3 -I "$1/edge_sdk_runtime/verify_package.py" --bundle "$2" "$3"', "sh",
                  verifier, new_root, TRUSTED_KEYS], check=False, timeout=300)
    if r.exit_code != 0:
        raise DeviceError(f"device {conn.device}: runtime bundle {bundle.id} {r.stderr.strip()[-400:] or 'refused'}")


def _link_runtime(conn, bundle_id: str) -> None:
    conn.run(["sh", "-c", LINK_RUNTIME_SH, "sh", RUNTIME, bundle_id, uuid.uuid4().hex[:8]])


def recheck_models(conn, runtime: str) -> list[str]:
    """Every installed model's current version passes its golden pair with the runner in `runtime`;
    DeviceError naming those that do not (then runtime/current is left where it was)."""
    failed, checked = [], []
    for name in _model_names(conn):
        install = posixpath.join(MODELS, name, "current")
        raw = conn.read_text(posixpath.join(install, "manifest.json"))
        try:
            manifest = json.loads(raw) if raw else None
            golden = manifest["golden"]
            rtol, atol = float(golden["rtol"]), float(golden["atol"])
            segments = runner_segments(manifest)
        except (ValueError, KeyError, TypeError):
            continue  # no readable manifest: nothing installed by this edge-sdk to re-check
        j = lambda n, at=install: posixpath.join(at, n)  # noqa: E731
        r = conn.run([runner(runtime), "--lib", j("model.so"), "--params", j("params.bin"), "--input",
                      j("golden_input.npy"), "--expect", j("golden_output.npy"), "--rtol", repr(rtol), "--atol",
                      repr(atol), *segments, "--warmup", "0", "--repeat", "1"], check=False, timeout=900)
        (checked if r.exit_code == 0 else failed).append(name)
    if failed:
        raise DeviceError(f"device {conn.device}: the new runtime {posixpath.basename(runtime)} fails the golden "
                          f"check of installed model(s) {', '.join(failed)}; runtime/current left as it was")
    return checked


def _model_names(conn) -> list[str]:
    r = conn.run(["sh", "-c", 'cd "$1" 2>/dev/null || exit 0; for m in *; do [ -L "$m/current" ] && echo "$m"; '
                  "done; exit 0", "sh", MODELS], check=False)
    return [n for n in r.stdout.split("\n") if n]
