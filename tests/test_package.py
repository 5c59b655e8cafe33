"""The .edgepkg format: checksums verified on open, tampering and junk rejected, atomic writes."""
from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest

from edge_sdk.errors import PackageError
from edge_sdk.package import MEMBERS, open_package, read_manifest, write_package
from test_trust_manifest import minimal_manifest  # the schema's smallest valid manifest


@pytest.fixture
def pkg(tmp_path):
    files = {}
    for name in MEMBERS:
        p = tmp_path / "src" / name
        p.parent.mkdir(exist_ok=True)
        if name.endswith(".npy"):
            np.save(p, np.arange(6, dtype=np.float32).reshape(2, 3))
        else:
            p.write_bytes(name.encode() * 100)
        files[name] = p
    out = tmp_path / "m.edgepkg"
    write_package(out, manifest=minimal_manifest(), files=files)
    return out


def _rewrite(src, dst, change):
    """Copy a package's tar, letting `change(name, bytes) -> bytes|None` edit or drop members."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for info in tin.getmembers():
            data = change(info.name, tin.extractfile(info).read())
            if data is None:
                continue
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))


def test_roundtrip_verifies_every_member(pkg, tmp_path):
    p = open_package(pkg, tmp_path / "x")
    assert set(p.manifest["members"]) == set(MEMBERS)
    assert np.array_equal(p.golden_input, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert read_manifest(pkg)["members"]["model.so"]["size"] == len(b"model.so" * 100)


def test_tampered_member_is_rejected(pkg, tmp_path):
    bad = tmp_path / "bad.edgepkg"
    _rewrite(pkg, bad, lambda n, d: d.replace(b"model", b"MODEL") if n == "model.so" else d)
    with pytest.raises(PackageError, match="checksum mismatch for 'model.so'"):
        open_package(bad, tmp_path / "y")


def test_tampered_golden_output_is_rejected(pkg, tmp_path):
    bad = tmp_path / "bad.edgepkg"
    _rewrite(pkg, bad, lambda n, d: d[:-4] + b"\0\0\0\0" if n == "golden_output.npy" else d)
    with pytest.raises(PackageError, match="golden_output.npy"):
        open_package(bad, tmp_path / "y")


def test_extra_and_missing_members_are_rejected(pkg, tmp_path):
    extra = tmp_path / "extra.edgepkg"
    with tarfile.open(pkg) as tin, tarfile.open(extra, "w") as tout:
        for info in tin.getmembers():
            tout.addfile(info, tin.extractfile(info))
        evil = tarfile.TarInfo("../evil.sh")
        evil.size = 3
        tout.addfile(evil, io.BytesIO(b"hi\n"))
    with pytest.raises(PackageError, match="unexpected member '../evil.sh'"):
        open_package(extra, tmp_path / "z")
    assert not (tmp_path / "evil.sh").exists()
    missing = tmp_path / "missing.edgepkg"
    _rewrite(pkg, missing, lambda n, d: None if n == "params.bin" else d)
    with pytest.raises(PackageError, match="missing members"):
        open_package(missing, tmp_path / "w")


def test_not_a_package(tmp_path):
    junk = tmp_path / "junk.edgepkg"
    junk.write_bytes(b"\x00garbage" * 50)
    with pytest.raises(PackageError, match="junk.edgepkg"):
        read_manifest(junk)
    other = tmp_path / "other.edgepkg"
    with tarfile.open(other, "w") as t:
        data = json.dumps({"format": "something-else"}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    with pytest.raises(PackageError, match="not an edgepkg/1 manifest"):
        read_manifest(other)


def test_failed_write_leaves_nothing(tmp_path):
    out = tmp_path / "never.edgepkg"
    with pytest.raises(PackageError):
        write_package(out, manifest={}, files={"model.so": tmp_path / "nope"})
    with pytest.raises(FileNotFoundError):
        write_package(out, manifest={}, files={n: tmp_path / "nope" for n in MEMBERS})
    assert list(tmp_path.iterdir()) == []
