"""MobileNet's depthwise 3x3 of a bitserial network on its packed codes, in int16: unpack -> depthwise ->
quantize -> bitpack as one kernel, no float tensor.

    ints = integer_form(dw, a_bits=a, step=step)      # None: not exact in int16, keep the float path
    func = dw3x3_codes_prim_func(pshape, ints, dw, word=..., arch=..., name=...)

Numerics (quant/bitserial_net_ref.run_reference): y = depthwise(codes * step, w) + bias, h = clip(floor(
max(y, 0) / step + 1/2), 0, 2^a - 1). models/binarized._snap_float_layer makes every weight m * 2^-e_c
(|m| <= 511) and the bias units * 2^(log2(step) - e_c), one e_c per channel, so y / step = (S + units) *
2^-e_c with S = sum over the 9 taps of code * m, an integer: |S| <= 9 (2^a - 1) 511 < 2^15 for a <= 3,
int16 exactly. h >= j (j = 1 .. 2^a - 1) iff S >= t_j = ceil((j - 1/2) 2^e_c) - units (the ReLU is the
j >= 1), so h is the count of thresholds S reaches: a compare a threshold, no shift, no float.

Why (A53 timing model, MobileNetV1 w1a2 pi3, before: graph.dw_packed's dequant -> float depthwise ->
quantize_pack in bands, 43.7 of its 96.8 modelled ms): a 128-bit int16 `mla` does 8 multiply-adds where
`fmla` does 4 (both Q-form, one a cycle in slot 0: a53.py / GCC cortex-a53.md advsimd), an int16 input
row is half the float row's bytes to load, and the float maps (written by dequant, read by the
depthwise, written again, read by quantize_pack) no longer exist: per band of output rows the unpacked
(and zero-padded) int16 input rows are made once into a buffer, each output row's codes go to an int8
row, then bitpack.pack_planes' vector pack.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from edge_sdk.compiler.bitserial.kernels import WORD_BITS

INT16_MAX = (1 << 15) - 1
BAND_BYTES = 96 * 1024  # the unpacked int16 input rows of a band (and the rows it shares), kept in the A53's L2


@dataclass(frozen=True)
class IntegerDw:
    """The depthwise as integers: weights m (3, 3, C) int16, thresholds t (2^a - 1, C) int16."""

    weight: np.ndarray
    thresholds: np.ndarray


def _exponent(w: np.ndarray, bias: float, in_exp: int) -> int | None:
    """The smallest e in [-30, 40] with every w * 2^e and bias * 2^(e - in_exp) an integer (None: none)."""
    for e in range(-30, 41):
        m = w.astype(np.float64) * 2.0 ** e
        if np.all(m == np.round(m)) and float(bias * 2.0 ** (e - in_exp)).is_integer():
            return e
    return None


def integer_form(dw, *, a_bits: int, step: float) -> IntegerDw | None:
    """dw's weights and thresholds as integers (module docstring), or None where they would not be exact
    in int16 (weights not on a per-channel power-of-two grid, |S| or a threshold out of range)."""
    kh, kw, c = dw.weight.shape
    qmax = (1 << a_bits) - 1
    in_exp = int(np.log2(step))
    if (kh, kw) != (3, 3) or 2.0 ** in_exp != step:
        return None
    m = np.zeros((kh, kw, c), np.int64)
    t = np.zeros((qmax, c), np.int64)
    for ch in range(c):
        w, b = dw.weight[..., ch], float(dw.bias[ch])
        e = _exponent(w, b, in_exp)
        if e is None:
            return None
        m[..., ch] = np.round(w.astype(np.float64) * 2.0 ** e).astype(np.int64)
        units = int(b * 2.0 ** (e - in_exp))
        for j in range(1, qmax + 1):
            q = Fraction(2 * j - 1, 2) * Fraction(2) ** e
            t[j - 1, ch] = -((-q.numerator) // q.denominator) - units
    if kh * kw * qmax * int(np.abs(m).max(initial=0)) > INT16_MAX - 1:
        return None
    # |S| < 2^15 - 1: a threshold above it is never reached, below its negative always
    return IntegerDw(m.astype(np.int16), np.clip(t, -INT16_MAX, INT16_MAX).astype(np.int16))


def _band_rows(oh: int, stride: int, row_bytes: int) -> int:
    """Output rows a band: the largest divisor of oh whose input rows fit BAND_BYTES (at least 1)."""
    fits = [r for r in range(1, oh + 1) if oh % r == 0 and ((r - 1) * stride + 3) * row_bytes <= BAND_BYTES]
    return max(fits, default=1)


def _pixel_tile(ow: int) -> int:
    """Output pixels an accumulator tile: the largest divisor of ow up to 8 (8 int16 accumulators, 9
    weight vectors and the taps' input vectors stay within the 32 NEON registers)."""
    return max(d for d in range(1, min(8, ow) + 1) if ow % d == 0)


def dw3x3_codes_prim_func(pshape, ints: IntegerDw, *, stride: int, pad, a_bits: int, word: str, lanes: int):
    """Packed codes (N, H, W, C/wb, a) -> packed codes (N, OH, OW, C/wb, a) of the depthwise 3x3 + BN + ReLU
    + quantize (module docstring). Arguments: p, weight (3, 3, C) int16, thresholds (2^a - 1, C) int16.
    pad (top, left, bottom, right); `lanes` int16 channels an accumulator vector (8: one NEON q register)."""
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.bitserial.bitpack import TILE_SCOPE, pack_intrin, pack_planes
    from edge_sdk.compiler.ops.common import tile_inner

    n, h, w, cw, bits = (int(d) for d in pshape)
    wb = WORD_BITS[word]
    c = cw * wb
    qmax = (1 << a_bits) - 1
    t, l, b, r = pad
    oh, ow = (h + t + b - 3) // stride + 1, (w + l + r - 3) // stride + 1
    p = te.placeholder((n, h, w, cw, bits), word, name="p")
    wt = te.placeholder((3, 3, c), "int16", name="w")
    th = te.placeholder((qmax, c), "int16", name="t")

    def unpacked(a, y, x, ch):  # the code of channel ch, 0 in the padding
        yy, xx = y - t, x - l
        word_ = [p[a, yy, xx, ch // wb, k] for k in range(bits)]
        lane = (ch % wb).astype(word)
        planes = [((word_[k] >> lane) & tirx.const(1, word)).astype("int16") << tirx.const(k, "int16")
                  for k in range(bits)]
        v = planes[0]
        for pl in planes[1:]:  # not sum(): its int 0 start would widen the codes to int32
            v = v | pl
        return tirx.if_then_else(tirx.all(yy >= 0, yy < h, xx >= 0, xx < w), v, tirx.const(0, "int16"))

    # channel blocks outside the pixels: a block's taps along a row are adjacent 16-byte vectors (a pixel's
    # channels side by side put the taps a multiple of 1 KB apart at 512 channels, all in 8 of the L1's 128 sets)
    cv = min(lanes, c)
    xp = te.compute((n, h + t + b, c // cv, w + l + r, cv), lambda a, y, cb, x, ci: unpacked(a, y, x, cb * cv + ci),
                    name="unpack")
    ry, rx = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    acc = te.compute((n, oh, ow, c), lambda a, y, x, ch: te.sum(
        xp[a, y * stride + ry, ch // cv, x * stride + rx, ch % cv] * wt[ry, rx, ch], axis=[ry, rx]), name="acc")

    def codes(a, y, x, ch):
        s = acc[a, y, x, ch]
        # the compares' masks (-1 / 0, as cmge writes them) summed and negated: no widening or narrowing
        masks = [tirx.Select(s >= th[j, ch], tirx.const(-1, "int16"), tirx.const(0, "int16")) for j in range(qmax)]
        v = masks[0]
        for mk in masks[1:]:
            v = v + mk
        return tirx.const(0, "int16") - v

    q = te.compute((n, oh, ow, c), codes, name="codes")
    out = pack_planes(q, bits=a_bits, word=word)
    sch = s_tir.Schedule(te.create_prim_func([p, wt, th, out]))
    pn, py, _px, pw, pb, pk = sch.get_loops(sch.get_sblock("pack"))
    rows = _band_rows(oh, stride, (w + l + r) * c * 2)
    band, row = sch.split(sch.fuse(pn, py), [None, rows])
    sch.parallel(band)
    qb, ab, ub, bb = (sch.get_sblock(s) for s in ("codes", "acc", "unpack", "bits"))
    sch.compute_at(bb, pw)
    sch.set_scope(bb, 0, TILE_SCOPE)
    sch.compute_at(qb, band)  # a band's codes, then its rows packed
    sch.set_scope(qb, 0, TILE_SCOPE)
    xt = _pixel_tile(ow)
    inner = sch.get_loops(qb)[1:]  # (rows,) (pixels,) channels: compute_at drops unit loops
    co, ci = sch.split(inner[-1], [None, cv])
    ys = inner[:-2] if ow > 1 else inner[:-1]
    xo = xi = None
    if ow > 1:
        xo, xi = sch.split(inner[-2], [None, xt])
    # channel blocks outermost: a block's 9 weight vectors stay in registers over the band's rows
    sch.reorder(co, *ys, *[lp for lp in (xo, xi) if lp is not None], ci)
    at = xo if xo is not None else (ys[-1] if ys else co)
    sch.compute_at(ab, at)
    sch.set_scope(ab, 0, TILE_SCOPE)
    n_outer = [sch.get(lp) for lp in sch.get_loops(ab)].index(sch.get(at)) + 1
    red = tile_inner(sch, ab, n_outer, [xt, cv], [3, 3], vec=True)
    for lp in red:
        sch.unroll(lp)
    sch.decompose_reduction(ab, red[0])
    if xi is not None and xt > 1:
        sch.unroll(xi)
    sch.vectorize(ci)
    sch.compute_at(ub, band)
    sch.set_scope(ub, 0, TILE_SCOPE)
    uloops = sch.get_loops(ub)  # (rows, channel blocks, pixels, lanes): a pixel's words read once, in order
    if c // cv > 1:
        sch.reorder(uloops[-2], uloops[-3])
    sch.vectorize(uloops[-1])
    bl = sch.get_loops(bb)
    if a_bits > 1:
        sch.unroll(bl[-2])
    sch.vectorize(bl[-1])
    if int(sch.get(pb).extent) > 1:
        sch.unroll(pb)
    sch.decompose_reduction(sch.get_sblock("pack"), pk)
    sch.tensorize(pk, pack_intrin(word))
    return sch.mod["main"].with_attrs({"tirx.is_scheduled": True, "op_pattern": 8, "tirx.noalias": True})
