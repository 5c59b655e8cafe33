"""int8 3x3 stride-1 conv as Winograd F(2x2, 3x3) in integers, exact: the pi3 path that is not 4 MACs a cycle.

The 8-bit im2col GEMM (gemm_int8_smull_neon.py) spends 3 Q-form NEON ops per 16 multiply-adds plus its
operand loads: 4 MACs a cycle, 36 products per output pixel and channel pair of a 3x3 conv. F(2x2, 3x3)
needs 16 per 2x2 outputs (4 per output, 2.25x fewer), as int16 x int16 -> int32 `smlal` by lane (4 MACs an
op: gemm_int8_widen16's 8 tiles x 8 channels step, 16 smlal per two q loads, 3.2 MACs a cycle), so the
multiplies cost ~1.6x fewer cycles. ncnn's int8 3x3 is Winograd too (F(4,3) there, not exact).

Exact, with no rounding anywhere:
- input tiles d (4x4, stride 2, the zero point outside the image) -> V = B^T d B, B^T = [[1,0,-1,0],
  [0,1,1,0],[0,-1,1,0],[0,1,0,-1]]: each V a signed sum of 4 int8, |V| <= 512, int16;
- weights at compile time U = (2G) g (2G)^T with 2G = [[2,0,0],[1,1,1],[1,-1,1],[0,0,2]] (G's halves
  doubled to integers), |U| <= 9 * 128, int16;
- M[p] = sum over CI of V[p] * U[p] (int32: |M| <= 512 * 1152 * CI < 2^31 for CI <= 3640);
- Y = A^T M A, A^T = [[1,1,1,0],[0,1,-1,-1]], is 4x the conv's exact int32 sum; 4x that sum fits int32
  (|sum| <= 9 * CI * 128 * 127) and the 9-term sum is exact in wrapping int32 arithmetic, so Y >> 2 is
  the conv's accumulator exactly. Padding taps read the zero point, which the folded bias cancels as
  TFLite skips them (as in the GEMMs). Then the bias, the NEON requantize, zero point, clamp, int8.

Stages: V[16, TB, CI, 8] int16 (8 tiles side by side, the by-lane operand), M[16, TB*8, COP] int32 by the
8x8 smlal intrinsic over CI, out[(N*OH*OW), COP] int8 from M (vectorized over 4 channels).
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from edge_sdk.compiler.choice import register_candidates
from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8.gemm_int8_widen16 import SMLAL_8x8, _register_intrin
from edge_sdk.compiler.ops.common import ACC_SCOPE, finish, round_up

TR = NR = 8  # tiles x channels of the smlal step
SCHEDULE = "winograd_f23"  # its name among the int8.gemm8 candidates (compile/choice)
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.int64)
G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.int64)


def applies(kh: int, kw: int, stride, dilation, m_tiles: int) -> bool:
    return (kh, kw) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and m_tiles >= TR


def is_default(x_shape, w_shape, geom) -> bool:
    """The rule without compile/choice: where it applies over >= 64 channels in and out, the range priced
    cheaper than the 8-bit GEMM layer by layer (ResNet18's 3x3 convs, 56x56x64 .. 7x7x512: 6-25 % fewer
    modelled A53 cycles); smaller channel counts keep the GEMM unless the chooser prices this."""
    kh, kw, ci, co = w_shape
    th, tw = tiles(geom)
    return applies(kh, kw, geom.stride, geom.dilation, x_shape[0] * th * tw) and ci >= 64 and co >= 64


def tiles(geom) -> tuple[int, int]:
    oh, ow = geom.out_hw
    return -(-oh // 2), -(-ow // 2)


def pack_weight_f23(w_hwio: np.ndarray) -> np.ndarray:
    """(3, 3, CI, CO) int8 -> U int16 (COP/8, 16, CI, 8): (2G) g (2G)^T per (ci, co), 8 channels side by side."""
    _, _, ci, co = w_hwio.shape
    cop = round_up(co, NR)
    u = np.einsum("ur,vc,rcio->uvio", G2, G2, w_hwio.astype(np.int64)).reshape(16, ci, co)
    assert np.abs(u).max() < 2 ** 15
    out = np.zeros((16, ci, cop), np.int16)
    out[:, :, :co] = u
    return np.ascontiguousarray(out.reshape(16, ci, cop // NR, NR).transpose(2, 0, 1, 3))


def _coef(mat: np.ndarray, row, col):
    """mat[row, col] for loop variables, as a select chain (folded once the loops are unrolled)."""
    e = tirx.const(0, "int32")
    for r in range(mat.shape[0]):
        for c in range(mat.shape[1]):
            if mat[r, c]:
                e = tirx.Select(tirx.all(row == r, col == c), tirx.const(int(mat[r, c]), "int32"), e)
    return e


def _input_transform(x, geom, in_zp: int, tb: int, *, tiles_last: bool = True, name: str = "V"):
    """V (tb, 16, CI, TR) int16 (tiles_last) or (tb, 16, CI / 8, TR, 8) (blocks of 8 channels last, for a
    channel-vector schedule; CI a multiple of 8)."""
    n, h, w_, ci = (int(d) for d in x.shape)
    th, tw = tiles(geom)
    pt, _, pl, _ = geom.pads
    r, c = te.reduce_axis((0, 4), "vr"), te.reduce_axis((0, 4), "vc")

    def d(t, rr, cc, k):
        t = te.min(t, n * th * tw - 1)
        a, ty, tx = t // (th * tw), t // tw % th, t % tw
        yy, xx = ty * 2 + rr - pt, tx * 2 + cc - pl
        v = x[a, tirx.max(tirx.min(yy, h - 1), 0), tirx.max(tirx.min(xx, w_ - 1), 0), k]
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w_)
        return tirx.Select(inside, v, tirx.const(in_zp, "int8")).astype("int32")

    def v(b, p, k, i):
        return te.sum((_coef(BT, p // 4, r) * _coef(BT, p % 4, c) * d(b * TR + i, r, c, k)).astype("int16"), axis=[r, c])

    if tiles_last:
        return te.compute((tb, 16, ci, TR), v, name=name)
    return te.compute((tb, 16, ci // 8, TR, 8), lambda b, p, kb, i, kk: v(b, p, kb * 8 + kk, i), name=name)


def conv_f23(x_shape, w_hwio: np.ndarray, rq, *, geom, name: str):
    """PrimFunc out (M, COpad) int8, x NHWC; returns (func, U, npad). Arguments: x, U, bias, mult, rshift."""
    _, _, ci, co = w_hwio.shape
    n = x_shape[0]
    oh, ow = geom.out_hw
    th, tw = tiles(geom)
    tb = round_up(n * th * tw, TR) // TR
    npad, m = round_up(co, NR), n * oh * ow
    x = te.placeholder(tuple(x_shape), "int8", name="x")
    v = _input_transform(x, geom, rq.in_zp, tb)
    up = pack_weight_f23(w_hwio)
    ut = te.placeholder(up.shape, "int16", name="u")
    bt, mt, rt_ = (te.placeholder((npad,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))
    rk = te.reduce_axis((0, ci), "rk")
    acc = te.compute((16, tb * TR, npad), lambda p, t, j: te.sum(
        v[t // TR, p, rk, t % TR].astype("int32") * ut[j // NR, p, rk, j % NR].astype("int32"), axis=rk),
        name="acc")
    # a tile's 16 positions side by side for each 4 channels: the output transform reads one stream
    mm = te.compute((tb * TR, npad // 4, 16, 4), lambda t, q, p, l: acc[p, t, q * 4 + l], name="M")
    ru, rv = te.reduce_axis((0, 4), "ou"), te.reduce_axis((0, 4), "ov")

    def y4(a, y, z, j):
        t = (a * th + y // 2) * tw + z // 2
        return te.sum(_coef(AT, y % 2, ru) * _coef(AT, z % 2, rv) * mm[t, j // 4, ru * 4 + rv, j % 4], axis=[ru, rv])

    ysum = te.compute((n, oh, ow, npad), y4, name="Y")
    biased = te.compute((n, oh, ow, npad), lambda *i: (ysum(*i) >> tirx.const(2, "int32")) + bt[i[-1]], name="biased")
    lo, hi = rq.act

    out4 = te.compute((n, oh, ow, npad), lambda *i: fp.clamp_int8_32(fp.mbqm32_neon(
        biased(*i), mt[i[-1]], rt_[i[-1]]) + tirx.const(rq.out_zp, "int32"), lo, hi), name="out4")
    # the (M, COpad) view the GEMMs return: one int8 copy (the region analysis cannot split a flat pixel index)
    out = te.compute((m, npad), lambda i, j: out4[i // (oh * ow), i // ow % oh, i % ow, j], name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, ut, bt, mt, rt_, out]))
    _schedule(sch)
    return finish(sch, name), up, npad


def _schedule(sch) -> None:
    """V: per (p, tile block), the 4x4 taps unrolled; M: p, tile block, channel block, the smlal 8x8
    step over CI; out: pixels in parallel, 4 channels a vector, the 16 terms unrolled."""
    vb, ab, mb = sch.get_sblock("V"), sch.get_sblock("acc"), sch.get_sblock("M")
    yb, bb, ob = sch.get_sblock("Y"), sch.get_sblock("biased"), sch.get_sblock("out4")
    b, p, k, i, r, c = sch.get_loops(vb)
    sch.reorder(b, k, p, r, c, i)  # p inside k: the 16 taps' loads shared by the 16 positions
    sch.unroll(p)
    sch.unroll(r)
    sch.unroll(c)
    sch.vectorize(i)
    sch.parallel(b)
    sch.decompose_reduction(vb, r)
    t, q, p, lane = sch.get_loops(mb)
    to, ti = sch.split(t, [None, TR])
    jo, jq = sch.split(q, [None, NR // 4])
    sch.reorder(to, jo, p, ti, jq, lane)  # a tile block's V (16 x 8 x CI) reused by every channel block
    sch.parallel(to)
    sch.compute_at(ab, p)
    sch.set_scope(ab, 0, "local")
    ti2, ji2, rk = sch.get_loops(ab)[-3:]
    sch.reorder(rk, ti2, ji2)
    sch.decompose_reduction(ab, rk)
    _register_intrin()
    sch.tensorize(ti2, SMLAL_8x8)
    sch.vectorize(sch.get_loops(mb)[-1])
    fi, fj = sch.get_loops(sch.get_sblock("out"))
    sch.parallel(fi)
    sch.vectorize(sch.split(fj, [None, NR])[1])
    a, y, z, j = sch.get_loops(ob)
    yo, ya = sch.split(y, [None, 2])
    zo, zb = sch.split(z, [None, 2])
    jo, ji = sch.split(j, [None, 4])
    sch.reorder(a, yo, zo, jo, ya, zb, ji)
    sch.parallel(sch.fuse(a, yo))
    for blk in (bb, yb):
        sch.compute_at(blk, jo)
        sch.set_scope(blk, 0, ACC_SCOPE)
    sch.unroll(ya)
    sch.unroll(zb)
    sch.vectorize(ji)
    schedule_output_tile(sch, bb, yb)


def schedule_output_tile(sch, bb, yb) -> None:
    """The output transform of one 2x2 tile under its channel-vector loop: the biased block's rows unrolled
    and its lanes vectorized, Y = A^T M A's reduction unrolled with the lanes innermost (shared by the
    whole-tensor and the blocked schedule)."""
    bl = sch.get_loops(bb)[-3:]
    sch.unroll(bl[0])
    sch.unroll(bl[1])
    sch.vectorize(bl[2])
    ly, lz, lj, lu, lv = sch.get_loops(yb)[-5:]
    sch.reorder(ly, lz, lu, lv, lj)
    for lp in (ly, lz, lu, lv):
        sch.unroll(lp)
    sch.vectorize(lj)
    sch.decompose_reduction(yb, lu)
    sch.vectorize(sch.get_loops(sch.get_sblock("Y_init"))[-1])


@register_candidates("int8.gemm8")
def _candidates(workload: dict) -> list[str]:
    """Offered wherever it applies; compile/choice keeps it only where the model prices it cheaper."""
    kh, kw, _, _ = workload["w"]
    a, (oh, ow) = workload["x"][0], workload["out_hw"]
    return [SCHEDULE] if applies(kh, kw, workload["stride"], workload["dilation"], a * -(-oh // 2) * -(-ow // 2)) else []

