"""A whole binarized network in plain numpy: the golden output of every bitserial package.

Shares nothing with the TVM kernels: convolutions are plain integer convs of code *values* (no bit
packing, no popcount), computed as exact float64 matmuls (|sums| < 2^53), and the glue is the integer
formula of quant/glue.py written out. The layout and numerics of the network are documented in
edge_sdk/models/binarized.py.

    run_reference(net, x, glue="fused"|"unfused") -> Trace(scores, codes, stem_codes)
    stem_codes(net, x) -> the codes entering the first binary layer (int8 or float stem, with its pool)

The integer stem is written with the int8 scheme's numpy primitives (quant/int8.py: quantize, TFLite's
fixed-point requantize; themselves checked against TFLite), its conv as a plain exact integer conv.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_sdk.quant.bitserial import code_values, conv_out_size


@dataclass
class Trace:
    scores: np.ndarray  # (1, classes) float32 softmax
    codes: np.ndarray  # (N, H, W, C) int64: the last binary layer's output codes
    stem_codes: np.ndarray  # the codes entering the first binary layer
    histogram: dict  # fraction of each code value over all binary activations (sanity of the ranges)


def _pad(x, pad, value=0.0):
    t, l, b, r = pad
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value)


def conv2d_values(x, w, *, stride: int, pad) -> np.ndarray:
    """Plain NHWC conv (zero padding) of float64 values, w HWIO."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    kh, kw = w.shape[:2]
    xp = _pad(x, pad)
    oh = conv_out_size(x.shape[1], kh, stride, pad[0], pad[2])
    ow = conv_out_size(x.shape[2], kw, stride, pad[1], pad[3])
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for ry in range(kh):
        for rx in range(kw):
            out += xp[:, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride] @ w[ry, rx]
    return out


def max_pool(x, *, k: int, stride: int, pad) -> np.ndarray:
    xp = _pad(x, pad, -np.inf)
    oh = conv_out_size(x.shape[1], k, stride, pad[0], pad[2])
    ow = conv_out_size(x.shape[2], k, stride, pad[1], pad[3])
    out = np.full((x.shape[0], oh, ow, x.shape[3]), -np.inf)
    for ry in range(k):
        for rx in range(k):
            out = np.maximum(out, xp[:, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride])
    return out


def depthwise_values(x, w, *, stride: int, pad) -> np.ndarray:
    """Plain NHWC depthwise conv (zero padding) of float64 values, w (KH, KW, C)."""
    w = np.asarray(w, np.float64)
    kh, kw = w.shape[:2]
    xp = _pad(np.asarray(x, np.float64), pad)
    oh = conv_out_size(x.shape[1], kh, stride, pad[0], pad[2])
    ow = conv_out_size(x.shape[2], kw, stride, pad[1], pad[3])
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for ry in range(kh):
        for rx in range(kw):
            out += xp[:, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride] * w[ry, rx]
    return out


def accumulate(conv, codes) -> np.ndarray:
    """int64 accumulators of one bitserial conv: unipolar activation values times +-1 weight values."""
    a = code_values(codes, bits=conv.a_bits, signed=False)
    w = code_values(conv.w_codes, bits=conv.w_bits, signed=True)
    acc = conv2d_values(a, w, stride=conv.stride, pad=conv.pad)
    return np.rint(acc).astype(np.int64)


def pre_clip(conv, acc, glue: str) -> np.ndarray:
    """The glue before its clip, in output-code units (int64)."""
    if glue == "fused":
        g = conv.glue
        return ((acc << g.lshift) + g.offset) >> g.rshift
    z = acc.astype(np.float32) * conv.mult + conv.bias_half  # float32, as the unfused graph computes it
    return np.floor(z).astype(np.int64)


