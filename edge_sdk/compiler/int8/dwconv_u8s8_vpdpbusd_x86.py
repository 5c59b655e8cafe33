"""int8 depthwise conv2d on x86 with VNNI: one u8 x s8 `vpdpbusd` per 4 taps (a column of the window) x 16 channels.

The plain kernel (dwconv.py) multiplies each tap in 32 bits: vpmovsxbd + vpmulld + vpaddd per tap and 16
channels, 27 vector instructions for a 3x3 window. Here the 4 bytes one vpdpbusd lane sums are the rows of
the window at one input column: for an output row, each input column q gets its interleave once,

    I[q, g, c, t] = u(input row oy * sh + 4 g + t - pt, column q - pl, channel c),  t < 4,

(u = x + 128 as u8, x XOR 0x80; padding rows and columns Z_in + 128; rows t beyond the window's height 0), and
an output pixel z is then sum over g, kx of vpdpbusd(I[z * sw + kx, g], W[g, kx]) with W[g, kx, c, t] =
w[4 g + t, kx, c] (0 past the height): KW x ceil(KH / 4) vpdpbusd for 16 channels (3 for a 3x3), each
interleave shared by the KW / sw output pixels that read its column. The interleave is one shuffle of the
row vectors (LLVM lowers it to vpermt2b / vpunpck*), written to a buffer of one output row's columns for
one chunk of channels (<= 4 vectors), which stays in L1.

The u8 offset is x86_vnni's: the kernel sums u w = (x + 128) w, so the per-channel constant -(128 + Z_in)
sum w goes into the bias (padding taps read u = Z_in + 128 and so add nothing, as TFLite skips them).
Exact: |u w| <= 255 * 128 and a window of taps stays far inside int32. Epilogue: x86_requant's vector
requantize (TFLite's exact double rounding) on the int32 accumulator. Depth multiplier 1, no dilation,
channels a multiple of the vector's int32 lanes (else dwconv.py).
"""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.script import tirx as T

from edge_sdk.compiler.int8 import x86_requant
from edge_sdk.compiler.int8.gemm_int8_widen16 import ConvGeom
from edge_sdk.compiler.int8.x86_vnni import OFFSET, VPDPBUSD
from edge_sdk.compiler.ops.common import Simd, mark_scheduled

CHUNK_VECTORS = 4  # channel vectors per interleave chunk: 4 x 64-byte rows of one column (zmm)


def applies(simd: Simd, *, channels: int, depth_multiplier: int, dilation=(1, 1)) -> bool:
    """Whether this kernel covers the layer: a u8 x s8 dot step, depth multiplier 1, no dilation, whole vectors."""
    return (simd.vnni in VPDPBUSD and depth_multiplier == 1 and tuple(dilation) == (1, 1)
            and channels % simd.vnni == 0)


