"""aarch64 int8 GEMM on 8-bit operands: `smull`/`smlal2` into 16 bits and `sadalp` into 32 (gemmlowp's
pre-dotprod kernel), int8 weights read directly from the package.

The A53 has no sdot. The int16 kernel (gemm_int8_widen16.py) does 4 multiply-adds per NEON instruction (`smlal v.4s,
w.4h, a.h[i]`); here one 16-deep step of a (row i, channel j) pair is

    t = smull(a.8b, w.8b); t = smlal2(t, a.16b, w.16b)   8 int16 lanes, two products each
    acc[i][j] = sadalp(acc[i][j], t)                     4 int32 lanes, four products each

16 multiply-adds in 3 instructions (5.3 per instruction). Two int8 x int8 products fit an int16 lane only
if they are not both (-128) x (-128): weights must be in [-127, 127] (TFLite's int8 weights are
symmetric there; `fits` checks, and the caller keeps the int16 kernel otherwise).

Layout: a 4 pixels x 4 channels register tile (16 q accumulators of 4 partial sums each, 4 + 4 q operand
loads per 16-deep step: 48 multiply instructions for 256 multiply-adds). A is copied per row tile into
int8 rows of (ky, kx, c), c padded to 16 with zeros, cut in 16-byte blocks (a8[tile, block, row, 16]);
the padding taps read the input zero point, which the folded bias cancels exactly as TFLite skips them;
when CI is not a multiple of 16 and the kernel is not 1x1 (the stem), the whole (ky, kx, c) row is
padded to 16 instead. Weights are packed once at compile time the same way, int8 (the package holds 1
byte a weight). The 16-deep step is a tensor intrinsic (its body calls llvm.aarch64.neon.smull /
saddlp; LLVM fuses the adds into smlal2 / sadalp), one reduction loop over all blocks, 4 steps
unrolled; the epilogue sums each accumulator's 4 lanes (addp, a second intrinsic, so the accumulators
stay whole q registers), adds the folded bias and runs gemm's 32-bit requantize. By default on NEON the
whole reduction of a strip of up to STRIP_TILES tiles is instead one call of gemm_int8_a53_strip's assembly
(gemm_int8_a53_ldr64's tile with ncnn's A53 operand loads, lane sums included, pipelined from tile to tile;
step "strip"), or where a strip would be one tile, one call of gemm_int8_a53_ldr64's tile (step "ldr64");
the LLVM steps stay compile/choice candidates.
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8 import gemm_int8_a53_ldr64 as a53
from edge_sdk.compiler.int8 import gemm_int8_a53_strip as strip8
from edge_sdk.compiler.int8 import requant_int8_a53_rows as rqa
from edge_sdk.compiler.int8 import smull_step_variants
from edge_sdk.compiler.int8.gemm_int8_smull_intrin import LANE_SUM_4, SMULL_4x4
from edge_sdk.compiler.int8.gemm_int8_smull_intrin import desc as _desc
from edge_sdk.compiler.int8.gemm_int8_smull_intrin import register as _register
from edge_sdk.compiler.int8 import im2col_int8_rows as rows8
from edge_sdk.compiler.int8.gemm_int8_widen16 import ConvGeom
from edge_sdk.compiler.ops.common import ACC_SCOPE, drop_init_of_storing_call, finish, largest_divisor, round_up

MR = NR = 4
KB = 16


def fits(w: np.ndarray, m: int) -> bool:
    """Whether the 8-bit kernel applies: no -128 weight (the int16 pair bound) and at least one row tile."""
    return m >= MR and int(np.min(w)) > -128


def _dims(kh: int, kw: int, ci: int) -> tuple[int, int, int]:
    """(R1, R2, C16) of the packed rows: (KH, KW, CI padded to 16), or (1, 1, K padded to 16)."""
    if kh * kw == 1 or ci % KB == 0:
        return kh, kw, round_up(ci, KB)
    return 1, 1, round_up(kh * kw * ci, KB)


def pack_weight8(w_hwio: np.ndarray) -> np.ndarray:
    """(KH, KW, CI, CO) int8 -> int8 (CO/4, NB, 4, 16): the (R1, R2, C16) rows of _dims cut in NB 16-byte
    blocks, 4 channels' blocks side by side; zero-padded."""
    kh, kw, ci, co = w_hwio.shape
    r1, r2, c16 = _dims(kh, kw, ci)
    cop = round_up(co, NR)
    w = np.zeros((cop, r1, r2, c16), np.int8)
    w_ohwi = w_hwio.transpose(3, 0, 1, 2)
    if r1 == kh and r2 == kw:
        w[:co, :, :, :ci] = w_ohwi
    else:
        w[:co, 0, 0, :kh * kw * ci] = w_ohwi.reshape(co, -1)
    nb = r1 * r2 * c16 // KB
    return np.ascontiguousarray(w.reshape(cop // NR, NR, nb, KB).transpose(0, 2, 1, 3))


def _a8(x, kdims, geom: ConvGeom, in_zp: int):
    """The packed int8 rows a8[tile, NB, row, 16] of im2col(x) (pack_weight8's blocks): padding taps the
    zero point, the K pad 0."""
    kh, kw, ci = kdims
    r1, r2, c16 = _dims(kh, kw, ci)
    n, h, w_, _ = (int(d) for d in x.shape)
    oh, ow = geom.out_hw
    m = n * oh * ow
    mp = round_up(m, MR)
    (sh, sw), (dh, dw) = geom.stride, geom.dilation
    pt, _, pl, _ = geom.pads
    natural = r1 == kh and r2 == kw
    cb = c16 // KB

    def val(io, b, ii, t):
        i = io * MR + ii
        i = te.min(i, m - 1) if mp != m else i
        if natural:
            c = b % cb * KB + t if cb > 1 else t
            ry, rx, cc, valid = b // (kw * cb), b // cb % kw, c, (c < ci) if c16 != ci else None
        else:
            c = b * KB + t
            ry, rx, cc, valid = c // (kw * ci), c // ci % kw, c % ci, c < kh * kw * ci
        a, y, z = i // (oh * ow), i // ow % oh, i % ow
        yy, xx = y * sh + ry * dh - pt, z * sw + rx * dw - pl
        v = x[a, yy, xx, cc]
        if any(geom.pads):
            v = tirx.if_then_else(tirx.all(yy >= 0, yy < h, xx >= 0, xx < w_), v, tirx.const(in_zp, "int8"))
        return v if valid is None else tirx.if_then_else(valid, v, tirx.const(0, "int8"))

    nb = r1 * r2 * cb
    return te.compute((mp // MR, nb, MR, KB), val, name="a8"), nb, natural and c16 == ci


# compile/choice candidates ("int8.gemm8"): "<order>/<step>", order the outer tile loop, step the 4x4x16 step
# ("tmp": SMULL_4x4, "notmp": smull_step_variants', "ldr64": gemm_int8_a53_ldr64's assembly tile over all
# blocks; "strip": gemm_int8_a53_strip's strip of up to STRIP_TILES tiles sharing one operand, one call); "default" is
# the rule (npad > m: weights outer) + strip (ldr64 where a strip is one tile, tmp for a single block).
GEMM8_SCHEDULES = tuple(f"{o}/{s}" for o in ("rows_outer", "weights_outer") for s in ("tmp", "notmp", "ldr64", "strip"))
STRIP_TILES = 16  # the stem priced alone on pi3: 8 tiles 38.61 M, 16 38.55 (C on the stack since 05f2f2a)


def conv_gemm8(x_shape, w_hwio: np.ndarray, rq, *, geom: ConvGeom, name: str, padded_rows: bool = True,
               schedule: str = "default"):
    """PrimFunc out (M, COpad) int8 = requant(im2col(x) @ W + bias), x NHWC; the 8-bit NEON tile.
    padded_rows: where it applies (CI % 16 != 0, not 1x1), im2col_int8_rows' pre-padded 8-byte copies.
    schedule: one of GEMM8_SCHEDULES, "default", or winograd_int8_f23.SCHEDULE (a 3x3 stride-1 conv as exact
    Winograd F(2x2, 3x3) instead: the same arguments and output, the weights as its int16 transform; the
    default for the layers winograd_int8_f23.is_default names).

    Returns (func, packed int8 weight, npad). Arguments: x, W, bias, mult, rshift (int32, (npad,))."""
    wino = _winograd_conv(x_shape, w_hwio, rq, geom, name, schedule)
    if wino is not None:
        return wino
    kh, kw, ci, co = w_hwio.shape
    m = x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    npad, mp = round_up(co, NR), round_up(m, MR)
    x = te.placeholder(tuple(x_shape), "int8", name="x")
    hps = rows8.halves(kh, kw, ci, geom.dilation[1]) if padded_rows else None
    if hps:
        (a8, nb), plain = rows8.a8_rows(x, kh, hps, geom, rq.in_zp, MR), rows8.HALF
        wp = rows8.pack_weight_rows(w_hwio, hps)
    else:
        a8, nb, plain = _a8(x, (kh, kw, ci), geom, rq.in_zp)
        wp = pack_weight8(w_hwio)
    wt = te.placeholder(wp.shape, "int8", name="w")
    bt, mt, rt_ = (te.placeholder((npad,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))
    order, _, step = schedule.partition("/")
    # the assembly tile by default from 2 blocks on: at one block its fixed cost a tile (operand and C round
    # trips, ~60 cycles) outweighs the step (112x112x16 -> 96, modelled pi3: 15.79 vs 14.50 M cycles)
    asm = step == a53.SCHEDULE_STEP or (schedule == "default" and nb >= 2)
    wo = (npad > m) if schedule == "default" else order == "weights_outer"
    # a strip of one tile is the ldr64 tile (a prime tile count over STRIP_TILES too): that kernel instead
    # by default from 2 blocks on, rows outer: the strip (priced alone on pi3, modelled cycles, ldr64 -> strip: ResNet18
    # int8's stem 7x7 s2 39.28 -> 38.55 M, 3x3 s2 64->128 @56 14.34 -> 14.06, 128->256 @28 13.87 -> 13.66, 1x1 s2
    # 64->128 @56 2.23 -> 2.14); weights outer the ldr64 tile (3x3 s2 256->512 @14: 14.38 vs a strip's 14.55), as
    # where a strip would be one tile
    strip = (step == strip8.SCHEDULE_STEP or (schedule == "default" and not wo)) and nb >= 2 \
        and strip_tiles(m, npad, wo) > 1
    asm = asm or (step == strip8.SCHEDULE_STEP and not strip and nb >= 2)
    if strip:
        asm = False
        acc3 = _acc_strip(a8, wt, nb, mp, npad, wo)
        biased = te.compute((mp, npad), lambda i, j: (acc3[i // MR, i % MR, j] if wo else acc3[i, j // NR, j % NR])
                            + bt[j], name="biased")
    else:
        acc = (_acc_sums if asm else _acc_lanes)(a8, wt, nb, mp, npad)
        biased = te.compute((mp, npad), lambda i, j: acc[i, j] + bt[j], name="biased")
    lo, hi = rq.act
    out = te.compute((m, npad), lambda i, j: fp.clamp_int8_32(
        fp.mbqm32_neon(biased[i, j], mt[j], rt_[j]) + tirx.const(rq.out_zp, "int32"), lo, hi), name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, mt, rt_, out]))
    # a row's taps are slices of x (the bounds and tail guards do not depend on c: TVM keeps them a branch)
    # the stem's rows (7 x 3 halves in 11 blocks): the last block's high half is zero weights, a smull-only step
    half_tail = (asm or strip) and nb >= 2 and not wp[:, -1, :, rows8.HALF:].any()
    _schedule(sch, m=m, npad=npad, plain_copy=plain, red_b=nb, weights_outer=wo, notmp=step == "notmp",
              asm=asm, half_tail=half_tail, strip=strip, rq_consts=(rq.out_zp, lo, hi))
    return finish(sch, name), wp, npad


def _winograd_conv(x_shape, w_hwio: np.ndarray, rq, geom: ConvGeom, name: str, schedule: str):
    """conv_gemm8's Winograd F(2x2, 3x3) forms (schedule winograd_int8_f23.SCHEDULE, a blocked group, or "default"
    on the layers winograd_int8_f23.is_default names), or None for the GEMM."""
    from edge_sdk.compiler.int8 import winograd_int8_f23 as f23, winograd_int8_f23_blocked as f23b

    if schedule == "default" and f23.is_default(x_shape, w_hwio.shape, geom):
        schedule = f23b.default_schedule(x_shape, w_hwio.shape, geom)
    if schedule == f23.SCHEDULE:
        return f23.conv_f23(x_shape, w_hwio, rq, geom=geom, name=name)
    if f23b.parse_group(schedule):
        return f23b.conv_f23_blocked(x_shape, w_hwio, rq, geom=geom, name=name, group=f23b.parse_group(schedule),
                                     asm=f23b.parse_asm(schedule), vt=f23b.parse_vt(schedule))
    return None


def _acc_lanes(a8, wt, nb: int, mp: int, npad: int):
    """acc (mp, npad): the 4 partial sums of each output (one q register each, SMULL_4x4) then their sum."""
    rb, rh, rp = te.reduce_axis((0, nb), "rb"), te.reduce_axis((0, 2), "rh"), te.reduce_axis((0, 2), "rp")

    def prod(i, j, lane):
        t = rh * 8 + lane * 2 + rp
        return a8[i // MR, rb, i % MR, t].astype("int32") * wt[j // NR, rb, j % NR, t].astype("int32")

    acc4 = te.compute((mp, npad, 4), lambda i, j, lane: te.sum(prod(i, j, lane), axis=[rb, rh, rp]), name="acc")
    rl = te.reduce_axis((0, 4), "rl")
    return te.compute((mp, npad), lambda i, j: te.sum(acc4[i, j, rl], axis=rl), name="lanesum")


def _acc_sums(a8, wt, nb: int, mp: int, npad: int):
    """acc (mp, npad): each output's whole dot product (gemm_int8_a53_ldr64's tile sums the lanes itself)."""
    rb, rt = te.reduce_axis((0, nb), "rb"), te.reduce_axis((0, KB), "rt")
    return te.compute((mp, npad), lambda i, j: te.sum(
        a8[i // MR, rb, i % MR, rt].astype("int32") * wt[j // NR, rb, j % NR, rt].astype("int32"), axis=[rb, rt]),
        name="acc")


def strip_tiles(m: int, npad: int, weights_outer: bool) -> int:
    """Tiles in one strip: the largest divisor of the inner tile loop's extent up to STRIP_TILES."""
    return largest_divisor((round_up(m, MR) if weights_outer else npad) // MR, STRIP_TILES)


def _acc_strip(a8, wt, nb: int, mp: int, npad: int, weights_outer: bool):
    """The strip kernel's sums (gemm_int8_a53_strip): rows outer acc[i, t, j] (mp, npad/4, 4), channel tiles t;
    weights outer acc[t, i, j] (mp/4, 4, npad), row tiles t."""
    rb, rt = te.reduce_axis((0, nb), "rb"), te.reduce_axis((0, KB), "rt")
    if weights_outer:
        return te.compute((mp // MR, MR, npad), lambda t, i, j: te.sum(
            a8[t, rb, i, rt].astype("int32") * wt[j // NR, rb, j % NR, rt].astype("int32"), axis=[rb, rt]), name="acc")
    return te.compute((mp, npad // NR, NR), lambda i, t, j: te.sum(
        a8[i // MR, rb, i % MR, rt].astype("int32") * wt[t, rb, j, rt].astype("int32"), axis=[rb, rt]), name="acc")


def _schedule(sch, *, m: int, npad: int, plain_copy: bool | int, red_b: int, weights_outer: bool | None = None,
              notmp: bool = False, asm: bool = False, half_tail: bool = False, strip: bool = False,
              rq_consts: tuple | None = None) -> None:
    """Row tiles x channel tiles (the bigger operand's panel outer), A's rows copied per row tile, the
    4x4x16 step tensorized under the reduction loops, the lane sums and requantize vectorized over 4.
    strip: the inner tile loop cut in strips of up to STRIP_TILES tiles, each strip's sums one call of
    gemm_int8_a53_strip's kernel (the bias add inlined into the requantize)."""
    ab, cb, bb, ob = (sch.get_sblock(n) for n in ("a8", "acc", "biased", "out"))
    sb = None if asm or strip else sch.get_sblock("lanesum")
    i, j = sch.get_loops(ob)
    mo, mi = sch.split(i, [None, MR])
    no, ni = sch.split(j, [None, NR])
    if weights_outer is None:
        weights_outer = npad > m  # keep the bigger operand's panel in cache
    outer = [no, mo] if weights_outer else [mo, no]
    if strip:
        nt = strip_tiles(m, npad, weights_outer)
        sch.reorder(*outer, mi, ni)
        so, si = sch.split(outer[1], [None, nt])
        sch.compute_inline(bb)
        sch.compute_at(cb, so)
        sch.set_scope(cb, 0, ACC_SCOPE)
        _place_rows(sch, ab, outer, weights_outer, plain_copy)
        sch.parallel(outer[0])
        if not weights_outer and nt % 4 == 0 and m % MR == 0 and rq_consts is not None:
            # the requantize of the strip's 4 rows x 4 nt channels: requant_int8_a53_rows' assembly
            sch.tensorize(si, rqa.intrin(nt, *rq_consts))
            sch.annotate(so, "pragma_import_llvm", rqa.llvm_ir(nt, *rq_consts))  # outer[0] links the strip
        else:
            sch.unroll(mi)
            sch.vectorize(ni)
        _tensorize_strip(sch, cb, red_b, nt, outer[0], half_tail, weights_outer)
        return
    sch.reorder(*outer, mi, ni)
    for blk in (bb, sb, cb) if sb is not None else (bb, cb):
        sch.compute_at(blk, outer[1])
        sch.set_scope(blk, 0, ACC_SCOPE)  # "global": a stack alloca LLVM keeps in registers
    bl = sch.get_loops(bb)[2:]
    sch.unroll(bl[0])
    sch.vectorize(bl[1])
    _place_rows(sch, ab, outer, weights_outer, plain_copy)
    sch.parallel(outer[0])
    sch.unroll(mi)
    sch.vectorize(ni)
    if asm:
        _tensorize_asm(sch, cb, red_b, outer[0], half_tail)
        return
    loops = list(sch.get_loops(cb)[2:])  # mi, ni, lane, rb, rh, rp (a unit rb dropped)
    ci_, cj, cl = loops[:3]
    rest = loops[3:]
    rl, (rh, rp) = rest[:-2], rest[-2:]
    sch.reorder(*rl, ci_, cj, cl, rh, rp)
    # 4 steps unrolled here: left to itself LLVM unrolls the step loop by 2 and then spills 8 of the 16
    # accumulators around every step (4 steps unrolled, 1x1 512 -> 512: no stack access in the loop)
    unroll = largest_divisor(red_b, 4) if red_b > 8 else red_b
    if unroll == 1 and red_b <= 16:  # a prime step count (the 7x7x3 stem's 11): all steps unrolled
        unroll = red_b
    if rl and red_b > 1 and unroll > 1:
        rbo, rbi = sch.split(rl[-1], [None, unroll])
        sch.unroll(rbi)
        rl = [*rl[:-1], rbo, rbi]
    sch.decompose_reduction(cb, rl[0] if rl else ci_)
    _register()
    sch.tensorize(ci_, SMULL_4x4 if not notmp else smull_step_variants.register(_desc))
    si, sj, _ = sch.get_loops(sb)[2:]
    sch.unroll(si)
    sch.decompose_reduction(sb, sj)
    sch.tensorize(sch.get_loops(sb)[-2], LANE_SUM_4)
    init = sch.get_sblock("lanesum_init")
    sch.vectorize(sch.get_loops(init)[-1])



def _place_rows(sch, ab, outer, weights_outer: bool, plain_copy: bool | int) -> None:
    """A's packed rows: all of them first in parallel (weights outer) or each row tile's in its loop."""
    if weights_outer:
        sch.parallel(sch.get_loops(ab)[0])
    else:
        sch.compute_at(ab, outer[0])
    if plain_copy == rows8.HALF:  # 8-byte vector copies out of the pre-padded rows
        sch.vectorize(sch.split(sch.get_loops(ab)[-1], [None, rows8.HALF])[1])
        pa, py, _ = sch.get_loops(sch.get_sblock("xpad"))
        sch.parallel(sch.fuse(pa, py))
    elif plain_copy:  # 16-byte vector copies
        sch.vectorize(sch.get_loops(ab)[-1])


def _tensorize_strip(sch, cb, red_b: int, nt: int, outer_loop, half_tail: bool, weights_outer: bool) -> None:
    """The strip's (tile, 4, 4, NB, 16) accumulator nest as one call of gemm_int8_a53_strip's kernel."""
    shared = "W" if weights_outer else "A"
    l0, l1, l2, rb, rt = sch.get_loops(cb)[-5:]
    t, i, j = (l0, l1, l2) if weights_outer else (l1, l0, l2)
    sch.reorder(t, rb, i, j, rt)
    sch.tensorize(t, strip8.intrin(red_b, nt, half_tail, shared))
    drop_init_of_storing_call(sch, sch.get_sblock("acc_o"))  # the kernel stores C: its zeroing is dead
    sch.annotate(outer_loop, "pragma_import_llvm", strip8.llvm_ir(red_b, nt, half_tail, shared))


def _tensorize_asm(sch, cb, red_b: int, outer_loop, half_tail: bool = False) -> None:
    """The accumulator block's (4 pixels, 4 channels, NB, 16) nest as one call of the assembly tile
    (gemm_int8_a53_ldr64, all NB blocks; half_tail: the last block's high half is zero weights), without its
    zeroing (the tile stores); the tile's IR linked at `outer_loop`."""
    loops = sch.get_loops(cb)[2:]  # mi, ni, (rb: dropped when one block), rt
    rb = loops[0]
    if red_b > 1:
        ci_, cj, rb, rt = loops
        sch.reorder(rb, ci_, cj, rt)
    sch.tensorize(rb, a53.intrin(red_b, half_tail))
    drop_init_of_storing_call(sch, sch.get_sblock("acc_o"))  # the tile stores C: its zeroing is dead
    sch.annotate(outer_loop, "pragma_import_llvm", a53.llvm_ir(red_b, half_tail))
