"""Issue 15 item 2: packages are signed (Ed25519 over the manifest, which holds each member's sha256)
and verified on inspect/run/deploy. Unsigned, untrusted and tampered packages -- a crafted package
with other weights and recomputed sums among them -- are refused with exit 6 naming the reason; a
golden tolerance must be finite and small; keys are made on first use and managed with `edge-sdk keys`."""
from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from edge_sdk import signing
from edge_sdk.cli import main as cli_main
from edge_sdk.errors import PackageError
from edge_sdk.package import MANIFEST, SIGNATURE, open_package, read_manifest
from edge_sdk.signing import SignatureError


def members_of(pkg: Path) -> dict[str, bytes]:
    with tarfile.open(pkg) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def write_tar(out: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(out, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def craft(src: Path, out: Path, *, key=None, sign: bool = True, edit_manifest=None) -> Path:
    """Other weights (params.bin changed) with recomputed sums in the manifest; the signature kept
    (tampered), dropped (unsigned) or made with `key` (re-signed by someone else)."""
    m = members_of(src)
    params = bytearray(m["params.bin"])
    params[-64:] = bytes(64)  # other weights: the last 16 float32 of the parameters zeroed
    m["params.bin"] = bytes(params)
    manifest = json.loads(m[MANIFEST])
    manifest["members"]["params.bin"] = {"sha256": hashlib.sha256(params).hexdigest(), "size": len(params)}
    if edit_manifest:
        edit_manifest(manifest)
    m[MANIFEST] = json.dumps(manifest, indent=2, sort_keys=True).encode()
    if not sign:
        del m[SIGNATURE]
    elif key is not None:
        m[SIGNATURE] = signing.sign_manifest(m[MANIFEST], key)
    return write_tar(out, m)


@pytest.fixture
def stranger_key(tmp_path, monkeypatch):
    """A signing key made in another data folder: valid, but not trusted by this one."""
    monkeypatch.setenv("EDGE_SDK_DATA", str(tmp_path / "stranger"))
    key = signing.signing_key()
    path = signing.default_key_path()
    monkeypatch.delenv("EDGE_SDK_DATA")
    return key, path


def test_written_packages_are_signed_by_a_trusted_key(host_package, tmp_path):
    m = members_of(host_package)
    doc = json.loads(m[SIGNATURE])
    assert doc["algorithm"] == "ed25519" and doc["signed"] == MANIFEST
    assert doc["key"] in {k.key for k in signing.trusted_keys()}
    from nacl.signing import VerifyKey  # an independent check with the library itself

    VerifyKey(bytes.fromhex(doc["key"])).verify(m[MANIFEST], bytes.fromhex(doc["signature"]))
    assert open_package(host_package, tmp_path / "x").manifest["variant"] == "float32"


@pytest.mark.parametrize("how, reason", [("keep", "tampered"), ("drop", "unsigned"), ("stranger", "untrusted")])
def test_crafted_package_with_recomputed_sums_is_refused(host_package, tmp_path, stranger_key, capsys, how, reason):
    key = stranger_key[0] if how == "stranger" else None
    bad = craft(host_package, tmp_path / "bad.edgepkg", key=key, sign=how != "drop")
    with pytest.raises(SignatureError) as e:
        open_package(bad, tmp_path / "x")
    assert e.value.reason == reason and e.value.exit_code == 6 and f"refused: {reason}" in str(e.value)
    with pytest.raises(SignatureError):
        read_manifest(bad)
    for argv in (["inspect", str(bad)], ["run", str(bad), "--repeat", "1"]):
        assert cli_main(argv) == 6
        err = capsys.readouterr().err
        assert f"refused: {reason}" in err and "Traceback" not in err


def test_deploy_refuses_before_connecting(host_package, tmp_path, capsys):
    bad = craft(host_package, tmp_path / "bad.edgepkg")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("devices:\n  nowhere: {host: 192.0.2.1}\n")  # TEST-NET: never reached
    assert cli_main(["deploy", str(bad), "--fleet", str(fleet), "--known-hosts", str(tmp_path / "kh")]) == 6
    assert "refused: tampered" in capsys.readouterr().err


def test_infinite_golden_tolerance_is_refused_even_when_signed(host_package, tmp_path):
    """The probe's package: golden.rtol = Infinity made a wrong model pass. Signed by a trusted key
    (ours), it is still refused: tolerances must be finite and small."""
    def loosen(m):
        m["golden"]["rtol"] = float("inf")
    bad = craft(host_package, tmp_path / "loose.edgepkg", key=signing.signing_key(), edit_manifest=loosen)
    with pytest.raises(PackageError, match="Infinity is not a number|golden.rtol"):
        open_package(bad, tmp_path / "x")

    def big(m):
        m["golden"]["atol"] = 1.0
    bad = craft(host_package, tmp_path / "big.edgepkg", key=signing.signing_key(), edit_manifest=big)
    with pytest.raises(PackageError, match="golden.atol: expected a finite number from 0 to 0.001"):
        open_package(bad, tmp_path / "y")


def test_keys_trust_makes_a_strangers_package_acceptable(host_package, tmp_path, stranger_key, capsys,
                                                         monkeypatch):
    monkeypatch.setenv("EDGE_SDK_DATA", str(tmp_path / "me"))
    signing.signing_key()  # my key, made on first use, trusted here
    key, key_path = stranger_key
    signed = craft(host_package, tmp_path / "theirs.edgepkg", key=key)
    with pytest.raises(SignatureError, match="untrusted"):
        read_manifest(signed)
    assert cli_main(["keys", "export", "--sign-key", str(key_path)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("edge-sdk-ed25519 " + key.verify_key.encode().hex())
    (tmp_path / "theirs.pub").write_text(line + "\n")
    assert cli_main(["keys", "trust", str(tmp_path / "theirs.pub"), "--name", "lab"]) == 0
    assert "trusted:" in capsys.readouterr().out
    assert read_manifest(signed)["variant"] == "float32"  # other weights, but signed by a key we trust
    assert cli_main(["keys", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in listed["trusted"]} >= {"lab"} and sum(r["yours"] for r in listed["trusted"]) == 1
    assert cli_main(["keys", "trust", "not-a-key"]) == 2


def test_key_file_is_private_and_made_once(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_DATA", str(tmp_path / "d"))
    old = os.umask(0o022)
    try:
        a = signing.signing_key()
        b = signing.signing_key()
    finally:
        os.umask(old)
    assert a.encode() == b.encode()
    assert stat.S_IMODE(signing.default_key_path().stat().st_mode) == 0o600
    assert [k.key for k in signing.trusted_keys()] == [a.verify_key.encode().hex()]


def test_sign_key_on_compile(tmp_path, stranger_key, capsys, monkeypatch):
    key, key_path = stranger_key
    monkeypatch.setenv("EDGE_SDK_DATA", str(tmp_path / "me"))  # the trust it adds stays in this test
    out = tmp_path / "k.edgepkg"
    argv = ["compile", "mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "4", "-o", str(out),
            "--sign-key", str(key_path)]
    assert cli_main(argv) == 0
    doc = json.loads(members_of(out)[SIGNATURE])
    assert doc["key"] == key.verify_key.encode().hex()
    assert read_manifest(out)["variant"] == "float32"  # signing with a key file trusts its public half here
    assert doc["key"] in {k.key for k in signing.trusted_keys()}
    capsys.readouterr()
    assert cli_main([*argv[:-1], str(tmp_path / "missing.key")]) == 2
    assert "no such signing key file" in capsys.readouterr().err


def test_the_device_verifier_imports_only_the_stdlib():
    """runtime/device/verify_package.py is what the device runs from its bundle (python3 -I, before the switch)
    and what signing.py checks with here: the standard library only -- no compiled extension (PyNaCl's cffi
    backend existed for one Python version: Trixie's 3.13 could not import it), no numpy, no edge_sdk."""
    import ast
    import sys

    from edge_sdk.runtime import bundle
    from edge_sdk.runtime.device import verify_package

    assert "verify_package.py" in bundle._PY_MODULES  # shipped in the runtime bundle
    tree = ast.parse(Path(verify_package.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert all(n in sys.stdlib_module_names or n == "__future__" for n in names), names
    assert signing.check_signature is verify_package.check_signature  # the host checks with the same code