def pack_weight(w_hwc: np.ndarray, lanes: int) -> np.ndarray:
    """(KH, KW, C) int8 -> (ceil(KH / 4), KW, C * 4): a column's 4 rows per channel (zero rows past KH), the
    channels in the kernel's order (channel_order)."""
    kh, kw, c = w_hwc.shape
    groups = -(-kh // 4)
    w = np.zeros((groups * 4, kw, c), np.int8)
    w[:kh] = w_hwc
    w = w.reshape(groups, 4, kw, c).transpose(0, 2, 3, 1)[:, :, channel_order(c, lanes)]
    return np.ascontiguousarray(w).reshape(groups, kw, c * 4)


def channel_order(c: int, lanes: int) -> np.ndarray:
    """The channel each accumulator lane holds (position -> channel). A chunk of 4 vectors is in the order of
    the in-lane unpacks (position m * lanes + 4 L + k, L a 128-bit lane, holds channel 16 L + 4 m + k), the
    order in which vpackssdw (vectors 0, 1 and 2, 3) and then vpacksswb put the 4 vectors' int8 results back
    in channel order; other chunks are in channel order."""
    cv = _chunk(c, lanes)
    if cv // lanes != 4:
        return np.arange(c)
    m, lane, k = np.meshgrid(np.arange(4), np.arange(lanes // 4), np.arange(4), indexing="ij")
    chunk = (16 * lane + 4 * m + k).reshape(-1)
    return (np.arange(0, c, cv)[:, None] + chunk[None, :]).reshape(-1)


def offset_correction(w_hwc: np.ndarray) -> np.ndarray:
    """-128 * sum over the window of w, per channel (int64): what the u8 offset adds to each accumulator."""
    return -OFFSET * w_hwc.reshape(-1, w_hwc.shape[-1]).astype(np.int64).sum(0)


def _chunk(c: int, lanes: int) -> int:
    """Channels per interleave chunk: the most vectors (<= CHUNK_VECTORS) whose width divides c."""
    for nb in range(CHUNK_VECTORS, 0, -1):
        if c % (nb * lanes) == 0:
            return nb * lanes
    raise ValueError(f"depthwise over {c} channels: not a multiple of {lanes}")


def _unpack(n: int, elem: int, half: int) -> list[int]:
    """Byte indices (into a and b concatenated, n bytes each) of x86's in-lane unpack of elem-byte elements: in
    every 16-byte lane, the low (half 0) or high (half 1) 8 bytes' elements of a and b alternately."""
    idx = []
    for lane in range(0, n, 16):
        for e in range(8 // elem):
            base = lane + half * 8 + e * elem
            idx += list(range(base, base + elem)) + list(range(n + base, n + base + elem))
    return idx


PACKS = {16: ("llvm.x86.avx512.packssdw.512", "llvm.x86.avx512.packsswb.512"),
         8: ("llvm.x86.avx2.packssdw", "llvm.x86.avx2.packsswb")}


def depthwise_u8s8(x_shape, w_hwc: np.ndarray, rq, *, geom: ConvGeom, simd: Simd, name: str):
    """PrimFunc (x (N,H,W,C) int8, w packed (pack_weight), bias, mult, rshift (C,) int32, the three in
    channel_order and rshift as x86_requant.rshift_arg) -> out (N,OH,OW,C) int8. The bias must include
    offset_correction(w_hwc) and the input zero point's term."""
    n, h, w_, c = (int(d) for d in x_shape)
    kh, kw, _ = w_hwc.shape
    lanes = simd.vnni
    groups = -(-kh // 4)
    oh, ow = geom.out_hw
    sh, sw = geom.stride
    pt, _, pl, _ = geom.pads
    cv = _chunk(c, lanes)
    nb = cv // lanes
    packed = nb == 4  # the int8 results narrowed by vpackssdw + vpacksswb (channel_order)
    cols = (ow - 1) * sw + kw  # input columns (padded coordinates) one output row reads
    vbytes = 4 * lanes
    ibuf = cols * groups * cv * 4
    dp = VPDPBUSD[lanes][1]
    r1 = x86_requant.rounding_of(rq.shift)
    v32, u8v = f"int32x{lanes}", f"uint8x{cv}"
    flip = T.broadcast(T.uint8(OFFSET), cv)
    zp = T.broadcast(T.uint8((rq.in_zp + OFFSET) % 256), cv)
    zero = T.broadcast(T.uint8(0), cv)
    lo, hi = rq.act
    perm = channel_order(c, lanes)[:cv]
    # byte (g, position, t) of a column's interleave <- row 4 g + t, channel perm[position] of the rows concatenated
    order = [(g * 4 + t) * cv + int(perm[p]) for g in range(groups) for p in range(cv) for t in range(4)]

    def row_vec(x, a, yy, xx, c0):
        """u8 of input row yy, column xx, channels c0..c0+cv: x ^ 0x80 inside, Z_in + 128 in the padding."""
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w_)
        y_, x_ = tirx.max(tirx.min(yy, h - 1), 0), tirx.max(tirx.min(xx, w_ - 1), 0)
        val = tirx.reinterpret(u8v, x[a, y_, x_, T.ramp(c0, 1, cv)]) ^ flip
        return tirx.Select(inside, val, zp)

    def interleave(x, a, y0, q, c0):
        """A column's interleave, all groups and vectors of the chunk: groups * cv * 4 bytes."""
        rows = [row_vec(x, a, y0 + r, q - pl, c0) if r < kh else zero for r in range(groups * 4)]
        if not packed:
            return tirx.Shuffle(rows, order)
        out = []  # two rounds of 2-source in-lane unpacks (vpunpck[lh]bw, vpunpck[lh]wd): channel_order's order
        for g in range(groups):
            r0, r1, r2, r3 = rows[4 * g:4 * g + 4]
            ab_lo, ab_hi = (tirx.Shuffle([r0, r1], _unpack(cv, 1, half)) for half in (0, 1))
            cd_lo, cd_hi = (tirx.Shuffle([r2, r3], _unpack(cv, 1, half)) for half in (0, 1))
            out += [tirx.Shuffle(pair, _unpack(cv, 2, half)) for pair in ((ab_lo, cd_lo), (ab_hi, cd_hi))
                    for half in (0, 1)]
        return tirx.Shuffle(out, list(range(len(out) * cv)))

    def acc_of(ib, wp, bias, z, cb, j):
        c0 = cb * cv + j * lanes
        acc = bias[T.ramp(c0, 1, lanes)]
        for g in range(groups):
            for kx in range(kw):
                a = ib[T.ramp(((z * sw + kx) * groups + g) * cv * 4 + j * vbytes, 1, vbytes)]
                b = wp[g, kx, T.ramp(c0 * 4, 1, vbytes)]
                acc = T.call_llvm_pure_intrin(v32, dp, acc, a, b)
        return acc

    def requant(ib, wp, bias, mult, rsh, z, cb, j):
        c0 = cb * cv + j * lanes
        args = (acc_of(ib, wp, bias, z, cb, j), mult[T.ramp(c0, 1, lanes)], rsh[T.ramp(c0, 1, lanes)], lanes)
        if packed:
            return x86_requant.vector_i32(*args, r_minus_1=r1)
        return x86_requant.vector(*args, rq.out_zp, lo, hi, r_minus_1=r1)

    def narrow(ib, wp, bias, mult, rsh, z, cb):
        """The chunk's 4 int32 vectors -> cv int8 in channel order: vpackssdw, + Z_out (saturating), vpacksswb,
        the activation clamp on bytes. The same bits as clamp(y + Z_out, lo, hi) for every int32 y."""
        pdw, pwb = PACKS[lanes]
        y = [requant(ib, wp, bias, mult, rsh, z, cb, j) for j in range(4)]
        zp16 = T.broadcast(T.int16(rq.out_zp), 2 * lanes)
        p01, p23 = (T.call_llvm_pure_intrin(f"int16x{2 * lanes}", "llvm.sadd.sat", T.call_llvm_pure_intrin(
            f"int16x{2 * lanes}", pdw, y[a], y[a + 1]), zp16) for a in (0, 2))
        b = T.call_llvm_pure_intrin(f"int8x{cv}", pwb, p01, p23)
        if lo > -128:
            b = tirx.max(b, T.broadcast(T.int8(lo), cv))
        if hi < 127:
            b = tirx.min(b, T.broadcast(T.int8(hi), cv))
        return b

    if packed:
        @T.prim_func(private=True)
        def dw(xh: T.handle, wh: T.handle, bh: T.handle, mh: T.handle, rh: T.handle, oh_: T.handle):
            x = T.match_buffer(xh, (n, h, w_, c), "int8")
            wp = T.match_buffer(wh, (groups, kw, c * 4), "int8")
            bias = T.match_buffer(bh, (c,), "int32")
            mult = T.match_buffer(mh, (c,), "int32")
            rsh = T.match_buffer(rh, (c,), "int32")
            out = T.match_buffer(oh_, (n, oh, ow, c), "int8")
            for row in T.parallel(n * oh):
                ib = T.decl_buffer((ibuf,), "uint8")
                for cb in T.serial(c // cv):
                    for q in T.serial(cols):
                        ib[T.ramp(q * groups * cv * 4, 1, groups * cv * 4)] = interleave(
                            x, row // oh, row % oh * sh - pt, q, cb * cv)
                    for z in T.serial(ow):
                        out[row // oh, row % oh, z, T.ramp(cb * cv, 1, cv)] = narrow(ib, wp, bias, mult, rsh, z, cb)
        return mark_scheduled(dw, name)

    @T.prim_func(private=True)
    def dw(xh: T.handle, wh: T.handle, bh: T.handle, mh: T.handle, rh: T.handle, oh_: T.handle):
        x = T.match_buffer(xh, (n, h, w_, c), "int8")
        wp = T.match_buffer(wh, (groups, kw, c * 4), "int8")
        bias = T.match_buffer(bh, (c,), "int32")
        mult = T.match_buffer(mh, (c,), "int32")
        rsh = T.match_buffer(rh, (c,), "int32")
        out = T.match_buffer(oh_, (n, oh, ow, c), "int8")
        for row in T.parallel(n * oh):
            ib = T.decl_buffer((ibuf,), "uint8")
            for cb in T.serial(c // cv):
                for q in T.serial(cols):
                    ib[T.ramp(q * groups * cv * 4, 1, groups * cv * 4)] = interleave(
                        x, row // oh, row % oh * sh - pt, q, cb * cv)
                for z in T.serial(ow):
                    for j in T.unroll(nb):
                        out[row // oh, row % oh, z, T.ramp(cb * cv + j * lanes, 1, lanes)] = requant(
                            ib, wp, bias, mult, rsh, z, cb, j)

    return mark_scheduled(dw, name)
