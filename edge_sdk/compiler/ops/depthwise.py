"""Depthwise conv2d (NHWC, any channel multiplier), float32, epilogue fused.

Few FLOPs per byte, so the schedule is about streaming: channels innermost and vectorized, a short
run of output pixels unrolled so each weight vector is reused from a register, rows in parallel.
The zero padding is inlined (a guarded load per tap): a padded copy of the input cost as much as the
convolution itself (MobileNetV1, AVX2: 1.25 ms -> 0.73 ms for all 13 layers).
Weights come as (KH, KW, C*M) — the TFLite/Relax HWIO (KH, KW, 1, C*M) reshaped at compile time;
output channel k reads input channel k // M (TensorFlow's depth-multiplier order).
"""
from __future__ import annotations

import tvm
from tvm import s_tir, te

from edge_sdk.compiler.ops.common import ACC_SCOPE, NO_EPILOGUE, Epilogue, Simd, apply_epilogue, finish, pad_nhwc, pick_tile, round_up, tile_inner, vector_width


# Input bytes one output tile (wr pixels, all channels) reads; above this (half the A53's 32 KB L1D) the
# columns the next tile shares are evicted before it runs, so the channel blocks go outside the pixels.
_TILE_L1_BYTES = 16 * 1024


def _channels_outer(kh: int, kw: int, sw: int, wr: int, c: int) -> bool:
    """Sweep a row's pixels per channel block (True) or all channels per pixel tile. A53 timing model,
    5x5 28x28x240 + swish: 10.9 -> 9.5 M modelled cycles (L2 stalls 2.2 -> 0.7 M)."""
    return kh * ((wr - 1) * sw + kw) * c * 4 > _TILE_L1_BYTES


def depthwise_conv2d(shape, kernel, strides, padding, simd: Simd, *, epi: Epilogue = NO_EPILOGUE,
                     multiplier=1, name="edge_dwconv2d", schedule: str = "default") -> tvm.tirx.PrimFunc:
    """X (N,H,W,C) * W (KH,KW,C*M) + bias (C*M,) -> act; padding = (top, left, bottom, right).
    `schedule`: "channels_outer" / "pixels_outer", or "default" (_channels_outer's rule)."""
    act, residual = epi.act, epi.residual
    n, h, w_, cin = shape
    c, m = cin * multiplier, multiplier
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w_ + pl + pr - kw) // sw + 1
    cv = vector_width(c, 2 * simd.lanes)  # channels per step: up to two vectors
    wr = pick_tile(ow, 4)
    owp = round_up(ow, wr)
    col = (lambda z: te.min(z, ow - 1)) if owp != ow else (lambda z: z)
    x = te.placeholder(shape, "float32", name="X")
    wt = te.placeholder((kh, kw, c), "float32", name="W")
    src = (lambda k: k) if m == 1 else (lambda k: k // m)
    b = te.placeholder((c,), "float32", name="bias")
    r = te.placeholder((n, oh, ow, c), "float32", name="R") if residual else None
    xp = pad_nhwc(x, padding, tvm.tirx.const(0.0, "float32"))
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    d = te.compute(
        (n, oh, owp, c),
        lambda a, y, z, k: te.sum(xp[a, y * sh + ry, col(z) * sw + rx, src(k)] * wt[ry, rx, k], axis=[ry, rx]),
        name="D")
    out = te.compute((n, oh, ow, c), lambda a, y, z, k: apply_epilogue(
        d[a, y, z, k], b[k], act, r[a, y, z, k] if residual else None, simd), name="out")
    args = [x, wt, b] + ([r] if residual else []) + [out]
    sch = s_tir.Schedule(workload := te.create_prim_func(args))
    db, ob = sch.get_sblock("D"), sch.get_sblock("out")
    la, ly, lz, lk = sch.get_loops(ob)
    zo, zi = sch.split(lz, [None, wr])
    ko, ki = sch.split(lk, [None, cv])
    if _channels_outer(kh, kw, sw, wr, c) if schedule == "default" else schedule == "channels_outer":
        sch.reorder(la, ly, ko, zo, zi, ki)
        sch.compute_at(db, zo)
    else:
        sch.reorder(la, ly, zo, ko, zi, ki)
        sch.compute_at(db, ko)
    sch.set_scope(db, 0, ACC_SCOPE)
    sch.unroll(zi)
    sch.vectorize(ki)
    red = tile_inner(sch, db, 4, [wr, cv], [kh, kw], vec=True)
    for loop in red:
        sch.unroll(loop)
    sch.parallel(sch.fuse(la, ly))
    if red:
        sch.decompose_reduction(db, red[0])
    if any(padding):
        sch.compute_inline(sch.get_sblock("pad"))
    return finish(sch, name, workload=workload)

