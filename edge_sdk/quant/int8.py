"""Numpy reference of TFLite's integer-only int8 scheme: the truth the compiled int8 kernels are tested against.

r = S * (q - Z). Activations: int8, per-tensor scale and zero point. Weights: int8, zero point 0,
per-channel (or per-tensor) scales. Bias: int32 with scale S_in * S_w. Products accumulate in int32
with the zero-point cross terms; the int32 accumulator is requantized by a fixed-point multiplier and
a shift, rounded exactly as TFLite's reference kernels (gemmlowp: saturating rounding doubling high
multiply, then rounding divide by a power of two); ReLU/ReLU6 are a clamp on the output range.

Every function mirrors one TFLite reference kernel (tflite/kernels/internal/reference/...), including
its quirks (C truncating division in average pool, float rounding of the activation range), because
the goal is bit-exactness with the interpreter run with BUILTIN_REF kernels, not "close". Values are
carried as int64 numpy arrays holding int32 quantities; accumulations use float64 matmuls, exact for
|acc| < 2**53 (8-bit products, any realistic reduction length).
SOFTMAX and LOGISTIC (gemmlowp's fixed-point exp and reciprocal) are in quant/int8_nonlinear.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge_sdk.graph.int8 import QParams as QParams  # the graph's type; q8.QParams stays a name here

INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


# ---------------------------------------------------------------- rounding and fixed point (gemmlowp)


def tflite_round(x):
    """std::round (half away from zero) on float32/float64 values, as TfLiteRound; np.round is half-to-even."""
    x = np.asarray(x)
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0).astype(x.dtype)


def quantize_multiplier(m: float) -> tuple[int, int]:
    """QuantizeMultiplier: real m -> (int32 multiplier in [2^30, 2^31), shift) with m ~= mult * 2^(shift-31)."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    q_fixed = int(tflite_round(np.float64(q) * (1 << 31)))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def _trunc_div_pot(v, bits: int):
    """C integer division by 2**bits (truncation toward zero) on int64 arrays."""
    v = np.asarray(v, dtype=np.int64)
    return np.where(v >= 0, v >> bits, -((-v) >> bits))


def srdhm(a, b):
    """SaturatingRoundingDoublingHighMul on int32 values (ARM vqrdmulh)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    out = _trunc_div_pot(ab + nudge, 31)
    return np.where((a == b) & (a == INT32_MIN), INT32_MAX, out)


def rounding_divide_by_pot(x, exponent):
    """RoundingDivideByPOT: arithmetic right shift rounding to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """MultiplyByQuantizedMultiplier (double rounding, TFLite's default build); per-channel arrays broadcast."""
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    x = np.asarray(x, dtype=np.int64) * (np.int64(1) << left)
    return rounding_divide_by_pot(srdhm(x, multiplier), right)



