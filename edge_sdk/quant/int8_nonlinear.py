"""Numpy reference of TFLite's int8 SOFTMAX and LOGISTIC: gemmlowp's fixed-point exp and reciprocal.

Bit-exact with the reference kernels (reference_ops::Softmax int8, LUTPopulate for LOGISTIC); the
rounding primitives (srdhm, rounding_divide_by_pot, quantize_multiplier) are quant/int8.py's.
"""
from __future__ import annotations

import math

import numpy as np

from edge_sdk.quant.int8 import (INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, quantize_multiplier,
                                 rounding_divide_by_pot, srdhm, tflite_round)


def sat_mul_pot(x, exponent: int):
    """SaturatingRoundingMultiplyByPOT<exponent> on int32 raw values."""
    x = np.asarray(x, dtype=np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, x << exponent))


def _exp_on_interval(a):
    """gemmlowp exp_on_interval_between_negative_one_quarter_and_0_excl, Q0.31 in and out."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = sat_mul_pot(x4, -2)
    poly = sat_mul_pot(srdhm(x4_over_4 + x3, one_third) + x2, -1)
    return constant_term + srdhm(constant_term, x + poly)


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
               (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int):
    """gemmlowp exp_on_negative_values: a is Q(integer_bits).(31-integer_bits), a <= 0; result Q0.31."""
    frac = 31 - integer_bits
    a = np.asarray(a, dtype=np.int64)
    one_quarter = 1 << (frac - 2)
    mask = one_quarter - 1
    a_mod = (a & mask) - one_quarter
    result = _exp_on_interval(sat_mul_pot(a_mod, integer_bits))  # Rescale<0>
    remainder = a_mod - a
    for exponent, mult in _EXP_BARREL:
        if integer_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, mult), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a):
    """gemmlowp one_over_one_plus_x_for_x_in_0_1 (Newton-Raphson), Q0.31 in and out."""
    a = np.asarray(a, dtype=np.int64)
    s = a + INT32_MAX  # RoundingHalfSum(a, One) with One = INT32_MAX in Q0.31
    half_denominator = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))
    x = 1515870810 + srdhm(half_denominator, -1010580540)  # Q2.29
    one_q2 = 1 << 29
    for _ in range(3):
        hx = srdhm(half_denominator, x)
        x = x + sat_mul_pot(srdhm(x, one_q2 - hx), 2)
    return sat_mul_pot(x, 1)  # Rescale<0>(ExactMulByPot<-1>(x)): Q1.30 -> Q0.31


def get_reciprocal(x, x_integer_digits: int):
    """TFLite GetReciprocal: (Q0.31 reciprocal of x scaled into [1, 2), num_bits_over_unit)."""
    x = np.asarray(x, dtype=np.int64)
    headroom_plus_one = 32 - np.frexp(np.maximum(x, 1).astype(np.float64))[1].astype(np.int64)  # clz(uint32)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted_minus_one = ((x << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    return one_over_one_plus_x_for_x_in_0_1(shifted_minus_one), num_bits_over_unit


def softmax_params(beta: float, in_scale: float) -> tuple[int, int, int]:
    """PreprocessSoftmaxScaling + CalculateInputRadius for Q5.26 diffs: (multiplier, left_shift, diff_min)."""
    real = min(float(beta) * float(np.float32(in_scale)) * (1 << 26), float((1 << 31) - 1))
    mult, shift = quantize_multiplier(real)
    radius = math.floor(1.0 * 31 * (1 << 26) / (1 << shift))
    return mult, shift, -radius


def softmax(x, *, beta: float, in_scale: float):
    """reference_ops::Softmax int8 -> int8 (output scale 1/256, zero point -128), over the last axis."""
    mult, left_shift, diff_min = softmax_params(beta, in_scale)
    xi = x.astype(np.int64)
    diff = xi - xi.max(axis=-1, keepdims=True)
    valid = diff >= diff_min
    scaled = srdhm(diff * (1 << left_shift), mult)  # MultiplyByQuantizedMultiplierGreaterThanOne
    e = exp_on_negative_values(scaled, 5)
    e_acc = np.where(valid, sat_mul_pot(e, -12), 0)  # Rescale<12> from Q0.31
    sum_of_exps = e_acc.sum(axis=-1, keepdims=True)
    recip, bits_over_unit = get_reciprocal(sum_of_exps, 12)
    exponent = bits_over_unit + 31 - 8
    out = rounding_divide_by_pot(srdhm(recip, e), exponent) - 128
    return np.where(valid, np.clip(out, INT8_MIN, INT8_MAX), INT8_MIN).astype(np.int8)


def logistic_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> np.ndarray:
    """LUTPopulate<int8_t> for LOGISTIC (the reference kernel is this table): 256 int8 entries, index q+128."""
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)
    deq = np.float32(in_scale) * (q - in_zp).astype(np.float32)
    y = np.float32(1.0) / (np.float32(1.0) + np.exp(-deq, dtype=np.float32))
    v = tflite_round(y * (np.float32(1.0) / np.float32(out_scale))).astype(np.float32) + np.float32(out_zp)
    return np.clip(v.astype(np.int64), INT8_MIN, INT8_MAX).astype(np.int8)


def logistic(x, table: np.ndarray):
    return table[x.astype(np.int64) + 128]
