"""The variant table: every precision we compile, in one place.

The compiler, the validator, the bench and the dashboard all read this table.
"""
from __future__ import annotations

from dataclasses import dataclass

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import UsageError


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    weight_bits: int
    activation_bits: int
    family: str  # "float", "int8", "bitserial"
    available: bool  # False: the row exists but its compiler has not landed yet
    polarity: str | None = None  # bitserial: "unipolar" (activations 0..2^a-1, weights +-1) or "bipolar"
    glue: str | None = None  # bitserial: "fused" (integer shift/offset + bitpack in the conv) or "unfused" (float ops)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("float32", "32-bit float everywhere", 32, 32, "float", True),
        Variant("int8", "integer-only int8: full-int8 .tflite (bit-exact with TFLite) or post-training quantized", 8, 8, "int8", True),
        Variant("w1a1", "bitserial: 1-bit weights, 1-bit activations (fused glue)", 1, 1, "bitserial", True,
                "unipolar", "fused"),
        Variant("w1a2", "bitserial: 1-bit weights, 2-bit activations (fused glue)", 1, 2, "bitserial", True,
                "unipolar", "fused"),
        Variant("w1a3", "bitserial: 1-bit weights, 3-bit activations (fused glue)", 1, 3, "bitserial", True,
                "unipolar", "fused"),
        Variant("w2a2", "bitserial: 2-bit weights, 2-bit activations (fused glue)", 2, 2, "bitserial", True,
                "unipolar", "fused"),
        Variant("w1a1-unfused", "w1a1 with the glue as separate float ops (ablation)", 1, 1, "bitserial", True,
                "unipolar", "unfused"),
        Variant("w1a2-unfused", "w1a2 with the glue as separate float ops (ablation)", 1, 2, "bitserial", True,
                "unipolar", "unfused"),
        Variant("w2a2-unfused", "w2a2 with the glue as separate float ops (ablation)", 2, 2, "bitserial", True,
                "unipolar", "unfused"),
    )
}


def get_variant(name: str) -> Variant:
    try:
        v = VARIANTS[name]
    except KeyError:
        raise UsageError(f"unknown variant '{name}': {did_you_mean(name, VARIANTS)}") from None
    if not v.available:
        raise UsageError(f"variant '{name}' ({v.description}) is not implemented yet in this version")
    return v
