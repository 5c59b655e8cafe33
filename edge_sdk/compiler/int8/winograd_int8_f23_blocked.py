"""int8 Winograd F(2x2, 3x3) over groups of tile blocks: V and M stay in cache (the same exact arithmetic as
winograd_int8_f23.py, whose docstring has the transforms and their integer bounds).

winograd_int8_f23 computes the whole V (16 x tiles x CI int16), then the whole M (16 x tiles x CO int32), then
the output transform: at 56x56x64 V is 1.6 MB and M 3.2 MB, each written and read once through DRAM (ResNet18
int8, pi3, modelled: 6.7-7.2 M cycles of bandwidth in each layer1 conv). Here the loop over tiles is outer:
for each group of G blocks of 8 tiles, V of the group (G x 16 x CI x 8 int16: 16 KB a block at CI = 64) is
computed once; then for each 8-channel block and each tile block of the group, M of that block (8 tiles x 8
channels x 16 positions int32 = 4 KB, in L1) and at once its output transform into out4, tile-major (tiles
x 2 x 2 x COpad int8); one int8 copy puts out4 into the (M, COpad) pixel rows the GEMMs return. U (16 x CI
x COpad int16) is read once per group: the group size trades V's footprint against U's re-reads (layer4's
U is 8 MB): default_group.

Schedule names (int8.gemm8 candidates): "winograd_f23/g<G>" (M by the LLVM smlal step),
"winograd_f23/g<G>/a53" (M by winograd_int8_a53_smlal's assembly step, by lane over 8 tiles, written straight
into M's layout) and, for CI a multiple of 8, "winograd_f23/g<G>/a53v" (its step by lane over 8 channels: V in
blocks of 8 channels x 8 tiles, computed by channel vectors from contiguous NHWC taps instead of gathering a
byte per tile; the default there).
"""
from __future__ import annotations

from tvm import s_tir, te, tirx

from edge_sdk.compiler.choice import register_candidates
from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8 import winograd_int8_a53_smlal as a53s
from edge_sdk.compiler.int8.gemm_int8_widen16 import SMLAL_8x8, _register_intrin
from edge_sdk.compiler.int8.winograd_int8_f23 import (AT, NR, SCHEDULE, TR, _coef, _input_transform, applies,
                                                      pack_weight_f23, schedule_output_tile, tiles)
from edge_sdk.compiler.ops.common import ACC_SCOPE, drop_init_of_storing_call, finish, round_up

U_ONE_GROUP_BYTES = 1 << 20  # U (16 x CI x COpad int16) above this: one group, U streamed from DRAM once
SMALL_GROUP = 2  # else: 2 tile blocks a group (priced best alone at 56x56x64 and 28x28x128)


ASM = "a53"  # the schedule name's suffix of the assembly multiply step (by lane over tiles, V tiles last)
ASM_CL = "a53v"  # ... of the one by lane over channels (V in blocks of 8 channels, by channel vectors)


def schedule_name(group: int, asm: bool | str = False) -> str:
    """winograd_f23/g<G>, with asm True "/a53", with asm "a53v" "/a53v"."""
    step = ASM if asm is True else asm or ""
    return f"{SCHEDULE}/g{group}" + (f"/{step}" if step else "")


def parse_group(schedule: str) -> int | None:
    """G of "winograd_f23/g<G>" or "winograd_f23/g<G>/a53", None for any other schedule name."""
    head, _, g = schedule.partition("/g")
    g = g.removesuffix(f"/{ASM}").removesuffix(f"/{ASM_CL}")
    return int(g) if head == SCHEDULE and g.isdigit() and int(g) > 0 else None


def parse_asm(schedule: str) -> bool:
    return parse_group(schedule) is not None and schedule.endswith((f"/{ASM}", f"/{ASM_CL}"))


def parse_vt(schedule: str) -> bool:
    return parse_group(schedule) is not None and schedule.endswith(f"/{ASM_CL}")


def default_group(ci: int, cop: int, n_blocks: int) -> int:
    """Tile blocks a group by default. Priced alone on pi3 (modelled cycles, 1 thread): where U fits the L2
    (56x56x64: 128 KB, 28x28x128: 512 KB) small groups win, V of a group staying in L1 (G = 1 / 2 / 4 / 8 /
    16 at 56x56x64: see the commit); where it does not (14x14x256: 2 MB, 7x7x512: 8 MB), U's re-reads
    from DRAM cost more than V's footprint: one group (14x14x256: 21.40 M, G = 2: 23.61 M)."""
    if 32 * ci * cop > U_ONE_GROUP_BYTES:
        return n_blocks
    return max(1, min(n_blocks, SMALL_GROUP))