# ---------------------------------------------------------------- quantization parameters


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """QUANTIZE float32 -> int8 as reference AffineQuantize: round(x / scale) in float32, + zp, clamp."""
    v = tflite_round(np.asarray(x, np.float32) / np.float32(scale)).astype(np.int64) + zero_point
    return np.clip(v, INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """DEQUANTIZE int8 -> float32: scale * (q - zp), one rounding to float32."""
    return (np.float64(np.float32(scale)) * (q.astype(np.int64) - zero_point)).astype(np.float32)


def activation_range(activation: str, scale: float, zero_point: int) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the clamp that implements a fused NONE/RELU/RELU6/RELU_N1_TO_1."""
    def q(f: float) -> int:
        return zero_point + int(tflite_round(np.float32(f) / np.float32(scale)))
    if activation == "NONE":
        return INT8_MIN, INT8_MAX
    if activation == "RELU":
        return max(INT8_MIN, q(0.0)), INT8_MAX
    if activation == "RELU6":
        return max(INT8_MIN, q(0.0)), min(INT8_MAX, q(6.0))
    if activation == "RELU_N1_TO_1":
        return max(INT8_MIN, q(-1.0)), min(INT8_MAX, q(1.0))
    raise ValueError(f"unsupported fused activation {activation}")


def conv_multipliers(in_scale: float, w_scales, out_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel (multiplier, shift) as PopulateConvolutionQuantizationParams computes them (double)."""
    w = np.asarray(w_scales, dtype=np.float32).reshape(-1)
    pairs = [quantize_multiplier(float(np.float32(in_scale)) * float(s) / float(np.float32(out_scale))) for s in w]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


@dataclass(frozen=True, eq=False)
class Requant:
    """How a conv/depthwise/dense layer's int32 accumulator becomes int8 (TFLite's per-channel scheme): the
    input zero point (subtracted from every input; the compiled kernels fold its cross term into the bias),
    the fixed-point multiplier and shift per output channel, the output zero point and the fused
    activation's clamp (lo, hi)."""

    in_zp: int
    multiplier: np.ndarray
    shift: np.ndarray
    out_zp: int
    act: tuple[int, int]


@dataclass(frozen=True)
class Window:
    """Where a conv window reads: strides, dilation and TFLite padding ("SAME" or "VALID")."""

    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: str = "SAME"

    @staticmethod
    def of(opts: dict) -> Window:
        """The window of an Int8Graph op's options (no dilation key: 1)."""
        return Window(tuple(opts["stride"]), tuple(opts.get("dilation", (1, 1))), opts["padding"])

    def place(self, x_shape, kh: int, kw: int) -> tuple[int, int, tuple[int, int, int, int]]:
        """(OH, OW, (top, bottom, left, right)) of a kh x kw window over an NHWC input."""
        return _pads(x_shape, kh, kw, self.stride, self.dilation, self.padding)


def requantize(acc, multiplier, shift, out_zp: int, act: tuple[int, int]) -> np.ndarray:
    """int32 accumulator -> int8: fixed-point multiply, add the output zero point, clamp to the activation range."""
    v = multiply_by_quantized_multiplier(acc, multiplier, shift) + out_zp
    return np.clip(v, act[0], act[1]).astype(np.int8)


# ---------------------------------------------------------------- kernels


def same_padding(size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int, int]:
    """TFLite SAME padding: (out, before, after); the odd pixel goes after (bottom/right)."""
    eff = (k - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + eff - size, 0)
    return out, total // 2, total - total // 2


def _pads(x_shape, kh, kw, stride, dilation, padding):
    (_, h, w, _), (sh, sw), (dh, dw) = x_shape, stride, dilation
    if padding == "SAME":
        oh, pt, pb = same_padding(h, kh, sh, dh)
        ow, pl, pr = same_padding(w, kw, sw, dw)
    else:
        oh = (h - ((kh - 1) * dh + 1)) // sh + 1
        ow = (w - ((kw - 1) * dw + 1)) // sw + 1
        pt = pb = pl = pr = 0
    return oh, ow, (pt, pb, pl, pr)


def _patches(xc: np.ndarray, kh, kw, stride, dilation, padding, fill: float):
    """(N,H,W,C) -> (N,OH,OW,KH,KW,C) windows, padded with `fill` (zero after centering = skipped taps)."""
    oh, ow, (pt, pb, pl, pr) = _pads(xc.shape, kh, kw, stride, dilation, padding)
    xp = np.pad(xc, ((0, 0), (pt, pb + kh * dilation[0]), (pl, pr + kw * dilation[1]), (0, 0)),
                constant_values=fill)
    (sh, sw), (dh, dw) = stride, dilation
    rows = [[xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
             for j in range(kw)] for i in range(kh)]
    return np.stack([np.stack(r, axis=3) for r in rows], axis=3)


def conv2d(x, w, bias, rq: Requant, win: Window = Window()):
    """ConvPerChannel: x int8 NHWC, w int8 OHWI (zero point 0), bias int32 (O,) -> int8 NHWC."""
    o, kh, kw, _ = w.shape
    p = _patches(x.astype(np.float64) - rq.in_zp, kh, kw, win.stride, win.dilation, win.padding, 0.0)
    n, oh, ow = p.shape[:3]
    acc = (p.reshape(n * oh * ow, -1) @ w.astype(np.float64).reshape(o, -1).T).astype(np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return requantize(acc, rq.multiplier, rq.shift, rq.out_zp, rq.act).reshape(n, oh, ow, o)


def depthwise_conv2d(x, w, bias, rq: Requant, win: Window = Window(), *, depth_multiplier: int = 1):
    """DepthwiseConvPerChannel: w (1,KH,KW,C*M); output channel c*M+m reads input channel c."""
    _, kh, kw, cm = w.shape
    p = _patches(x.astype(np.float64) - rq.in_zp, kh, kw, win.stride, win.dilation, win.padding, 0.0)
    if depth_multiplier > 1:
        p = np.repeat(p, depth_multiplier, axis=-1)
    acc = np.einsum("nhwijc,ijc->nhwc", p, w[0].astype(np.float64)).astype(np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return requantize(acc, rq.multiplier, rq.shift, rq.out_zp, rq.act)


def fully_connected(x, w, bias, rq: Requant):
    """FullyConnected: x (..., K) int8 flattened to (B, K); w (O, K) int8 (zero point 0) -> (B, O) int8."""
    o, k = w.shape
    xc = x.reshape(-1, k).astype(np.float64) - rq.in_zp
    acc = (xc @ w.astype(np.float64).T).astype(np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return requantize_single(acc, rq.multiplier, rq.shift, rq.out_zp, rq.act)


def requantize_single(acc, multiplier, shift, out_zp: int, act: tuple[int, int]) -> np.ndarray:
    """Requantize with one rounding: (acc * M + 2^(30 - shift)) >> (31 - shift), as ruy applies the multiplier.

    LiteRT's FULLY_CONNECTED int8 (BUILTIN_REF too) rounds this way, unlike its convolutions (double
    rounding, multiply_by_quantized_multiplier): measured on DenseNet121's classifier, 2 of 400 outputs
    differ by 1 LSB with double rounding and none with this."""
    total = 31 - np.asarray(shift, dtype=np.int64)
    v = (np.asarray(acc, np.int64) * np.asarray(multiplier, np.int64) + (np.int64(1) << (total - 1))) >> total
    return np.clip(v + out_zp, act[0], act[1]).astype(np.int8)


@dataclass(frozen=True)
class AddParams:
    """PrepareGeneralSubOp/Add for int8: both inputs rescaled to 2*max(S1,S2) with 20 bits of headroom."""

    in1_zp: int
    in2_zp: int
    out_zp: int
    m1: int
    s1: int
    m2: int
    s2: int
    mo: int
    so: int
    left_shift: int = 20

    @staticmethod
    def make(s_in1: float, z1: int, s_in2: float, z2: int, s_out: float, z_out: int) -> AddParams:
        twice_max = float(2 * max(np.float32(s_in1), np.float32(s_in2)))
        m1, sh1 = quantize_multiplier(float(np.float32(s_in1)) / twice_max)
        m2, sh2 = quantize_multiplier(float(np.float32(s_in2)) / twice_max)
        mo, sho = quantize_multiplier(twice_max / ((1 << 20) * float(np.float32(s_out))))
        return AddParams(z1, z2, z_out, m1, sh1, m2, sh2, mo, sho)


def add(a, b, p: AddParams, act):
    """reference_integer_ops::Add (with numpy broadcasting for BroadcastAdd)."""
    va = multiply_by_quantized_multiplier((a.astype(np.int64) - p.in1_zp) << p.left_shift, p.m1, p.s1)
    vb = multiply_by_quantized_multiplier((b.astype(np.int64) - p.in2_zp) << p.left_shift, p.m2, p.s2)
    out = multiply_by_quantized_multiplier(va + vb, p.mo, p.so) + p.out_zp
    return np.clip(out, act[0], act[1]).astype(np.int8)


def avg_pool(x, *, kh, kw, stride, padding, act):
    """AveragePool int8: sum over the valid taps only, C-style rounded division by their count."""
    oh, ow, pads = _pads(x.shape, kh, kw, stride, (1, 1), padding)
    p = _patches(x.astype(np.float64), kh, kw, stride, (1, 1), padding, 0.0)
    ones = _patches(np.ones(x.shape[:3] + (1,)), kh, kw, stride, (1, 1), padding, 0.0)
    acc = p.sum(axis=(3, 4)).astype(np.int64)
    cnt = ones.sum(axis=(3, 4)).astype(np.int64)
    half = cnt // 2
    num = np.where(acc > 0, acc + half, acc - half)
    q = np.sign(num) * (np.abs(num) // cnt)  # C truncating division
    return np.clip(q, act[0], act[1]).astype(np.int8)


def max_pool(x, *, kh, kw, stride, padding, act):
    """MaxPool int8: max over the valid taps (padding never wins), then the activation clamp."""
    p = _patches(x.astype(np.float64), kh, kw, stride, (1, 1), padding, -np.inf)
    return np.clip(p.max(axis=(3, 4)), act[0], act[1]).astype(np.int8)


def mean_multiplier(in_scale: float, out_scale: float, count: int) -> tuple[int, int]:
    """LiteRT QuantizedMeanOrSum: S_in/S_out as (mult, shift), then 1/count folded into the multiplier."""
    mult, shift = quantize_multiplier(float(np.float32(in_scale)) / float(np.float32(out_scale)))
    s = min(int(count).bit_length() - 1, 32, 31 + shift)
    return int((mult << s) // count), shift - s


def mean(x, axes, *, in_zp, out_zp, in_scale, out_scale, keep_dims):
    """MEAN int8 (reference QuantizedMeanOrSum, integer version): sum - zp*n, one requantize."""
    axes = tuple(sorted(a % x.ndim for a in axes))
    n = int(np.prod([x.shape[a] for a in axes]))
    mult, shift = mean_multiplier(in_scale, out_scale, n)
    total = x.astype(np.int64).sum(axis=axes, keepdims=keep_dims) - in_zp * n
    total = ((total + 2 ** 31) % 2 ** 32) - 2 ** 31  # static_cast<int32_t>
    out = multiply_by_quantized_multiplier(total, mult, shift) + out_zp
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)


def pad(x, paddings, *, value: int):
    """PAD/PADV2 on int8: the pad value is the output zero point (or the given constant)."""
    return np.pad(x, [tuple(int(v) for v in p) for p in paddings], constant_values=value).astype(np.int8)
