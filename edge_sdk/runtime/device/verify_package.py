"""Check a package's Ed25519 signature and members: the one verifier, on the host and on the device.

    python3 -I verify_package.py DIR TRUSTED_KEYS.json         # on the device, from the runtime bundle
    python3 -I verify_package.py --bundle DIR TRUSTED_KEYS.json  # a runtime bundle: bundle.sig.json

DIR holds an extracted package: manifest.json, signature.json and the members. The signature is
Ed25519 over the exact bytes of manifest.json, which records every member's sha256 and size, so
one check covers the whole package. The device runs this before a switch with the bundle's own
PyNaCl (python/nacl and _cffi_backend, unpacked from the aarch64 abi3 wheel like tvm_ffi): stdlib +
PyNaCl only, no compiler, no numpy. Exit 0 and one JSON line on success; exit 6 and "refused: <reason>:
..." on stderr otherwise (reason: unsigned, untrusted, tampered, damaged, tolerance).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys

SIGNATURE = "signature.json"
SIGNATURE_FORMAT = "edgepkg-signature/1"
BUNDLE_SIGNATURE = "bundle.sig.json"
MANIFEST = "manifest.json"
MEMBERS = ("model.so", "params.bin", "golden_input.npy", "golden_output.npy")
MAX_GOLDEN_TOL = 1e-3


class Refused(Exception):
    """`reason` is one word (unsigned, untrusted, tampered, damaged, tolerance); the text says more."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"refused: {reason}: {message}")
        self.reason = reason


def key_id(public_hex: str) -> str:
    return hashlib.sha256(bytes.fromhex(public_hex)).hexdigest()[:16]


def check_signature(manifest: bytes, signature: bytes | None, trusted: dict[str, str]) -> dict:
    """The signature document when it is valid and by a trusted key; else Refused.

    `trusted`: public key (64 hex digits) -> the name it was trusted under."""
    from nacl.exceptions import BadSignatureError, ValueError as NaclValueError
    from nacl.signing import VerifyKey

    if signature is None:
        raise Refused("unsigned", f"the package has no {SIGNATURE}; rebuild it with edge-sdk compile")
    try:
        doc = json.loads(signature.decode("utf-8"))
        public, sig = doc["key"], bytes.fromhex(doc["signature"])
        ok_shape = doc.get("format") == SIGNATURE_FORMAT and isinstance(public, str) and len(public) == 64
        verify_key = VerifyKey(bytes.fromhex(public)) if ok_shape else None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, NaclValueError):
        verify_key = None
    if verify_key is None:
        raise Refused("tampered", f"{SIGNATURE} is not an {SIGNATURE_FORMAT} document")
    try:
        verify_key.verify(manifest, sig)
    except (BadSignatureError, NaclValueError):
        raise Refused("tampered", f"the signature by key {key_id(public)} does not match {MANIFEST}: the "
                      "manifest (and so the members' checksums) was changed after signing") from None
    if public not in trusted:
        raise Refused("untrusted", f"signed by key {key_id(public)} ({doc.get('name', 'unnamed')}), which is not "
                      "a trusted key here; if you trust its owner: edge-sdk keys trust KEY")
    return doc


def check_members(folder: str, manifest: dict) -> None:
    """Every member's sha256 and size as the (signed) manifest records them, nothing else, finite golden
    tolerances. Refused("damaged" / "tolerance") otherwise."""
    members = manifest.get("members")
    if not isinstance(members, dict) or sorted(members) != sorted(MEMBERS):
        raise Refused("damaged", f"the manifest lists members {sorted(members or {})}, expected {list(MEMBERS)}")
    extra = sorted(set(os.listdir(folder)) - {*MEMBERS, MANIFEST, SIGNATURE})
    if extra:
        raise Refused("damaged", f"unexpected files {extra}")
    for name in MEMBERS:
        path, want = os.path.join(folder, name), members[name]
        if not os.path.isfile(path) or os.path.islink(path):
            raise Refused("damaged", f"{name} is missing or not a regular file")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != want.get("sha256") or os.path.getsize(path) != want.get("size"):
            raise Refused("damaged", f"{name}: sha256 or size differs from the signed manifest")
    golden = manifest.get("golden") or {}
    rng = golden.get("range", 0.0)
    if isinstance(rng, bool) or not isinstance(rng, (int, float)) or not math.isfinite(rng) or rng < 0:
        raise Refused("tolerance", f"golden.range is {rng!r}: expected a finite number >= 0")
    for key, cap in (("rtol", MAX_GOLDEN_TOL), ("atol", MAX_GOLDEN_TOL * max(1.0, rng))):
        v = golden.get(key)  # atol is relative to the golden output's range (manifest_schema.max_atol)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= cap:
            raise Refused("tolerance", f"golden.{key} is {v!r}: expected a finite number from 0 to {cap:g}")


def read_trusted(path: str) -> dict[str, str]:
    """A trusted-keys file ({"keys": [{"key": hex, "name": ...}]}) -> {hex: name}; a missing file trusts none."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return {k["key"]: str(k.get("name", "")) for k in doc["keys"] if isinstance(k.get("key"), str)}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Refused("untrusted", f"the trusted-keys file {path} is unreadable ({e})") from None


def check_bundle(folder: str, trusted: dict[str, str]) -> dict:
    """A runtime bundle folder: bundle.sig.json signs bundle.json, which lists every file's sha256."""
    with open(os.path.join(folder, "bundle.json"), "rb") as f:
        raw = f.read()
    sig_path = os.path.join(folder, BUNDLE_SIGNATURE)
    doc = check_signature(raw, _read(sig_path), trusted)
    files = json.loads(raw.decode("utf-8"))["files"]
    for rel, want in sorted(files.items()):
        path = os.path.join(folder, rel)
        if ".." in rel.split("/") or not os.path.isfile(path):
            raise Refused("damaged", f"runtime file {rel} is missing")
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != want["sha256"]:
                raise Refused("damaged", f"runtime file {rel}: sha256 differs from the signed bundle.json")
    return doc


def _read(path: str) -> bytes | None:
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return f.read()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--bundle"] and len(argv) == 3:
        try:
            doc = check_bundle(argv[1], read_trusted(argv[2]))
        except Refused as e:
            print(str(e), file=sys.stderr)
            return 6
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"refused: damaged: bundle.json unreadable ({e})", file=sys.stderr)
            return 6
        print(json.dumps({"ok": True, "key_id": key_id(doc["key"])}))
        return 0
    if len(argv) != 2:
        print("usage: verify_package.py [--bundle] DIR TRUSTED_KEYS.json", file=sys.stderr)
        return 2
    folder, keys = argv
    try:
        with open(os.path.join(folder, MANIFEST), "rb") as f:
            raw = f.read()
        doc = check_signature(raw, _read(os.path.join(folder, SIGNATURE)), read_trusted(keys))
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:  # signed, yet unreadable: the signer made it so
            raise Refused("damaged", f"{MANIFEST} is not UTF-8 JSON ({e})") from None
        check_members(folder, manifest)
    except Refused as e:
        print(str(e), file=sys.stderr)
        return 6
    except OSError as e:
        print(f"refused: damaged: {e}", file=sys.stderr)
        return 6
    print(json.dumps({"ok": True, "key_id": key_id(doc["key"]), "name": doc.get("name", "")}))
    return 0


if __name__ == "__main__":  # run as <bundle>/edge_sdk_runtime/verify_package.py with python3 -I
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    sys.exit(main(sys.argv[1:]))
