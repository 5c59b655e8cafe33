"""Check a package's Ed25519 signature and members: the one verifier, on the host and on the device.

    python3 -I verify_package.py DIR TRUSTED_KEYS.json         # on the device, from the runtime bundle
    python3 -I verify_package.py --bundle DIR TRUSTED_KEYS.json  # a runtime bundle: bundle.sig.json

DIR holds an extracted package: manifest.json, signature.json and the members. The signature is
Ed25519 over the exact bytes of manifest.json, which records every member's sha256 and size, so
one check covers the whole package. The device runs this before a switch with whatever python3 its OS
has (Raspberry Pi OS Bookworm: 3.11, Trixie: 3.13): the standard library only, no compiled extension (a
PyNaCl + cffi build exists for one Python version each, and cffi has no cp313 aarch64 wheel), no numpy.
Ed25519 verification is below in pure Python (RFC 8032; libsodium's checks). Exit 0 and one JSON line on success; exit 6 and "refused: <reason>:
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
    if signature is None:
        raise Refused("unsigned", f"the package has no {SIGNATURE}; rebuild it with edge-sdk compile")
    try:
        doc = json.loads(signature.decode("utf-8"))
        public, sig = doc["key"], bytes.fromhex(doc["signature"])
        ok_shape = doc.get("format") == SIGNATURE_FORMAT and isinstance(public, str) and len(public) == 64
        key = bytes.fromhex(public) if ok_shape and len(sig) == 64 else None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        key = None
    if key is None:
        raise Refused("tampered", f"{SIGNATURE} is not an {SIGNATURE_FORMAT} document")
    if not ed25519_verify(key, manifest, sig):
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


# -- Ed25519 verification (RFC 8032), pure Python ---------------------------------------------------
# Only verification: every input is public (key, message, signature), so variable-time arithmetic leaks
# nothing. As libsodium's crypto_sign_verify_detached: S canonical (< L), the key a canonical encoding
# of a point not of small order, R not of small order, [S]B - [k]A encoding to exactly R's 32 bytes.
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493  # the prime order of the base point
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
_BY = 4 * pow(5, P - 2, P) % P
_IDENTITY = (0, 1, 1, 0)  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, x*y = T/Z


def _add(p: tuple, q: tuple) -> tuple:
    """Unified addition on -x^2 + y^2 = 1 + d x^2 y^2 (RFC 8032 5.1.4); also doubles."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * D % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _neg(p: tuple) -> tuple:
    x, y, z, t = p
    return ((-x) % P, y, z, (-t) % P)


def _recover_x(y: int, sign: int) -> int | None:
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


def _decode(s: bytes) -> tuple | None:
    """The point a 32-byte encoding names, or None when it is not canonical or not on the curve."""
    y = int.from_bytes(s, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


def _encode(p: tuple) -> bytes:
    x, y, z, _t = p
    zinv = pow(z, P - 2, P)
    x, y = x * zinv % P, y * zinv % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _is_identity(p: tuple) -> bool:
    x, y, z, _t = p
    return x % P == 0 and (y - z) % P == 0


def _small_order(p: tuple) -> bool:
    q = p
    for _ in range(3):  # [8]P
        q = _add(q, q)
    return _is_identity(q)


_B = (_recover_x(_BY, 0), _BY, 1, _recover_x(_BY, 0) * _BY % P)


def _double_mul(s: int, k: int, minus_a: tuple) -> tuple:
    """[s]B + [k](-A), both scalars in one left-to-right pass (Straus-Shamir)."""
    both = _add(_B, minus_a)
    acc = _IDENTITY
    for i in range(max(s.bit_length(), k.bit_length()) - 1, -1, -1):
        acc = _add(acc, acc)
        bit_s, bit_k = (s >> i) & 1, (k >> i) & 1
        if bit_s and bit_k:
            acc = _add(acc, both)
        elif bit_s:
            acc = _add(acc, _B)
        elif bit_k:
            acc = _add(acc, minus_a)
    return acc


def ed25519_verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """True when `signature` (64 bytes) is a valid Ed25519 signature of `message` by `public` (32 bytes)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    r_bytes, s = signature[:32], int.from_bytes(signature[32:], "little")
    if s >= L:
        return False  # not canonical: a malleated copy of a valid signature
    a = _decode(public)
    if a is None or _small_order(a):
        return False
    r = _decode(r_bytes)
    if r is not None and _small_order(r):
        return False
    k = int.from_bytes(hashlib.sha512(r_bytes + public + message).digest(), "little") % L
    return _encode(_double_mul(s, k, _neg(a))) == r_bytes


if __name__ == "__main__":  # run as <bundle>/edge_sdk_runtime/verify_package.py with python3 -I
    sys.exit(main(sys.argv[1:]))
