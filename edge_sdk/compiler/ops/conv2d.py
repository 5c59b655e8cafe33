"""Dense convolution (NHWC) and GEMM, float32, with the bias/residual/activation epilogue fused.

Two kernels share one register-tile idea (a `mr` pixels x `nr` channels block of accumulators held in
vector registers, swept over the reduction, then written once through the epilogue):

- `gemm`: C[M, N] = A[M, K] @ W[K, N]. A 1x1 stride-1 conv is this GEMM on the (H*W, C) view of the
  NHWC activation, and so is a dense layer (M = 1).
- `conv2d_direct`: any KxK / stride, over a zero-padded copy of the input (TF SAME padding may be
  asymmetric; the pad is part of the PrimFunc).

Weights arrive pre-packed (see `pack_gemm_weight`, `pack_conv_weight`): output channels split into
blocks of `nr`, innermost, so the micro-kernel reads one contiguous vector pair per reduction step.
Output channels are padded to a multiple of `nr` with zero weights; the caller slices the tail off.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te

from edge_sdk.compiler.choice import register_candidates
from edge_sdk.compiler.ops import conv1x1_gemm_a53 as a53
from edge_sdk.compiler.ops import conv1x1_gemm_a53_12x8 as a53_12x8
from edge_sdk.compiler.ops import conv1x1_gemm_a53_epilogue as a53_epi
from edge_sdk.compiler.ops import conv_im2col_a53 as im2col
from edge_sdk.compiler.ops.common import ACC_SCOPE, NO_EPILOGUE, Epilogue, Simd, apply_epilogue, finish, pad_nhwc, pick_tile, round_up, tile_inner, vector_width


# Relative cost per multiply-add of a GEMM tile nr channels wide, by vector width (lanes) and nr / lanes,
# measured on AVX-512 (16 lanes): a half-width (ymm) tile runs ~38 GMAC/s, one or two zmm ~70. NEON
# keeps its rule (two vectors, one when that avoids padding): its counts were checked per kernel.
_TILE_COST = {0.5: 1.85, 1: 1.0, 2: 1.0}
# A padded GEMM's output is sliced to the real channels by a copy (~0.5 ns per element here, as much
# as ~36 multiply-adds of the GEMM), and a residual add then runs in that copy instead of the epilogue
# (3136 x 72 -> 24 + residual: 8-wide 140 us; 16-wide 109 us + 96 us for the slice and add).
_SLICE_COST = 50


def choose_nr(simd: Simd, m: int, n: int, k: int = 0) -> int:
    """Output channels per register tile for an (m, k) x (k, n) GEMM.

    A lone row (dense layer, squeeze-excite) is memory-bound: up to 4 vectors, a power of two (LLVM
    splits a 7-vector tile badly: 1280 -> 1000 ran 2.4x slower), padding allowed. Wide vectors (AVX):
    the cheapest of half, one or two vectors by _TILE_COST and _SLICE_COST, given k. Else two vectors,
    or one when that avoids padding the channels."""
    lanes = simd.lanes
    if m == 1:
        return lanes * min((1, 2, 4), key=lambda d: (round_up(n, lanes * d) * (1 + 0.5 / d), -d))
    if k and lanes >= 8:
        def cost(nr):
            npad = round_up(n, nr)
            return npad * k * _TILE_COST[nr / lanes] + (_SLICE_COST * n if npad != n else 0)

        return min((2 * lanes, lanes, lanes // 2), key=cost)
    if n % simd.nr == 0 or n % lanes != 0 and n > lanes:
        return simd.nr
    return lanes


def pack_gemm_weight(w_kn: np.ndarray, nr: int) -> np.ndarray:
    """(K, N) -> (ceil(N/nr), K, nr), zero-padded: contiguous nr-wide rows for the micro-kernel."""
    k, n = w_kn.shape
    npad = round_up(n, nr)
    w = np.zeros((k, npad), dtype="float32")
    w[:, :n] = w_kn
    return np.ascontiguousarray(w.reshape(k, npad // nr, nr).transpose(1, 0, 2))


def pack_conv_weight(w_hwio: np.ndarray, nr: int) -> np.ndarray:
    """(KH, KW, CI, CO) -> (ceil(CO/nr), KH, KW, CI, nr), zero-padded."""
    kh, kw, ci, co = w_hwio.shape
    cpad = round_up(co, nr)
    w = np.zeros((kh, kw, ci, cpad), dtype="float32")
    w[..., :co] = w_hwio
    return np.ascontiguousarray(w.reshape(kh, kw, ci, cpad // nr, nr).transpose(3, 0, 1, 2, 4))


def pad_bias(bias: np.ndarray, n: int) -> np.ndarray:
    """(C,) or (rows, C) (a PRELU epilogue's biases and slopes: common.Epilogue.bias_rows) -> each row
    zero-padded to n, concatenated."""
    rows = np.atleast_2d(bias)
    out = np.zeros((rows.shape[0], n), dtype="float32")
    out[:, : rows.shape[1]] = rows
    return out.reshape(-1)


# Bytes of operand panels a GEMM keeps in L1 while it sweeps the other operand (half the A53's 32 KB
# L1D, about half of an AVX-512 core's 48 KB).
_L1_BUDGET = {"neon": 16 << 10}


# gemm's loop orders over register tiles, by schedule name (compile/choice candidates "float.gemm").
GEMM_ORDERS = ("rows_outer", "panels_outer", "panel_blocks")


LLVM_TILE = "+llvm_tile"
# A schedule suffix: the A53 assembly 12x8 tile (conv1x1_gemm_a53_12x8) instead of the 8x8 one, rows
# rounded up to 12: a candidate priced per layer (fewer cycles a multiply-add, more padded rows).
TILE_12X8 = "+a53_12x8"
# Schedule suffixes: an A53 assembly tile with the epilogue in its store (conv1x1_gemm_a53_epilogue): no
# accumulator tile in memory, no separate epilogue pass. The rule's "default" takes them where they apply
# (conv1x1_gemm_a53_epilogue.rule).
EPILOGUE_TILES = a53_epi.TILES


@register_candidates("float.gemm")
def _llvm_tile(workload: dict) -> list[str]:
    """Where the A53 assembly tile is the rule, LLVM's own tile stays a candidate for compile/choice to
    price against it (the assembly tile's win rests on NCNN's pairing rules; llvm-mca disagrees)."""
    simd = Simd(workload["isa"], 4, 32)
    if workload["isa"] != "neon" or not a53.applies(simd, workload["m"], workload["k"], a53.MR, workload["nr"],
                                                      workload["gate"]):
        return []
    return ["default" + LLVM_TILE]


@register_candidates("float.gemm")
def _a53_12x8_tile(workload: dict) -> list[str]:
    """The 12x8 assembly tile in each loop order, where it applies (rows padded to 12 by at most a quarter)."""
    simd = Simd(workload["isa"], 4, 32)
    if workload["isa"] != "neon" or not a53.applies(simd, workload["m"], workload["k"], a53_12x8.MR, workload["nr"],
                                                      workload["gate"]):
        return []
    return [order + TILE_12X8 for order in ("default",) + GEMM_ORDERS]


@register_candidates("float.gemm")
def _a53_epilogue_tiles(workload: dict) -> list[str]:
    """Each assembly tile with the epilogue in its store, in each loop order, where tile and epilogue apply."""
    simd = Simd(workload["isa"], 4, 32)
    epi = Epilogue(tuple(workload["act"]), workload["residual"], workload["gate"])
    if workload["isa"] != "neon" or not a53_epi.applies(epi):
        return []
    return [f"{order}+{tile}" for tile, mod in EPILOGUE_TILES.items()
            if a53.applies(simd, workload["m"], workload["k"], mod.MR, workload["nr"], workload["gate"],
                           min_k=a53_epi.MIN_K)
            for order in ("default",) + GEMM_ORDERS]


def gemm_order(dims, simd: Simd) -> str:
    """The rule's order of the loops over register tiles. An operand that fits in L1 stays there while
    the other streams once (all weights: rows outer; all rows: weight panels outer). Else blocks of
    weight panels that fit are swept over all rows (A53, 196 x 112 -> 672: A re-read from L2 once
    per 4 panels, not per panel: 8.7 -> 7.6 M modelled cycles); panels too big for that (K ~ 1000)
    keep the bigger operand outer."""
    m, k, npad, nr = dims
    budget = _L1_BUDGET.get(simd.isa, 24 << 10)
    if k * npad * 4 <= budget:
        return "rows_outer"
    if m * k * 4 <= budget:
        return "panels_outer"
    if budget // (k * nr * 4) < 2:
        return "panels_outer" if k * npad > m * k else "rows_outer"
    return "panel_blocks"


def _tile_order(sch: s_tir.Schedule, mo, no, dims, simd: Simd, order: str) -> list:
    """The loops over register tiles, outermost first, for a GEMM_ORDERS name."""
    if order == "rows_outer":
        return [mo, no]
    nb = _panel_block(dims, simd)
    if order == "panels_outer" or nb < 2:
        return [no, mo]
    nbo, nbi = sch.split(no, [None, nb])
    return [nbo, mo, nbi]


def _panel_block(dims, simd: Simd) -> int:
    """Weight panels per block of the "panel_blocks" order (as many as fit the L1 budget)."""
    return _L1_BUDGET.get(simd.isa, 24 << 10) // (dims[1] * dims[3] * 4)


def _asm_tile(simd: Simd, dims, gate: bool, order: str, mr: int = a53.MR) -> bool:
    """Whether the A53 assembly tile of mr rows runs: conv1x1_gemm_a53.applies, and panel blocks that divide
    the panels (a tail block's predicate does not match the intrinsic)."""
    m, k, npad, nr = dims
    nb = _panel_block(dims, simd)
    return a53.applies(simd, m, k, mr, nr, gate) and not (order == "panel_blocks" and nb >= 2
                                                           and (npad // nr) % nb)


def _rows_outer(dims, simd: Simd) -> bool:
    """Whether the rule's order puts the row tiles outermost (rows stay, weight panels stream)."""
    return gemm_order(dims, simd) == "rows_outer"


def _pack_rows(sch: s_tir.Schedule, cb, mo, simd: Simd) -> None:
    """Copy each row tile of A (mr rows x K, contiguous in memory) once into a buffer the micro-kernel
    then reads from L1. The kernel touches mr rows at once, K floats apart; the A53's prefetcher only
    follows a stride within 4 lines (256 B), so for K > 64 every row was a demand miss from DRAM, while
    the copy reads the tile as one forward stream (A53 timing model, 3136 x 72 -> 24: 5.0 -> 3.7 M
    cycles, 196 x 672 -> 112: 9.6 -> 8.6 M; 12% more instructions)."""
    reads = [r.source.name for r in sch.get(cb).reads]
    idx = next(i for i, name in enumerate(reads) if name in ("A", "G"))
    pack = sch.cache_read(cb, idx, ACC_SCOPE)
    sch.compute_at(pack, mo)
    loops = sch.get_loops(pack)
    _, inner = sch.split(loops[-1], [None, simd.lanes])
    sch.vectorize(inner)


def _row_panels(a, asrc, row, dims, simd: Simd, gate: bool, asm: bool):
    """(AP or None, how the GEMM reads A). Rows swept inside the weight panels (NEON, K > 64): A once
    into row-tile panels (mp/mr, K, mr), so the micro-kernel reads one forward stream instead of mr
    rows K floats apart (A53 prefetcher). The A53 assembly tile (`asm`, conv1x1_gemm_a53) reads these
    panels, so with it every GEMM packs (_schedule_panels: per row tile in L1 where the rows stay or K
    is small)."""
    m, k, mr, order = dims
    if asm or (simd.isa == "neon" and not gate and k * 4 > 256 and order != "rows_outer"):
        ap = te.compute((round_up(m, mr) // mr, k, mr), lambda io, kk, ii: a[row(io * mr + ii), kk], name="AP")
        return ap, lambda i, kk: ap[i // mr, kk, i % mr]
    return None, lambda i, kk: asrc[row(i), kk]


def _schedule_panels(sch: s_tir.Schedule, mo, local: bool) -> None:
    """AP's loops: each row read forward once; `local`: one row tile at a time under the row-tile loop
    (the panel stays in L1; no pass of A through DRAM), else the whole of A first, in parallel."""
    block = sch.get_sblock("AP")
    if local:
        sch.compute_at(block, mo)
        kk, ii = sch.get_loops(block)[-2:]
        sch.reorder(ii, kk)
        return
    io, kk, ii = sch.get_loops(block)
    sch.reorder(io, ii, kk)
    sch.parallel(io)


def _gated(a, w, g, simd: Simd):
    """Squeeze-excite's per-input-channel gate folded into the GEMM: scale whichever operand is
    smaller, once per call, in a stage of its own ("G"): W'[p, k, q] = W[p, k, q] * g[k] when
    K x N <= M x K (early, wide layers), else A'[i, k] = A[i, k] * g[k]."""
    m, k = (int(d) for d in a.shape)
    blocks, _, nr = (int(d) for d in w.shape)
    if blocks * nr <= m:
        return a, te.compute(w.shape, lambda p, kk, q: w[p, kk, q] * g[kk], name="G"), "w"
    return te.compute(a.shape, lambda i, kk: a[i, kk] * g[kk], name="G"), w, "a"


def _schedule_gate(sch: s_tir.Schedule, which: str, k: int, simd: Simd) -> None:
    gb = sch.get_sblock("G")
    loops = sch.get_loops(gb)
    inner = loops[-1]
    if which == "a":
        _, inner = sch.split(inner, [None, vector_width(k, 2 * simd.lanes)])
    sch.vectorize(inner)
    sch.parallel(loops[0])


def gemm(m: int, k: int, npad: int, simd: Simd, *, epi: Epilogue = NO_EPILOGUE, nr=None,
         name="edge_gemm", schedule: str = "default") -> tvm.tirx.PrimFunc:
    """A (m, k) @ Wp (npad/nr, k, nr) + bias (npad,) [G (k,) gating A's columns] [+ R (m, npad)]
    -> act -> (m, npad). `schedule`: a GEMM_ORDERS name, or "default" (gemm_order's rule); a suffix
    LLVM_TILE ("default+llvm_tile") keeps LLVM's register tile where the A53 assembly tile is the rule;
    TILE_12X8 ("rows_outer+a53_12x8") takes the A53 assembly 12x8 tile where it applies (else LLVM's)."""
    act, residual = epi.act, epi.residual
    nr = nr or choose_nr(simd, m, npad)
    if schedule == "default":
        schedule = a53_epi.rule(m, k, npad, nr, simd, epi) or schedule
    order, _, tile = schedule.partition("+")
    order = gemm_order((m, k, npad, nr), simd) if order == "default" else order
    if tile and tile not in (LLVM_TILE[1:], TILE_12X8[1:], *EPILOGUE_TILES):
        raise ValueError(f"{name}: unknown GEMM tile {tile!r} in schedule {schedule!r}")
    if (tile in EPILOGUE_TILES and a53_epi.applies(epi)
            and a53.applies(simd, m, k, EPILOGUE_TILES[tile].MR, nr, epi.gate, min_k=a53_epi.MIN_K)):
        # blocks of at least 2 panels: both halves of an output row's 64-byte line stored back to back (one
        # write miss per line, not two: the timing model counts each as a fill and a write-back)
        nb = max(2, _panel_block((m, k, npad, nr), simd))
        if order == "panel_blocks" and (npad // nr) % nb:
            order, nb = "panels_outer", 1
        return a53_epi.gemm_a53_epilogue(m, k, npad, epi=epi, order=order, tile=EPILOGUE_TILES[tile], nb=nb, name=name)
    tile12 = tile == TILE_12X8[1:] and _asm_tile(simd, (m, k, npad, nr), epi.gate, order, a53_12x8.MR)
    asm = tile12 or (not tile and _asm_tile(simd, (m, k, npad, nr), epi.gate, order))
    mr = a53_12x8.MR if tile12 else a53.MR if asm else pick_tile(m, simd.mr_max)
    mp = round_up(m, mr)  # the tail tile reads row m-1 again and stores nothing past row m
    a = te.placeholder((m, k), "float32", name="A")
    w = te.placeholder((npad // nr, k, nr), "float32", name="W")
    b = epi.bias(npad)
    g = te.placeholder((k,), "float32", name="G_in") if epi.gate else None
    r = te.placeholder((m, npad), "float32", name="R") if residual else None
    asrc, wsrc, which = _gated(a, w, g, simd) if epi.gate else (a, w, None)
    rk = te.reduce_axis((0, k), name="k")
    row = (lambda i: te.min(i, m - 1)) if mp != m else (lambda i: i)
    ap, aread = _row_panels(a, asrc, row, (m, k, mr, order), simd, epi.gate, asm)
    c = te.compute((mp, npad), lambda i, j: te.sum(aread(i, rk) * wsrc[j // nr, rk, j % nr], axis=rk),
                   name="C")
    out = te.compute((m, npad), lambda i, j: apply_epilogue(
        c[i, j], b[j], act, r[i, j] if residual else None, simd, epi.alpha(b, npad, j)), name="out")
    args = [a, w, b] + ([g] if epi.gate else []) + ([r] if residual else []) + [out]
    sch = s_tir.Schedule(workload := te.create_prim_func(args))
    cb, ob = sch.get_sblock("C"), sch.get_sblock("out")
    i, j = sch.get_loops(ob)
    mo, mi = sch.split(i, [None, mr])
    no, ni = sch.split(j, [None, nr])
    outer = _tile_order(sch, mo, no, (m, k, npad, nr), simd, order)
    sch.reorder(*outer, mi, ni)
    sch.compute_at(cb, outer[-1])
    sch.set_scope(cb, 0, ACC_SCOPE)
    sch.unroll(mi)
    sch.vectorize(ni)
    (ck,) = a53.order_tile(sch, cb, len(outer)) if asm else tile_inner(sch, cb, len(outer), [mr, nr], [k],
                                                                           vec=True)
    if ap is None and simd.isa == "neon" and outer[0].same_as(mo) and k % simd.lanes == 0 and k * 4 > 256:
        _pack_rows(sch, cb, mo, simd)
    if ap is not None:
        _schedule_panels(sch, mo, order == "rows_outer" or k * 4 <= 256)
    sch.parallel(outer[0])
    init = sch.decompose_reduction(cb, ck)
    if asm:
        a53.tensorize_tile(sch, ck, k, outer[0], init, tile=a53_12x8 if tile12 else None)
    if which is not None:
        _schedule_gate(sch, which, k, simd)
    return finish(sch, name, workload=workload)


def _im2col_rule(simd: Simd, shape, kernel, strides, padding, cpad: int) -> bool:
    """A strided conv where conv_im2col_a53.applies runs as an implicit-im2col GEMM on the A53 assembly
    tile (modelled pi3, 1 thread, ResNet18's 3x3 s2 convs, LLVM's direct conv -> im2col: 56x56x64 -> 128
    32.3 -> 24.9 M cycles, 28x28x128 -> 256 37.2 -> 26.2 M, 14x14x256 -> 512 35.0 -> 27.2 M)."""
    return strides[0] > 1 and im2col.applies(simd, shape, kernel, strides, padding, choose_nr(simd, 2, cpad))


def conv2d_direct(shape, kernel, strides, padding, cpad, simd: Simd, *, epi: Epilogue = NO_EPILOGUE,
                  name="edge_conv2d", schedule: str = "default") -> tvm.tirx.PrimFunc:
    """NHWC conv over packed weights (cpad/nr, KH, KW, CI, nr); padding = (top, left, bottom, right)
    with zeros, or (top, left, bottom, right, fills) with one border value per input channel.
    `schedule`: "weights_outer" / "pixels_outer", "im2col", or "default" (_im2col_rule, else the rule below)."""
    if schedule == "im2col" or (schedule == "default" and _im2col_rule(simd, shape, kernel, strides, padding, cpad)):
        return im2col.conv2d_im2col(shape, kernel, strides, padding, cpad, simd, epi=epi, name=name)
    act, residual = epi.act, epi.residual
    n, h, w_, ci = shape
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = padding[:4]
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w_ + pl + pr - kw) // sw + 1
    nr = choose_nr(simd, 2, cpad)
    mr = pick_tile(ow, simd.mr_max if nr == simd.nr else 2 * simd.mr_max)
    owp = round_up(ow, mr)
    col = (lambda z: te.min(z, ow - 1)) if owp != ow else (lambda z: z)
    x = te.placeholder(shape, "float32", name="X")
    wt = te.placeholder((cpad // nr, kh, kw, ci, nr), "float32", name="W")
    b = epi.bias(cpad)
    r = te.placeholder((n, oh, ow, cpad), "float32", name="R") if residual else None
    xp = pad_nhwc(x, padding, padding[4] if len(padding) > 4 else tvm.tirx.const(0.0, "float32"))
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, ci), name="rc")
    c = te.compute(
        (n, oh, owp, cpad),
        lambda a, y, z, o: te.sum(
            xp[a, y * sh + ry, col(z) * sw + rx, rc] * wt[o // nr, ry, rx, rc, o % nr], axis=[ry, rx, rc]),
        name="C")
    out = te.compute((n, oh, ow, cpad), lambda a, y, z, o: apply_epilogue(
        c[a, y, z, o], b[o], act, r[a, y, z, o] if residual else None, simd, epi.alpha(b, cpad, o)), name="out")
    args = [x, wt, b] + ([r] if residual else []) + [out]
    sch = s_tir.Schedule(workload := te.create_prim_func(args))
    cb, ob = sch.get_sblock("C"), sch.get_sblock("out")
    la, ly, lz, lo = sch.get_loops(ob)
    zo, zi = sch.split(lz, [None, mr])
    oo, oi = sch.split(lo, [None, nr])
    # Few pixels, many weights (late ResNet layers): sweep each weight panel over all pixels once,
    # else the whole weight tensor streams from DRAM once per output row.
    weights_outer = cpad > oh * ow if schedule == "default" else schedule == "weights_outer"
    outer = [oo, la, ly, zo] if weights_outer else [la, ly, zo, oo]
    sch.reorder(*outer, zi, oi)
    sch.compute_at(cb, outer[-1])
    sch.set_scope(cb, 0, ACC_SCOPE)
    sch.unroll(zi)
    sch.vectorize(oi)
    red = tile_inner(sch, cb, 4, [mr, nr], [kh, kw, ci], vec=True)
    sch.parallel(oo if weights_outer else sch.fuse(la, ly))
    if red:
        sch.decompose_reduction(cb, red[0])
    if any(padding[:4]):
        pblock = sch.get_sblock("pad")
        pa, py, pz, pc = sch.get_loops(pblock)
        sch.parallel(sch.fuse(pa, py))
        if ci % simd.lanes == 0:
            _, pcv = sch.split(pc, [None, simd.lanes])
            sch.vectorize(pcv)
    return finish(sch, name, workload=workload)
