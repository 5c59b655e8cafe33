"""The variant table: every precision we compile, and the facts about it, in one place.

The compiler, the CLI (choices and help texts), the bench (which peers a row compares with), tune
(which variants have tunable kernels), the demo and the dashboard (the baseline) all read this table.
"""
from __future__ import annotations

from dataclasses import dataclass

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import UsageError

BASELINE = "float32"  # what speed-ups are relative to (bench, demo, dashboard, apps/classify via the demo)


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    weight_bits: int
    activation_bits: int
    family: str  # "float", "int8", "bitserial": picks the compiler backend
    polarity: str | None = None  # bitserial: "unipolar" (activations 0..2^a-1, weights +-1) or "bipolar"
    glue: str | None = None  # bitserial: "fused" (integer shift/offset + bitpack in the conv) or "unfused" (float ops)
    # bitserial zoo nets: the stem (conv1 + pool) "int8" (integer only, straight to codes) or "float32" (the stem the
    # digits nets were trained with: 1.4 points better there, 16.5 modelled Pi 3 ms slower on ResNet18 224)
    stem: str | None = None
    # Peer families (bench/peers/) this variant is compared with, in order: the first family with a
    # measured peer row gives "vs best peer". w1a1 is the binary peers' (LCE) precision, then float's.
    peer_families: tuple[str, ...] = ()
    tunable: bool = False  # `edge-sdk tune` has workloads for its kernels; compile applies tuning records
    calibrated: bool = False  # `compile --calibrate DIR` sets its activation ranges from images (PTQ)
    lce: bool = False  # compiles an imported Larq Compute Engine (LCE) binary .tflite
    # A row may be listed before its compiler lands: compile refuses it, bench reports it "unavailable".
    available: bool = True


def _bitserial(name: str, w: int, a: int, glue: str, what: str, **facts) -> Variant:
    return Variant(name, what, w, a, "bitserial", "unipolar", glue,
                   **({"peer_families": ("float",), "stem": "int8"} | facts))


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("float32", "32-bit float everywhere", 32, 32, "float", peer_families=("float",), tunable=True),
        Variant("int8", "integer-only int8: full-int8 .tflite (bit-exact with TFLite) or post-training quantized",
                8, 8, "int8", peer_families=("int8",), calibrated=True),
        _bitserial("w1a1", 1, 1, "fused", "bitserial: 1-bit weights, 1-bit activations (fused glue)",
                   peer_families=("binary", "float"), lce=True),
        _bitserial("w1a2", 1, 2, "fused", "bitserial: 1-bit weights, 2-bit activations (fused glue)"),
        _bitserial("w1a3", 1, 3, "fused", "bitserial: 1-bit weights, 3-bit activations (fused glue)"),
        _bitserial("w2a2", 2, 2, "fused", "bitserial: 2-bit weights, 2-bit activations (fused glue)"),
        _bitserial("w1a1-float-stem", 1, 1, "fused", "w1a1 with the float32 stem (the digits nets' training stem)",
                   stem="float32"),
        _bitserial("w1a2-float-stem", 1, 2, "fused", "w1a2 with the float32 stem (the digits nets' training stem)",
                   stem="float32"),
        _bitserial("w1a1-unfused", 1, 1, "unfused", "w1a1 with the glue as separate float ops (ablation)", lce=True),
        _bitserial("w1a2-unfused", 1, 2, "unfused", "w1a2 with the glue as separate float ops (ablation)"),
        _bitserial("w2a2-unfused", 2, 2, "unfused", "w2a2 with the glue as separate float ops (ablation)"),
    )
}

TUNABLE_VARIANTS = tuple(n for n, v in VARIANTS.items() if v.tunable)
CALIBRATED_VARIANTS = tuple(n for n, v in VARIANTS.items() if v.calibrated)
LCE_VARIANTS = tuple(n for n, v in VARIANTS.items() if v.lce)


def names(*, family: str | None = None) -> list[str]:
    """The variant names (of one family), in table order: for choices, help texts and messages."""
    return [n for n, v in VARIANTS.items() if family is None or v.family == family]


def get_variant(name: str) -> Variant:
    try:
        v = VARIANTS[name]
    except KeyError:
        raise UsageError(f"unknown variant '{name}': {did_you_mean(name, VARIANTS)}") from None
    if not v.available:
        raise UsageError(f"variant '{name}' ({v.description}) is not implemented yet in this version")
    return v
