"""Where a bitserial network meets float: quantize+bitpack in, unpack / dequantize / average pool out.

Small TE computes around the bitserial convs (numerics: edge_sdk.quant.bitserial); left to TVM's
default lowering, as they touch each activation once.
"""
from __future__ import annotations

from edge_sdk.compiler.ops.bitserial import WORD_BITS, bitpack


def quantize_pack_compute(x, *, bits: int, step: float, word: str = "uint32"):
    """Float NHWC activations -> packed unipolar codes clip(floor(x / step + 0.5), 0, 2^bits - 1).

    The entry into the binary part (after the float stem); step is a power of two, so x * (1/step)
    is exact and the codes equal the numpy quantizer's for the same float input.
    """
    from tvm import te, tirx

    qmax = float((1 << bits) - 1)
    inv = tirx.const(1.0 / step, x.dtype)
    codes = te.compute(x.shape, lambda *i: tirx.max(tirx.min(
        tirx.floor(x[i] * inv + tirx.const(0.5, x.dtype)), tirx.const(qmax, x.dtype)),
        tirx.const(0.0, x.dtype)).astype("int32"), name="quantize")
    return bitpack(codes, bits=bits, word=word, name="pack")


def unpack_compute(p, *, channels: int):
    """Packed codes (N, H, W, ceil(C/W), bits) -> int32 codes (N, H, W, C)."""
    from tvm import te, tirx

    wb = WORD_BITS[str(p.dtype)]
    bits = int(p.shape[-1])

    def f(n, y, x, c):
        bit = (c % wb).astype(p.dtype)
        return sum(((p[n, y, x, c // wb, b] >> bit) & tirx.const(1, p.dtype)).astype("int32") << b
                   for b in range(bits))

    return te.compute((*p.shape[:3], channels), f, name="unpack")


def unpack_dequant_compute(p, *, channels: int, step: float):
    """Packed codes -> float32 values code * step (N, H, W, C): a float layer's input."""
    from tvm import te

    codes = unpack_compute(p, channels=channels)
    return te.compute(codes.shape, lambda *i: codes[i].astype("float32") * step, name="dequant")


def unpack_mean_compute(p, *, channels: int, step: float):
    """Global average pool of packed codes, dequantized: (N, H, W, Cw, bits) -> float32 (N, C)."""
    from tvm import te

    codes = unpack_compute(p, channels=channels)
    h, w = int(p.shape[1]), int(p.shape[2])
    ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
    total = te.compute((int(p.shape[0]), channels), lambda n, c: te.sum(codes[n, ry, rx, c], axis=[ry, rx]),
                       name="code_sum")
    scale = step / (h * w)
    return te.compute(total.shape, lambda n, c: total[n, c].astype("float32") * scale, name="dequant_mean")