def int8_stem_accumulators(stem, x) -> np.ndarray:
    """int64 accumulators of the integer stem: conv(quantize(x) - Z, qweight) + qbias (exact, |acc| < 2^31)."""
    from edge_sdk.quant.int8 import quantize

    xq = quantize(x, stem.in_scale, stem.in_zp).astype(np.int64) - stem.in_zp  # padding = zero point: 0 here
    acc = conv2d_values(xq, stem.qweight.astype(np.int64), stride=stem.stride, pad=stem.pad)
    return np.rint(acc).astype(np.int64) + stem.qbias.astype(np.int64)


def int8_stem_requantize(stem, acc, *, a_bits: int) -> np.ndarray:
    """Accumulators -> codes: TFLite's fixed-point multiply by in_scale * w_scale / step (round to
    nearest as multiply_by_quantized_multiplier does), zero point 0, clamp [0, 2^a - 1] (ReLU + saturate)."""
    from edge_sdk.quant.int8 import multiply_by_quantized_multiplier

    v = multiply_by_quantized_multiplier(acc, stem.mult, stem.shift)
    return np.clip(v, 0, (1 << a_bits) - 1).astype(np.int64)


def stem_codes(net, x) -> np.ndarray:
    """The codes (int64 NHWC) the stem hands to the first binary layer.

    Integer stem: max pool on the codes. The requantizer q(acc) is monotone non-decreasing per channel,
    so max(q(a), q(b)) == q(max(a, b)): pooling codes equals quantizing the pooled accumulators
    (tests/test_bitserial_stem.py checks both orders). Codes are >= 0 and every window holds a real
    pixel, so the pool's padding never wins."""
    s = net.stem
    qmax = (1 << net.a_bits) - 1
    if s.integer:
        codes = int8_stem_requantize(s, int8_stem_accumulators(s, x), a_bits=net.a_bits)
        if s.pool:
            codes = max_pool(codes.astype(np.float64), k=s.pool, stride=s.pool_stride, pad=s.pool_pad).astype(np.int64)
        return codes
    y = conv2d_values(x, s.weight, stride=s.stride, pad=s.pad) + s.bias.astype(np.float64)
    y = np.maximum(y, 0.0)
    if s.pool:
        y = max_pool(y, k=s.pool, stride=s.pool_stride, pad=s.pool_pad)
    return np.clip(np.floor(y / net.step + 0.5), 0, qmax).astype(np.int64)


def run_reference(net, x, *, glue: str = "fused") -> Trace:
    if glue not in ("fused", "unfused"):
        raise ValueError(f"glue '{glue}' is not 'fused' or 'unfused'")
    qmax = (1 << net.a_bits) - 1
    quantize = lambda v: np.clip(np.floor(v / net.step + 0.5), 0, qmax).astype(np.int64)  # noqa: E731
    codes = stem_codes(net, x)
    stem_codes_, seen = codes, [codes]
    for b in net.blocks:
        if hasattr(b, "dw"):  # MobileNet: float depthwise on dequantized codes, then a bitserial pointwise
            d = b.dw
            y = depthwise_values(codes * net.step, d.weight, stride=d.stride, pad=d.pad) + d.bias.astype(np.float64)
            h = quantize(np.maximum(y, 0.0))
            codes = np.clip(pre_clip(b.pw, accumulate(b.pw, h), glue), 0, qmax)
            seen += [h, codes]
            continue
        h = np.clip(pre_clip(b.conv1, accumulate(b.conv1, codes), glue), 0, qmax)
        t = pre_clip(b.conv2, accumulate(b.conv2, h), glue)
        res = pre_clip(b.down, accumulate(b.down, codes), glue) if b.down is not None else codes << b.res_lshift
        codes = np.clip(t + res, 0, qmax)
        seen += [h, codes]
    feat = codes.astype(np.float64).mean(axis=(1, 2)) * net.step
    logits = feat @ net.fc_weight.astype(np.float64) + net.fc_bias.astype(np.float64)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    allc = np.concatenate([c.reshape(-1) for c in seen])
    hist = {int(v): float(np.mean(allc == v)) for v in range(qmax + 1)}
    return Trace(scores=(e / e.sum(axis=-1, keepdims=True)).astype(np.float32), codes=codes,
                 stem_codes=stem_codes_, histogram=hist)
