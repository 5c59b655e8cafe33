"""Numpy reference of TFLite's int8 elementwise kernels of issue 14: MUL, SUB, MAXIMUM/MINIMUM, PRELU
(all with numpy broadcasting, as BroadcastMul6DSlow & co.), HARD_SWISH, LEAKY_RELU, TANH.

Each mirrors its reference kernel (tensorflow/lite/kernels/internal/reference/{mul,sub,prelu,
hard_swish,leaky_relu}.h and the LUT path of activations.cc) and the parameters its Prepare computes,
including where TFLite does the scale arithmetic in float32 before widening to double.

Unary int8 ops have 256 possible inputs, so each has `*_table(...)`: the op applied to every int8
value, indexed by q + 128. The compiled kernels look their output up in that table: exact by
construction, given that the elementwise function here is (tests compare it with BUILTIN_REF).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_sdk.quant import int8 as q8

INT16_MIN, INT16_MAX = -(2 ** 15), 2 ** 15 - 1
ALL_INT8 = np.arange(q8.INT8_MIN, q8.INT8_MAX + 1, dtype=np.int64)


def _f32(v) -> float:
    return float(np.float32(v))


@dataclass(frozen=True)
class MulParams:
    """Mul's Prepare: one multiplier for S1 * S2 / S_out (in double), zero points as offsets."""

    in1_zp: int
    in2_zp: int
    out_zp: int
    multiplier: int
    shift: int

    @staticmethod
    def make(s1: float, z1: int, s2: float, z2: int, s_out: float, z_out: int) -> MulParams:
        mult, shift = q8.quantize_multiplier(_f32(s1) * _f32(s2) / _f32(s_out))
        return MulParams(z1, z2, z_out, mult, shift)


def mul(a, b, p: MulParams, act) -> np.ndarray:
    """reference_integer_ops::Mul / BroadcastMul6DSlow: (a - z1) * (b - z2) requantized, + z_out, clamp."""
    prod = (np.asarray(a, np.int64) - p.in1_zp) * (np.asarray(b, np.int64) - p.in2_zp)
    out = q8.multiply_by_quantized_multiplier(prod, p.multiplier, p.shift) + p.out_zp
    return np.clip(out, act[0], act[1]).astype(np.int8)


def sub(a, b, p: q8.AddParams, act) -> np.ndarray:
    """reference_ops::SubElementwise / BroadcastQuantSubSlow: Add's rescaling, a difference instead of a sum."""
    va = q8.multiply_by_quantized_multiplier((np.asarray(a, np.int64) - p.in1_zp) << p.left_shift, p.m1, p.s1)
    vb = q8.multiply_by_quantized_multiplier((np.asarray(b, np.int64) - p.in2_zp) << p.left_shift, p.m2, p.s2)
    out = q8.multiply_by_quantized_multiplier(va - vb, p.mo, p.so) + p.out_zp
    return np.clip(out, act[0], act[1]).astype(np.int8)


@dataclass(frozen=True)
class PreluParams:
    in_zp: int
    alpha_zp: int
    out_zp: int
    m1: int
    s1: int
    m2: int
    s2: int

    @staticmethod
    def make(s_in: float, z_in: int, s_alpha: float, z_alpha: int, s_out: float, z_out: int) -> PreluParams:
        m1, s1 = q8.quantize_multiplier(_f32(np.float32(s_in) / np.float32(s_out)))
        m2, s2 = q8.quantize_multiplier(_f32(np.float32(s_in) * np.float32(s_alpha) / np.float32(s_out)))
        return PreluParams(z_in, z_alpha, z_out, m1, s1, m2, s2)


def prelu(x, alpha, p: PreluParams) -> np.ndarray:
    """reference_ops::BroadcastPrelu4DSlow: x >= 0 rescaled by S_in/S_out, else (x - z) * (alpha - z_a)."""
    xv = np.asarray(x, np.int64) - p.in_zp
    av = np.asarray(alpha, np.int64) - p.alpha_zp
    pos = q8.multiply_by_quantized_multiplier(xv, p.m1, p.s1)
    neg = q8.multiply_by_quantized_multiplier(xv * av, p.m2, p.s2)
    out = np.where(xv >= 0, pos, neg) + p.out_zp
    return np.clip(out, q8.INT8_MIN, q8.INT8_MAX).astype(np.int8)


