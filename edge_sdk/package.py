"""The .edgepkg package: one tar file with the compiled library, parameters, a golden pair and a manifest.

Members: manifest.json, signature.json, model.so, params.bin, golden_input.npy, golden_output.npy.
The manifest records the sha256 and size of every other member and is checked against its schema
(manifest_schema.py) on open; signature.json is Ed25519 over the manifest's bytes (signing.py), made
when the package is written. `read_manifest` checks the schema and the signature, `open_package`
also every member, before anything is used; both reject unknown members, links and path tricks.
Unsigned, untrusted or tampered packages are refused with exit code 6 naming the reason.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk.errors import PackageError
from edge_sdk.files import honour_umask
from edge_sdk.manifest_schema import FORMAT, MANIFEST, MEMBERS, parse_manifest
from edge_sdk.signing import SIGNATURE, sign_manifest, verify_manifest

__all__ = ["FORMAT", "MANIFEST", "MEMBERS", "SIGNATURE", "Package", "npy_bytes", "open_package", "read_manifest",
           "sha256_file", "write_package"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def write_package(out: Path, *, manifest: dict, files: dict[str, Path]) -> Path:
    """Write `out` atomically: the manifest gets the members' sha256/size; a failure leaves no file."""
    missing = set(MEMBERS) - set(files)
    if missing:
        raise PackageError(f"{out}: cannot write a package without {', '.join(sorted(missing))}")
    manifest = dict(manifest, format=FORMAT,
                    members={n: {"sha256": sha256_file(p), "size": p.stat().st_size} for n, p in files.items()})
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(manifest, indent=2, sort_keys=True).encode()
    parse_manifest(data, where=str(out))  # never write a package that would be refused on open
    signature = sign_manifest(data)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    try:
        honour_umask(tmp)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            for name, blob in ((MANIFEST, data), (SIGNATURE, signature)):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(blob), 0o644
                tar.addfile(info, io.BytesIO(blob))
            for name in MEMBERS:
                tar.add(files[name], arcname=name, recursive=False)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


@dataclass
class Package:
    """An opened, verified package extracted into `root` (a directory the caller owns)."""

    path: Path
    root: Path
    manifest: dict

    def member(self, name: str) -> Path:
        return self.root / name

    @property
    def golden_input(self) -> np.ndarray:
        return np.load(self.member("golden_input.npy"), allow_pickle=False)

    @property
    def golden_output(self) -> np.ndarray:
        return np.load(self.member("golden_output.npy"), allow_pickle=False)

    def __str__(self) -> str:
        m = self.manifest
        return f"Package {self.path.name}: {m['model']['name']} {m['variant']} for {m['target']['name']}"


def read_manifest(path: Path) -> dict:
    """The manifest alone, schema and signature checked (no extraction, no member checks): for inspect
    and listings."""
    with _open_tar(path) as tar:
        return _load_manifest(path, tar)


def open_package(path: Path, root: Path) -> Package:
    """Extract `path` into `root` and verify every member's sha256 against the manifest."""
    with _open_tar(path) as tar:
        manifest = _load_manifest(path, tar)
        expected = manifest.get("members", {})
        if set(expected) != set(MEMBERS):
            raise PackageError(f"{path}: manifest lists members {sorted(expected)}, expected {list(MEMBERS)}")
        root.mkdir(parents=True, exist_ok=True)
        seen = set()
        for info in tar.getmembers():
            if info.name in (MANIFEST, SIGNATURE):
                continue
            if info.name not in MEMBERS or not info.isfile():
                raise PackageError(f"{path}: unexpected member '{info.name}' (only regular files {list(MEMBERS)})")
            src = tar.extractfile(info)
            h, dest = hashlib.sha256(), root / info.name
            with open(dest, "wb") as out:
                for chunk in iter(functools.partial(src.read, 1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != expected[info.name]["sha256"]:
                raise PackageError(f"{path}: checksum mismatch for '{info.name}': the package was modified or damaged")
            seen.add(info.name)
        if seen != set(MEMBERS):
            raise PackageError(f"{path}: missing members {sorted(set(MEMBERS) - seen)}")
    return Package(path=path, root=root, manifest=manifest)


def _open_tar(path: Path) -> tarfile.TarFile:
    if not path.is_file():
        raise PackageError(f"{path}: no such package file")
    try:
        return tarfile.open(path, mode="r:")
    except tarfile.TarError as e:
        raise PackageError(f"{path}: not an .edgepkg file ({e})") from e


def _load_manifest(path: Path, tar: tarfile.TarFile) -> dict:
    raw = _member_bytes(path, tar, MANIFEST)
    if raw is None:
        raise PackageError(f"{path}: missing {MANIFEST}: not an {FORMAT} package")
    manifest = parse_manifest(raw, where=str(path))
    verify_manifest(raw, _member_bytes(path, tar, SIGNATURE), where=str(path))
    return manifest


def _member_bytes(path: Path, tar: tarfile.TarFile, name: str, limit: int = 64 << 20) -> bytes | None:
    try:
        info = tar.getmember(name)
    except KeyError:
        return None
    if not info.isfile() or info.size > limit:
        raise PackageError(f"{path}: {name} is not a regular file of at most {limit >> 20} MB")
    try:
        f = tar.extractfile(info)
        return f.read() if f else None
    except (OSError, tarfile.TarError) as e:
        raise PackageError(f"{path}: unreadable {name} ({e})") from e
