"""TE/TIR expressions of TFLite's fixed-point requantization, mirroring edge_sdk.quant.int8 line by line.

Why a second copy: the numpy versions run on arrays at compile time and in tests; these build the
integer expressions that go into the compiled kernels' epilogues. Everything is int64 arithmetic on
int32 quantities (shifts, ands, selects): no floating point, so the result is the same bits as TFLite
on every target. The tests compare the compiled kernels with the numpy reference, which is compared
with TFLite.
"""
from __future__ import annotations

import tvm
from tvm import tirx

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def i64(v) -> tvm.tirx.PrimExpr:
    return tirx.const(int(v), "int64") if isinstance(v, int) else v.astype("int64")


def sel(cond, a, b):
    return tirx.Select(cond, i64(a), i64(b))


def round_half_away(v):
    """float32 round half away from zero (TFLite's QUANTIZE rounding, std::round), as trunc + a select."""
    t = tirx.trunc(v)
    step = tirx.Select(v > 0, tirx.const(1.0, "float32"), tirx.const(-1.0, "float32"))
    return t + tirx.Select(tirx.abs(v - t) >= tirx.const(0.5, "float32"), step, tirx.const(0.0, "float32"))


def trunc_div_pot(v, bits: int):
    """C division by 2**bits (toward zero)."""
    return sel(v >= i64(0), v >> i64(bits), -((-v) >> i64(bits)))


def srdhm(a, b, *, may_saturate: bool = False):
    """SaturatingRoundingDoublingHighMul; may_saturate=True adds the INT32_MIN * INT32_MIN case, which
    cannot occur when either operand is a positive multiplier (every use in our kernels)."""
    a, b = i64(a), i64(b)
    ab = a * b
    # nudge = ab >= 0 ? 2^30 : 1 - 2^30, and C's truncating division, both branch-free: each operand
    # appears twice, not four times, which keeps nested requantizations small for TVM's simplifier.
    v = ab + i64(1 << 30) - ((ab >> i64(63)) & i64(0x7FFFFFFF))
    out = (v + ((v >> i64(63)) & i64(0x7FFFFFFF))) >> i64(31)
    if may_saturate:
        out = sel(tirx.all(a == b, a == i64(INT32_MIN)), INT32_MAX, out)
    return out


def rounding_divide_by_pot(x, exponent):
    """RoundingDivideByPOT; exponent an int or an int64 expression in [0, 31]."""
    x, e = i64(x), i64(exponent)
    mask = (i64(1) << e) - i64(1)
    threshold = (mask >> i64(1)) + ((x >> i64(63)) & i64(1))
    return (x >> e) + ((x & mask) > threshold).astype("int64")


def mbqm(x, multiplier, left_shift, right_shift):
    """MultiplyByQuantizedMultiplier with the shift split into its left (>= 0) and right (>= 0) parts."""
    return rounding_divide_by_pot(srdhm(i64(x) << i64(left_shift), multiplier, may_saturate=False), right_shift)


def sat_mul_pot(x, exponent: int):
    """SaturatingRoundingMultiplyByPOT<exponent>."""
    x = i64(x)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    th = (1 << (31 - exponent)) - 1
    return sel(x > i64(th), INT32_MAX, sel(x < i64(-th), INT32_MIN, x << i64(exponent)))


def clamp_int8(v, lo: int = -128, hi: int = 127):
    return tirx.max(tirx.min(v, i64(hi)), i64(lo)).astype("int8")




def mbqm32(x, multiplier, right_shift):
    """MultiplyByQuantizedMultiplier for left shift 0 and a positive multiplier, in 32-bit lanes but one
    widening multiply: equal to mbqm there, and what a vectorized epilogue can afford.

    SRDHM's nudge-and-truncate, (ab + (ab >= 0 ? 2^30 : 1 - 2^30)) / 2^31 rounded toward zero, equals
    floor((ab + 2^30) / 2^31) for every int64 ab (for ab < 0, trunc((ab + 1 - 2^30) / 2^31) is
    ceil of that, which is floor((ab + 2^30) / 2^31)); with b > 0 the INT32_MIN * INT32_MIN saturation
    cannot occur. That is ARM's sqrdmulh, and on x86 the shift needs only the low 32 bits of the result
    (a logical 64-bit shift). RoundingDivideByPOT then runs on int32 as in gemmlowp.
    """
    ab = x.astype("int64") * multiplier.astype("int64")
    h = ((ab + tirx.const(1 << 30, "int64")) >> tirx.const(31, "int64")).astype("int32")
    one = tirx.const(1, "int32")
    mask = (one << right_shift) - one
    threshold = (mask >> one) + ((h >> tirx.const(31, "int32")) & one)
    return (h >> right_shift) + ((h & mask) > threshold).astype("int32")


def clamp_int8_32(v, lo: int = -128, hi: int = 127):
    return tirx.max(tirx.min(v, tirx.const(hi, "int32")), tirx.const(lo, "int32")).astype("int8")


def _neon(name: str, *args):
    return tirx.call_llvm_pure_intrin("int32", f"llvm.aarch64.neon.{name}", *args)


def mbqm32_neon(x, multiplier, right_shift):
    """mbqm32 as TFLite's NEON MultiplyByQuantizedMultiplier computes it: `sqrdmulh` (ARM's SQRDMULH is
    SRDHM exactly: (2ab + 2^31) >> 32, saturating only at INT32_MIN^2, which a positive multiplier
    excludes), then RoundingDivideByPOT as `srshl` by -right_shift (rounds half up) after adding -1 to
    negative values (`and` with the negative shift's sign bit, `sshr #31`, `sqadd`), so halves round away
    from zero. 5 NEON instructions for 4 lanes; aarch64 only, in vectorized loops (no scalar 32-bit srshl)."""
    neg = tirx.const(0, "int32") - right_shift
    h = _neon("sqrdmulh", x, multiplier)
    h = _neon("sqadd", h, (h & neg) >> tirx.const(31, "int32"))
    return _neon("srshl", h, neg)

