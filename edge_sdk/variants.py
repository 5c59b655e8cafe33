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


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("float32", "32-bit float everywhere", 32, 32, "float", True),
        Variant("int8", "integer-only int8 (per-channel weights, TFLite rounding)", 8, 8, "int8", False),
        Variant("w1a1", "bitserial: 1-bit weights, 1-bit activations (fused glue)", 1, 1, "bitserial", False),
        Variant("w1a2", "bitserial: 1-bit weights, 2-bit activations (fused glue)", 1, 2, "bitserial", False),
        Variant("w1a3", "bitserial: 1-bit weights, 3-bit activations (fused glue)", 1, 3, "bitserial", False),
        Variant("w2a2", "bitserial: 2-bit weights, 2-bit activations (fused glue)", 2, 2, "bitserial", False),
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