def default_schedule(x_shape, w_shape, geom) -> str:
    """For a conv winograd_int8_f23.is_default names: with CI a multiple of 8 winograd_f23/g1/a53v (all blocks
    where they are 1 or 2), else winograd_f23/g<default_group>/a53. Priced alone on pi3 (modelled cycles,
    LLVM step -> /a53 (16 positions a call) -> /a53v): 56x56x64 22.59 -> 20.14 -> 18.71 (g2 18.65), 28x28x128
    21.28 -> 19.02 -> 17.91, 14x14x256 21.39 -> 19.59 -> 18.48 (g7 20.59), 7x7x512 22.38 -> 20.39 -> 20.23."""
    _, _, ci, co = w_shape
    th, tw = tiles(geom)
    n_blocks = -(-x_shape[0] * th * tw // TR)
    if ci % 8 == 0:
        return schedule_name(n_blocks if n_blocks <= 2 else 1, ASM_CL)
    return schedule_name(default_group(ci, round_up(co, NR), n_blocks), asm=True)


def conv_f23_blocked(x_shape, w_hwio, rq, *, geom, name: str, group: int, asm: bool = False, vt: bool = False):
    """PrimFunc out (M, COpad) int8, x NHWC; returns (func, U, npad). Arguments: x, U, bias, mult, rshift."""
    _, _, ci, co = w_hwio.shape
    n = x_shape[0]
    oh, ow = geom.out_hw
    th, tw = tiles(geom)
    tb = round_up(n * th * tw, TR) // TR
    group = max(1, min(group, tb))
    tb = round_up(tb, group)  # whole groups: the extra blocks read clamped tiles and are never copied out
    npad, m = round_up(co, NR), n * oh * ow
    x = te.placeholder(tuple(x_shape), "int8", name="x")
    cl = asm and vt and ci % 8 == 0  # V channels last, by channel vectors; the by-lane step over channels
    v = _input_transform(x, geom, rq.in_zp, tb, tiles_last=not cl)
    up = pack_weight_f23(w_hwio)
    ut = te.placeholder(up.shape, "int16", name="u")
    bt, mt, rt_ = (te.placeholder((npad,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))
    rk = te.reduce_axis((0, ci), "rk")
    if cl:
        mm = te.compute((tb * TR, npad // 4, 16, 4), lambda t, q, p, l: te.sum(
            v[t // TR, p, rk // 8, t % TR, rk % 8].astype("int32") * ut[(q * 4 + l) // NR, p, rk, (q * 4 + l) % NR].astype("int32"),
            axis=rk), name="M")
    elif asm:  # M itself is the reduction: the assembly step writes it
        mm = te.compute((tb * TR, npad // 4, 16, 4), lambda t, q, p, l: te.sum(
            v[t // TR, p, rk, t % TR].astype("int32") * ut[(q * 4 + l) // NR, p, rk, (q * 4 + l) % NR].astype("int32"),
            axis=rk), name="M")
    else:
        acc = te.compute((16, tb * TR, npad), lambda p, t, j: te.sum(
            v[t // TR, p, rk, t % TR].astype("int32") * ut[j // NR, p, rk, j % NR].astype("int32"), axis=rk),
            name="acc")
        mm = te.compute((tb * TR, npad // 4, 16, 4), lambda t, q, p, l: acc[p, t, q * 4 + l], name="M")
    ru, rv = te.reduce_axis((0, 4), "ou"), te.reduce_axis((0, 4), "ov")
    ysum = te.compute((tb * TR, 2, 2, npad), lambda t, y, z, j: te.sum(
        _coef(AT, y, ru) * _coef(AT, z, rv) * mm[t, j // 4, ru * 4 + rv, j % 4], axis=[ru, rv]), name="Y")
    biased = te.compute(ysum.shape, lambda *i: (ysum(*i) >> tirx.const(2, "int32")) + bt[i[-1]], name="biased")
    lo, hi = rq.act
    out4 = te.compute(ysum.shape, lambda *i: fp.clamp_int8_32(fp.mbqm32_neon(
        biased(*i), mt[i[-1]], rt_[i[-1]]) + tirx.const(rq.out_zp, "int32"), lo, hi), name="out4")

    def pixel(i, j):
        a, y, z = i // (oh * ow), i // ow % oh, i % ow
        return out4[(a * th + y // 2) * tw + z // 2, y % 2, z % 2, j]

    out = te.compute((m, npad), pixel, name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, ut, bt, mt, rt_, out]))
    _schedule(sch, group, ci if asm else None, cl)
    return finish(sch, name), up, npad


def _schedule(sch, group: int, asm_ci: int | None = None, vt: bool = False) -> None:
    """out4: group of tile blocks (parallel), channel block, tile block, tile, 4-channel quad, 2x2 outputs;
    V at the group, M at the tile block (the smlal 8x8 step over CI, as winograd_int8_f23, or with asm_ci
    winograd_int8_a53_smlal's assembly step for CI steps), Y at the quad."""
    vb, mb = sch.get_sblock("V"), sch.get_sblock("M")
    yb, bb, ob = sch.get_sblock("Y"), sch.get_sblock("biased"), sch.get_sblock("out4")
    t, ya, zb, j = sch.get_loops(ob)
    tg, tk, ti = sch.split(t, [None, group, TR])
    jc, jq, jl = sch.split(j, [None, NR // 4, 4])
    sch.reorder(tg, jc, tk, ti, jq, ya, zb, jl)
    sch.parallel(tg)
    for blk in (bb, yb):  # consumers first: each compute_at needs its consumers under the loop already
        sch.compute_at(blk, jq)
        sch.set_scope(blk, 0, ACC_SCOPE)
    sch.compute_at(mb, tk)
    if asm_ci is None:
        ti2 = _schedule_m(sch, mb, sch.get_sblock("acc"))
    else:
        ti2 = sch.get_loops(mb)[-5]  # (tile, quad, position, lane, CI): one call for the tile block's 16 positions
    sch.compute_at(vb, tg)  # before the tensorize: a tensorized consumer stops compute_at's region analysis
    if vt:
        _schedule_v_cl(sch, vb, asm_ci // 8)
    else:
        _schedule_v(sch, vb)
    if asm_ci is None:
        _register_intrin()
        sch.tensorize(ti2, SMLAL_8x8)
        sch.vectorize(sch.get_loops(mb)[-1])
    else:
        sch.tensorize(ti2, (a53s.intrin_cl if vt else a53s.intrin)(asm_ci, 16))
        # the step writes M (smull first, module doc of winograd_int8_a53_smlal): M's zeroing is dead
        drop_init_of_storing_call(sch, sch.get_sblock("M_o"))
        sch.annotate(tg, "pragma_import_llvm", (a53s.llvm_ir_cl if vt else a53s.llvm_ir)(asm_ci, 16))
    sch.unroll(ya)
    sch.unroll(zb)
    sch.vectorize(jl)
    schedule_output_tile(sch, bb, yb)
    fi, fj = sch.get_loops(sch.get_sblock("out"))
    sch.parallel(fi)
    sch.vectorize(sch.split(fj, [None, NR])[1])


def _schedule_v_cl(sch, vb, n_kb: int) -> None:
    """V channels last (tiles x CI per position): per tile and 8-channel vector its 16 taps loaded once (NHWC:
    contiguous) for the 16 positions, unrolled."""
    own = sch.get_loops(vb)[1:]  # under the group loop; unit loops (one block a group, one channel block) are not there
    if n_kb > 1:
        b, (p, ko, i, ki, r, c) = own[:-6], own[-6:]
        sch.reorder(*b, i, ko, r, c, p, ki)
    else:
        b, (p, i, ki, r, c) = own[:-5], own[-5:]
        sch.reorder(*b, i, r, c, p, ki)
    sch.unroll(r)
    sch.unroll(c)
    sch.unroll(p)
    sch.vectorize(ki)
    sch.decompose_reduction(vb, r)


def _schedule_v(sch, vb) -> None:
    own = sch.get_loops(vb)[1:]  # under the group loop; a group of one block has no block loop
    b, (p, k, i, r, c) = own[:-5], own[-5:]
    sch.reorder(*b, k, p, r, c, i)  # p inside k: the 16 taps' loads shared by the 16 positions
    sch.unroll(p)
    sch.unroll(r)
    sch.unroll(c)
    sch.vectorize(i)
    sch.decompose_reduction(vb, r)


def _schedule_m(sch, mb, ab):
    t, q, p, lane = sch.get_loops(mb)[-4:]
    sch.reorder(p, t, q, lane)
    sch.compute_at(ab, p)
    sch.set_scope(ab, 0, "local")
    ti2, ji2, rk = sch.get_loops(ab)[-3:]
    sch.reorder(rk, ti2, ji2)
    sch.decompose_reduction(ab, rk)
    return ti2


def groups_for(ci: int, cop: int, n_blocks: int) -> list[int]:
    """The group sizes offered: 1, 2, 4, the default, and all blocks where they are few (<= 8)."""
    gs = {1, 2, 4, default_group(ci, cop, n_blocks)} | ({n_blocks} if n_blocks <= 8 else set())
    return sorted({min(g, n_blocks) for g in gs})


@register_candidates("int8.gemm8")
def _candidates(workload: dict) -> list[str]:
    """Offered wherever winograd_f23 applies; compile/choice keeps one only where the model prices it cheaper."""
    kh, kw, ci, co = workload["w"]
    a, (oh, ow) = workload["x"][0], workload["out_hw"]
    n_tiles = a * -(-oh // 2) * -(-ow // 2)
    if not applies(kh, kw, workload["stride"], workload["dilation"], n_tiles):
        return []
    steps = (False, True, ASM_CL) if ci % 8 == 0 else (False, True)
    return [schedule_name(g, st) for st in steps for g in groups_for(ci, round_up(co, NR), -(-n_tiles // TR))]
