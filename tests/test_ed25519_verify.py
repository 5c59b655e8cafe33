"""The device's pure-Python Ed25519 verifier (runtime/device/verify_package.ed25519_verify) against libsodium
(PyNaCl) and RFC 8032's test vectors: every valid signature passes, and what libsodium refuses -- a flipped
bit anywhere, another message or key, a malleated S (S + L), a small-order key or R -- is refused too."""
from __future__ import annotations

import os
import random

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from edge_sdk.runtime.device.verify_package import L, ed25519_verify

# RFC 8032 section 7.1, tests 1-3: (public key, message, signature)
RFC8032 = [
    ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]
# An encoding of a point of order 8 (libsodium's blacklist): as a key, never valid.
SMALL_ORDER = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")


def _nacl_ok(public: bytes, message: bytes, signature: bytes) -> bool:
    try:
        VerifyKey(public).verify(message, signature)
        return True
    except (BadSignatureError, ValueError):
        return False


@pytest.mark.parametrize("public, message, signature", RFC8032)
def test_rfc8032_vectors(public, message, signature):
    pk, msg, sig = bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature)
    assert ed25519_verify(pk, msg, sig)
    assert not ed25519_verify(pk, msg + b"\0", sig)


def test_agrees_with_libsodium_on_signed_and_altered_messages():
    rng = random.Random(23)
    for _ in range(12):
        sk = SigningKey(bytes(rng.randrange(256) for _ in range(32)))
        msg = os.urandom(rng.randrange(0, 300))
        sig, pk = sk.sign(msg).signature, bytes(sk.verify_key)
        assert ed25519_verify(pk, msg, sig) and _nacl_ok(pk, msg, sig)
        flipped = bytearray(sig)
        flipped[rng.randrange(64)] ^= 1 << rng.randrange(8)
        other = bytes(SigningKey.generate().verify_key)
        malleated = sig[:32] + (int.from_bytes(sig[32:], "little") + L).to_bytes(32, "little")
        for case in ((pk, msg, bytes(flipped)), (pk, msg + b"x", sig), (other, msg, sig), (pk, msg, malleated),
                     (SMALL_ORDER, msg, sig), (pk, msg, SMALL_ORDER + sig[32:])):
            assert ed25519_verify(*case) is False and _nacl_ok(*case) is False


def test_malformed_lengths_are_refused():
    pk, msg, sig = (bytes.fromhex(x) for x in RFC8032[0])
    assert not ed25519_verify(pk[:31], msg, sig)
    assert not ed25519_verify(pk, msg, sig[:63])
    assert not ed25519_verify(b"\xff" * 32, msg, sig)  # y >= p: not a canonical encoding