def maximum(a, b) -> np.ndarray:
    """MAXIMUM int8: on the raw values (inputs and output share one quantization)."""
    return np.maximum(np.asarray(a, np.int8), np.asarray(b, np.int8))


def minimum(a, b) -> np.ndarray:
    return np.minimum(np.asarray(a, np.int8), np.asarray(b, np.int8))


# ---------------------------------------------------------------- int16 fixed point (gemmlowp)


def _srdhm16(a, b):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    v = ab + nudge
    out = np.where(v >= 0, v >> 15, -((-v) >> 15))  # C division by 2^15
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, out)


def _sdhm16(a, b):
    """SaturatingDoublingHighMul (no rounding): (a * b) / 2^15 truncated."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b
    out = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, out)


def _sat_left_shift16(v, amount: int):
    return np.clip(np.asarray(v, np.int64) * (1 << amount), INT16_MIN, INT16_MAX)


def _downscale_to_int16(m: int) -> int:
    """DownScaleInt32ToInt16Multiplier."""
    if m >= q8.INT32_MAX - (1 << 15):
        return INT16_MAX
    return (m + (1 << 15)) >> 16


@dataclass(frozen=True)
class HardSwishParams:
    in_zp: int
    out_zp: int
    out_mult16: int
    out_exp: int
    relu_mult16: int
    relu_exp: int

    @staticmethod
    def make(s_in: float, z_in: int, s_out: float, z_out: int) -> HardSwishParams:
        """HardSwishPrepare: float32 scale arithmetic, QuantizeMultiplier, then int16 multipliers."""
        hires = np.float32(1.0 / 128.0) * np.float32(s_in)
        om, oe = q8.quantize_multiplier(_f32(hires / np.float32(s_out)))
        rm, re = q8.quantize_multiplier(_f32(hires / np.float32(3.0 / 32768.0)))
        return HardSwishParams(z_in, z_out, _downscale_to_int16(om), oe, _downscale_to_int16(rm), re)


def hard_swish(x, p: HardSwishParams) -> np.ndarray:
    """reference_ops::HardSwish<int8_t>, line by line in int16 fixed point."""
    v = np.asarray(x, np.int64) - p.in_zp
    hires = v * (1 << 7)
    preshift = _srdhm16(hires, p.out_mult16)
    relu = hires
    if p.relu_exp > 0:
        relu = _sat_left_shift16(relu, p.relu_exp - 1)
    relu = _srdhm16(relu, p.relu_mult16)
    if p.relu_exp > 0:
        relu = _sat_left_shift16(relu, 1)
    if p.relu_exp < 0:
        relu = q8.rounding_divide_by_pot(relu, -p.relu_exp)
    relu = (relu + (1 << 15)) >> 1
    out = q8.rounding_divide_by_pot(_sdhm16(relu, preshift), -p.out_exp) + p.out_zp
    return np.clip(out, q8.INT8_MIN, q8.INT8_MAX).astype(np.int8)


def hard_swish_table(s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
    return hard_swish(ALL_INT8, HardSwishParams.make(s_in, z_in, s_out, z_out))


def leaky_relu_table(alpha: float, s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
    """LeakyRelu int8 (QuantizeLeakyRelu): two requantizations, chosen by the sign of q - z_in."""
    ma, sa = q8.quantize_multiplier(_f32(np.float32(s_in) * np.float32(alpha) / np.float32(s_out)))
    mi, si = q8.quantize_multiplier(_f32(np.float32(s_in) / np.float32(s_out)))
    v = ALL_INT8 - z_in
    out = np.where(v >= 0, q8.multiply_by_quantized_multiplier(v, mi, si),
                   q8.multiply_by_quantized_multiplier(v, ma, sa)) + z_out
    return np.clip(out, q8.INT8_MIN, q8.INT8_MAX).astype(np.int8)


def tanh_table(s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
    """LUTPopulate<int8_t> with std::tanh in float32, as activations.cc builds TANH's int8 table."""
    deq = np.float32(s_in) * (ALL_INT8 - z_in).astype(np.float32)
    y = np.tanh(deq, dtype=np.float32)
    v = q8.tflite_round(y * (np.float32(1.0) / np.float32(s_out))).astype(np.float32) + np.float32(z_out)
    return np.clip(v.astype(np.int64), q8.INT8_MIN, q8.INT8_MAX).astype(np.int8)


def lookup(x, table: np.ndarray) -> np.ndarray:
    return table[np.asarray(x, np.int64) + 128]
