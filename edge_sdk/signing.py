"""Package signing: an Ed25519 key per user, a small store of trusted public keys, sign and verify.

    key = signing_key()                       # ~/.local/share/edge-sdk/keys/signing.key, made on first use
    sig = sign_manifest(manifest_bytes, key)  # signature.json's bytes, a member of every .edgepkg
    verify_manifest(manifest_bytes, sig, where="m.edgepkg")   # SignatureError (exit 6) unless trusted

The signature covers the exact bytes of manifest.json, which records every member's sha256 and
size (runtime/device/verify_package.py checks both; the device runs the same file from its bundle). The
store lives under ${EDGE_SDK_DATA:-~/.local/share/edge-sdk}/keys/: signing.key (the private seed,
mode 0600) and trusted.json (public keys and the names they were trusted under). A key made here
is trusted here at once; another machine's key is trusted with `edge-sdk keys trust`. Crypto:
PyNaCl (libsodium), the library the runtime bundle carries to the device.
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import fcntl
import getpass
import json
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nacl.signing import SigningKey

from edge_sdk.errors import PackageError, UsageError
from edge_sdk.runtime.device.verify_package import SIGNATURE, SIGNATURE_FORMAT, Refused, check_signature, key_id

KEY_FORMAT = "edge-sdk-signing-key/1"
TRUST_FORMAT = "edge-sdk-trusted-keys/1"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_chosen_key: contextvars.ContextVar[Path | None] = contextvars.ContextVar("edge_sdk_sign_key", default=None)

__all__ = ["SIGNATURE", "SignatureError", "TrustedKey", "export_public", "keys_dir", "sign_manifest",
           "signing_key", "trust_key", "trusted_keys", "using_key", "verify_manifest"]


class SignatureError(PackageError):
    """A package is unsigned, signed by a key not trusted here, or changed after signing (exit 6)."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.reason = reason


@dataclass(frozen=True)
class TrustedKey:
    key: str  # 64 hex digits
    name: str
    added: str = ""

    @property
    def id(self) -> str:
        return key_id(self.key)


def keys_dir() -> Path:
    root = os.environ.get("EDGE_SDK_DATA") or Path.home() / ".local/share/edge-sdk"
    return Path(root) / "keys"


def default_key_path() -> Path:
    return keys_dir() / "signing.key"


@contextlib.contextmanager
def using_key(path: Path | None) -> Iterator[None]:
    """Within the block, packages are signed with the key in `path` (compile --sign-key); None: the default."""
    token = _chosen_key.set(Path(path) if path is not None else None)
    try:
        yield
    finally:
        _chosen_key.reset(token)


def signing_key(path: Path | None = None) -> SigningKey:
    """The key packages are signed with: `path`, else the one chosen by using_key, else the user's default
    key, made (and trusted here) on first use. Holding a key's private half, this machine trusts it."""
    path = path or _chosen_key.get()
    if path is not None:
        key = _read_key(Path(path))
        trust_key(key.verify_key.encode().hex(), name=key_name(Path(path)))
        return key
    default = default_key_path()
    if not default.exists():
        _make_key(default)
    return _read_key(default)


def _make_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    name = f"{getpass.getuser()}@{socket.gethostname()}"
    doc = {"format": KEY_FORMAT, "seed": key.encode().hex(), "public": key.verify_key.encode().hex(), "name": name}
    fd, tmp = tempfile.mkstemp(prefix=".signing.key.", dir=path.parent)  # 0600, whatever the umask
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
            f.write("\n")
        os.link(tmp, path)  # atomic and exclusive: a concurrent first use keeps the key that won
    except FileExistsError:
        return
    finally:
        Path(tmp).unlink(missing_ok=True)
    trust_key(doc["public"], name=name)


def _read_key(path: Path) -> SigningKey:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != KEY_FORMAT or not _HEX64.match(doc.get("seed", "")):
            raise ValueError(f"not an {KEY_FORMAT} file")
        return SigningKey(bytes.fromhex(doc["seed"]))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such signing key file") from None
    except (OSError, ValueError, AttributeError) as e:
        raise UsageError(f"{path}: not an edge-sdk signing key ({e})",
                         hint="keys are made by edge-sdk (keys/signing.key under the data folder)") from None


