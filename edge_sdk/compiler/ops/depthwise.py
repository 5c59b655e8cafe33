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

from edge_sdk.compiler.choice import register_candidates
from edge_sdk.compiler.ops import prefetch_a53, prfm_pair_a53
from edge_sdk.compiler.ops.common import ACC_SCOPE, WORKLOAD_ATTR, mark_scheduled, NO_EPILOGUE, Epilogue, Simd, apply_epilogue, finish, pad_nhwc, pick_tile, round_up, tile_inner, vector_width


# Input bytes one output tile (wr pixels, all channels) reads; above this (half the A53's 32 KB L1D) the
# columns the next tile shares are evicted before it runs, so the channel blocks go outside the pixels.
_TILE_L1_BYTES = 16 * 1024


def _channels_outer(kh: int, kw: int, sw: int, wr: int, c: int) -> bool:
    """Sweep a row's pixels per channel block (True) or all channels per pixel tile. A53 timing model,
    5x5 28x28x240 + swish: 10.9 -> 9.5 M modelled cycles (L2 stalls 2.2 -> 0.7 M)."""
    return kh * ((wr - 1) * sw + kw) * c * 4 > _TILE_L1_BYTES


NO_PREFETCH = "+noprefetch"


@register_candidates("float.dw")
def _no_prefetch(workload: dict) -> list[str]:
    """On NEON the kernel prefetches its new input rows (prfm_pair_a53); the same kernel without it stays a
    candidate for compile/choice to price (its gain rests on the plugin's PRFM rule and the ASSUMED
    pf_streams = 2)."""
    return ["default" + NO_PREFETCH] if workload["isa"] == "neon" else []


def depthwise_conv2d(shape, kernel, strides, padding, simd: Simd, *, epi: Epilogue = NO_EPILOGUE,
                     multiplier=1, name="edge_dwconv2d", schedule: str = "default") -> tvm.tirx.PrimFunc:
    """X (N,H,W,C) * W (KH,KW,C*M) + bias (C*M,) -> act; padding = (top, left, bottom, right).
    `schedule`: "channels_outer" / "pixels_outer", or "default" (_channels_outer's rule), each with
    "+noprefetch" for no software prefetch (on NEON the kernel has it: _with_prefetch)."""
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
    b = epi.bias(c)
    r = te.placeholder((n, oh, ow, c), "float32", name="R") if residual else None
    xp = pad_nhwc(x, padding, tvm.tirx.const(0.0, "float32"))
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    d = te.compute(
        (n, oh, owp, c),
        lambda a, y, z, k: te.sum(xp[a, y * sh + ry, col(z) * sw + rx, src(k)] * wt[ry, rx, k], axis=[ry, rx]),
        name="D")
    out = te.compute((n, oh, ow, c), lambda a, y, z, k: apply_epilogue(
        d[a, y, z, k], b[k], act, r[a, y, z, k] if residual else None, simd, epi.alpha(b, c, k)), name="out")
    args = [x, wt, b] + ([r] if residual else []) + [out]
    sch = s_tir.Schedule(workload := te.create_prim_func(args))
    db, ob = sch.get_sblock("D"), sch.get_sblock("out")
    la, ly, lz, lk = sch.get_loops(ob)
    zo, zi = sch.split(lz, [None, wr])
    ko, ki = sch.split(lk, [None, cv])
    base, _, opt = schedule.partition("+")
    ch_outer = _channels_outer(kh, kw, sw, wr, c) if base == "default" else base == "channels_outer"
    order = (ko, zo) if ch_outer else (zo, ko)  # the inner one runs a (pixel tile, channel block)
    sch.reorder(la, ly, *order, zi, ki)
    sch.compute_at(db, order[1])
    sch.set_scope(db, 0, ACC_SCOPE)
    sch.unroll(zi)
    sch.vectorize(ki)
    red = tile_inner(sch, db, 4, [wr, cv], [kh, kw], vec=True)
    for loop in red:
        sch.unroll(loop)
    fused = sch.fuse(la, ly)
    sch.parallel(fused)
    if red:
        sch.decompose_reduction(db, red[0])
    if any(padding):
        sch.compute_inline(sch.get_sblock("pad"))
    offset = prfm_pair_a53.ahead(wr * sw * cin * 4)
    if (simd.isa != "neon" or "+" + opt == NO_PREFETCH or not offset
            or n * h * w_ * cin * 4 < prfm_pair_a53.MIN_INPUT_BYTES):
        return finish(sch, name, workload=workload)
    plan = _Prefetch(shape, kernel, strides, padding, oh, wr, cv // m, offset)
    return _prefetched(sch, db, (order[1], fused, zo, ko), plan, name, workload)


class _Prefetch:
    """Which input lines a tile prefetches: the min(KH, SH) rows no earlier output row read, at the
    wr*SW columns the tile starts at, `offset` bytes (one or two tiles) ahead (prfm_pair_a53)."""

    def __init__(self, shape, kernel, strides, padding, oh, wr, cv_in, offset):
        self.n, self.h, self.w, self.c = shape
        self.kh, self.sh, self.sw, self.pt = kernel[0], strides[0], strides[1], padding[0]
        self.oh, self.wr, self.cv_in, self.offset = oh, wr, cv_in, offset
        self.ncol = min(wr * strides[1], self.w)

    def rows(self, y):
        return [te.max(te.min(y * self.sh + self.kh - 1 - self.pt - j, self.h - 1), 0)
                for j in range(min(self.kh, self.sh))]


def _prefetched(sch: s_tir.Schedule, db, loops, plan: _Prefetch, name: str, workload) -> tvm.tirx.PrimFunc:
    """The finished kernel with the prefetches (loops: the (pixel tile, channel block) body's loop, the
    fused (batch, row) loop, the pixel-tile and the channel-block loops)."""
    sch.annotate(loops[0], "pragma_import_llvm", prfm_pair_a53.llvm_ir(plan.ncol, plan.offset))
    xbuf = next(r.source for r in sch.get(db).reads if r.source.name == "X")
    func = _with_prefetch(sch.mod["main"], xbuf, [sch.get(lp).loop_var for lp in loops], plan)
    return mark_scheduled(func, name).with_attr(WORKLOAD_ATTR, workload)


def _with_prefetch(func: tvm.tirx.PrimFunc, x, loops, plan: _Prefetch) -> tvm.tirx.PrimFunc:
    """`func` with the prefetches at the top of the loop that runs one (pixel tile, channel block)."""
    inner, fused, zo, ko = loops
    a, y = fused // plan.oh, fused % plan.oh
    col = te.min(zo * (plan.wr * plan.sw), plan.w - plan.ncol)
    calls = [prfm_pair_a53.call(plan.ncol, plan.offset,
                                tvm.tirx.address_of(tvm.tirx.BufferLoad(x, [a, row, col, ko * plan.cv_in])),
                                plan.c * 4) for row in plan.rows(y)]
    return prefetch_a53.at_loop_top(func, inner, calls)
