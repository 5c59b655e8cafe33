"""int8 depthwise conv2d (NHWC, any depth multiplier) with the requantize fused: the float depthwise
schedule (ops/depthwise.py) on integers.

Few operations per byte, so it is about streaming: channels innermost and vectorized (two int32
vectors), a short run of output pixels unrolled so each weight vector stays in a register, the taps
unrolled, the zero-point padding inlined as a guarded load (no padded copy), rows in parallel.
The product int32(int8 x) * int32(int8 w): aarch64 LLVM emits smull/smlal for it; x86 LLVM (znver3,
icelake-server objdumps) vpmovsxbd + vpmulld + vpaddd per tap, 32-bit products (an x86 target with VNNI
takes dwconv_u8s8_vpdpbusd_x86 instead). The epilogue is gemm's: bias in its own block (keeps it int32),
fixedpoint.mbqm32 (on NEON mbqm32_neon: sqrdmulh/srshl), zero point, clamp, int8.
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8.gemm_int8_widen16 import ConvGeom
from edge_sdk.compiler.ops.common import ACC_SCOPE, Simd, finish, pick_tile, round_up, vector_width


def depthwise_i8(x_shape, w_hwc: np.ndarray, rq, *, geom: ConvGeom, depth_multiplier: int, simd: Simd, name: str):
    """PrimFunc (x, w (KH,KW,C*M) int8, bias, mult, rshift (C*M,) int32) -> out (N,OH,OW,C*M) int8.

    rq: a quant.int8.Requant (in_zp, out_zp, act); geom: stride, pads and out_hw (no dilation)."""
    n, h, w_, cin = x_shape
    kh, kw, c = w_hwc.shape
    dm = depth_multiplier
    oh, ow = geom.out_hw
    sh, sw = geom.stride
    pt, _, pl, _ = pads = geom.pads
    lanes32 = simd.lanes if simd.isa != "avx512" else 16
    # a power of two (as the float depthwise): a 24- or 30-wide step (c = 72, 120 on AVX-512) scalarized
    # its guarded loads; 28x28x120 5x5 ran 10.1 ms, 0.23 GMAC/s, on the host
    cv = vector_width(c, 2 * lanes32)
    wr = pick_tile(ow, 4)
    owp = round_up(ow, wr)
    x = te.placeholder(x_shape, "int8", name="x")
    wt = te.placeholder((kh, kw, c), "int8", name="w")
    bt, mt, rt = (te.placeholder((c,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))
    col = (lambda z: te.min(z, ow - 1)) if owp != ow else (lambda z: z)
    src = (lambda k: k // dm) if dm > 1 else (lambda k: k)

    def tap(a, y, z, ry, rx, k):
        yy, xx = y * sh + ry - pt, col(z) * sw + rx - pl
        v = x[a, yy, xx, src(k)]
        if any(pads):
            v = tirx.if_then_else(tirx.all(yy >= 0, yy < h, xx >= 0, xx < w_), v, tirx.const(rq.in_zp, "int8"))
        return v.astype("int32")

    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    acc = te.compute((n, oh, owp, c), lambda a, y, z, k: te.sum(
        tap(a, y, z, ry, rx, k) * wt[ry, rx, k].astype("int32"), axis=[ry, rx]), name="acc")
    biased = te.compute((n, oh, owp, c), lambda a, y, z, k: acc[a, y, z, k] + bt[k], name="biased")
    lo, hi = rq.act
    neon = simd.isa == "neon" and cv % 4 == 0  # sqrdmulh/srshl in whole int32x4 vectors only
    requant = fp.mbqm32_neon if neon else fp.mbqm32
    out = te.compute((n, oh, ow, c), lambda a, y, z, k: fp.clamp_int8_32(
        requant(biased[a, y, z, k], mt[k], rt[k]) + tirx.const(rq.out_zp, "int32"), lo, hi), name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, mt, rt, out]))
    _schedule(sch, wr=wr, cv=cv, out_lanes=4 if neon else cv)
    return finish(sch, name)


def _schedule(sch, *, wr: int, cv: int, out_lanes: int) -> None:
    """Rows in parallel, a run of wr output pixels unrolled, cv channels vectorized, the taps unrolled;
    the epilogue in vectors of out_lanes (4 for the NEON intrinsics, which LLVM does not split)."""
    cb, bb, ob = sch.get_sblock("acc"), sch.get_sblock("biased"), sch.get_sblock("out")
    la, ly, lz, lk = sch.get_loops(ob)
    zo, zi = sch.split(lz, [None, wr])
    ko, ki = sch.split(lk, [None, cv])
    sch.reorder(la, ly, zo, ko, zi, ki)
    sch.parallel(sch.fuse(la, ly))
    for blk in (bb, cb):
        sch.compute_at(blk, ko)
        sch.set_scope(blk, 0, ACC_SCOPE)
    if wr > 1:
        sch.unroll(zi)
    if out_lanes < cv:
        ku, kv = sch.split(ki, [None, out_lanes])
        sch.unroll(ku)
        sch.vectorize(kv)
    else:
        sch.vectorize(ki)
    bl = sch.get_loops(bb)[3:]
    if wr > 1:
        sch.unroll(bl[0])
    if cv > 1:
        sch.vectorize(bl[-1])
    inner = sch.get_loops(cb)[3:]
    kinds = [e for e in (wr, cv) if e > 1]
    sp, red = inner[:len(kinds)], inner[len(kinds):]
    if red:
        sch.reorder(*red, *sp)
    if cv > 1:
        sch.vectorize(sp[-1])
    if wr > 1:
        sch.unroll(sp[0])
    for lp in red:
        sch.unroll(lp)
    if red:
        sch.decompose_reduction(cb, red[0])