def key_name(path: Path | None = None) -> str:
    p = path or _chosen_key.get() or default_key_path()
    try:
        return str(json.loads(Path(p).read_text(encoding="utf-8")).get("name", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def sign_manifest(manifest: bytes, key: SigningKey | None = None) -> bytes:
    key = key or signing_key()
    public = key.verify_key.encode().hex()
    doc = {"format": SIGNATURE_FORMAT, "algorithm": "ed25519", "key": public, "key_id": key_id(public),
           "name": key_name(), "signed": "manifest.json", "signature": key.sign(manifest).signature.hex()}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def verify_manifest(manifest: bytes, signature: bytes | None, *, where: str) -> dict:
    """The signature document, when the signature is valid and its key trusted here; else SignatureError."""
    trusted = {k.key: k.name for k in trusted_keys()}
    try:
        return check_signature(manifest, signature, trusted)
    except Refused as e:
        hint = {"unsigned": "packages are signed when written; rebuild it with this edge-sdk",
                "untrusted": "edge-sdk keys list shows the trusted keys; edge-sdk keys trust adds one"}.get(e.reason)
        raise SignatureError(f"{where}: {e}", reason=e.reason, hint=hint) from None


# ---- the trusted-keys store -----------------------------------------------------------------

def _trust_path() -> Path:
    return keys_dir() / "trusted.json"


def trusted_keys() -> list[TrustedKey]:
    path = _trust_path()
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != TRUST_FORMAT:
            raise ValueError(f"not an {TRUST_FORMAT} file")
        return [TrustedKey(k["key"], str(k.get("name", "")), str(k.get("added", ""))) for k in doc["keys"]
                if _HEX64.match(k["key"])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{path}: unreadable trusted-keys file ({e})", hint="fix or remove it") from None


def trust_key(public: str, *, name: str = "") -> tuple[TrustedKey, bool]:
    """Add a public key (64 hex digits, or an exported 'edge-sdk-ed25519 HEX NAME' line); (key, added?)."""
    public, name = parse_public(public, name)
    lock = _trust_path().with_name(".trusted.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:  # one writer at a time: concurrent first uses must not drop a key
        fcntl.flock(held, fcntl.LOCK_EX)
        keys = trusted_keys()
        for k in keys:
            if k.key == public:
                return k, False
        new = TrustedKey(public, name, _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
        _write_trusted([*keys, new])
    return new, True


def parse_public(text: str, name: str = "") -> tuple[str, str]:
    parts = text.strip().split(None, 2)
    if len(parts) >= 2 and parts[0] == "edge-sdk-ed25519":
        parts = parts[1:]
    key = parts[0].lower() if parts else ""
    if not _HEX64.match(key):
        raise UsageError(f"not a public key: {text.strip()[:80]!r}",
                         hint="expected 64 hex digits, or a line from `edge-sdk keys export`")
    return key, name or (parts[1] if len(parts) > 1 else "")


def export_public(path: Path | None = None) -> str:
    """The line another machine gives to `edge-sdk keys trust`."""
    key = _read_key(Path(path)) if path is not None else signing_key()
    return f"edge-sdk-ed25519 {key.verify_key.encode().hex()} {key_name(path) or 'unnamed'}"


def _write_trusted(keys: list[TrustedKey]) -> None:
    path = _trust_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": TRUST_FORMAT, "keys": [{"key": k.key, "name": k.name, "added": k.added} for k in keys]}
    fd, tmp = tempfile.mkstemp(prefix=".trusted.json.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def trusted_file_bytes() -> bytes:
    """The trusted-keys file as the device reads it (verify_package.read_trusted)."""
    doc = {"format": TRUST_FORMAT, "keys": [{"key": k.key, "name": k.name} for k in trusted_keys()]}
    return (json.dumps(doc, indent=2) + "\n").encode()
