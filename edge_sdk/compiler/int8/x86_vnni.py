"""int8 convolution / dense GEMM on x86 with VNNI: one u8 x s8 `vpdpbusd` per 4 multiply-adds x 16 (or 8) lanes.

Where the compile target's CPU has AVX-512 VNNI (Intel Ice Lake server and later, AMD Zen 4: zmm, 16 int32
lanes) or AVX-VNNI (Alder Lake and later without AVX-512: ymm, 8 lanes), this replaces the int16 pair step
of gemm_int8_widen16.py (`vpmaddwd`, 2 multiply-adds per int32 lane, which LLVM fuses into `vpdpwssd` on a
VNNI CPU) by `vpdpbusd`: 4 byte products per int32 lane, summed into the accumulator, wrapping. Selected by
the target's features (Simd.vnni, read from its -mcpu / -mattr by ops.common.simd_of), never by the build
machine's: a package compiled for a Zen 3 (AVX2 only) keeps the pmaddwd kernel.

The activation offset. vpdpbusd multiplies an *unsigned* byte by a signed byte; activations are int8. With
u = x + 128 (in [0, 255]; x XOR 0x80 as a byte) the layer's integer sum over its K taps is

    sum_k (x_k - Z_in) w_k = sum_k (u_k - 128 - Z_in) w_k = sum_k u_k w_k - (128 + Z_in) * sum_k w_k,

so the kernel accumulates sum_k u_k w_k and the per-column constant -(128 + Z_in) * sum_k w_k goes into the
int32 bias at compile time (kernels._folded_bias gives the Z_in part, offset_correction the 128 part).
Padding taps read u = Z_in + 128 (the zero point, offset), as the int16 kernel reads Z_in. Exact: each
product is at most 255 * 128 in magnitude and a sum of K of them (K = KH*KW*CI <= 2^16 taps) stays inside
int32, and the accumulation wraps identically to the int32 arithmetic of the reference.

The tile: A is x as u8. A KxK conv reads its taps from the input padded once (u8, border Z_in + 128,
channels to a multiple of 4): one dword per tap and pixel, broadcast straight from it. A 1x1 conv (or a dense
layer) copies its rows per row tile (a plain XOR copy when stride 1 and unpadded). W is packed (CO/nr, KH, KW, CI/4, nr, 4) int8, CI padded to a multiple of 4 with zero weights (what the
padded taps of A then read does not matter). One k-step of 4 taps is a dword of A broadcast to all lanes
(`vpbroadcastd`) and one vpdpbusd per nr/lanes weight vectors, mr x nr/lanes accumulators: AVX-512 12 rows
x 32 channels (24 zmm of 32; 6 rows for 64 <= K <= 256, tile_of), AVX-VNNI 6 x 16 (12 ymm of 16). Epilogue:
x86_requant's tensorized vector (+ bias in int32, TFLite's exact requantize with even / odd vpmuldq, + Z_out,
clamp, int8) into a whole int8 tile, whose valid rows are then stored.
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx
from tvm.script import tirx as T

from edge_sdk.compiler.int8 import x86_requant
from edge_sdk.compiler.int8.gemm_int8_widen16 import DENSE, ConvGeom, GemmTile, place_a_copy
from edge_sdk.compiler.ops.common import ACC_SCOPE, Simd, finish, pick_tile, round_up

OFFSET = 128  # s8 -> u8: u = x + 128
VPDPBUSD = {16: ("edge_u8s8_vpdpbusd_16x4", "llvm.x86.avx512.vpdpbusd.512"),
            8: ("edge_u8s8_vpdpbusd_8x4", "llvm.x86.avx512.vpdpbusd.256")}  # AVX-VNNI shares the 256-bit one
MR_MAX = {16: 12, 8: 6}  # rows of the register tile: 2 x mr accumulators of 32 zmm / 16 ymm


def applies(simd: Simd) -> bool:
    """Whether the target has a u8 x s8 dot step (AVX-512 VNNI or AVX-VNNI)."""
    return simd.vnni in VPDPBUSD


def offset_correction(w_hwio: np.ndarray) -> np.ndarray:
    """-128 * sum_k w[k, o] per output channel (int64): what the u8 offset adds to each accumulator."""
    return -OFFSET * w_hwio.reshape(-1, w_hwio.shape[-1]).astype(np.int64).sum(0)


def _intrin(lanes: int):
    """(desc, impl) of c[lanes] int32 += sum_k a[k] (u8) * b[lanes, k] (s8) over k < 4."""
    nbytes = 4 * lanes
    llvm_name = VPDPBUSD[lanes][1]

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((lanes, 4), "int8", offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:4], b[0:lanes, 0:4])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((4,), "uint8", offset_factor=1), b: T.Buffer((lanes, 4), "int8", offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:4], b[0:lanes, 0:4])
            T.writes(c[0:lanes])
            # LLVM 22's signature: (<N x i32> acc, <4N x i8> u8 operand, <4N x i8> s8 operand)
            c[T.ramp(T.int32(0), 1, lanes)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(llvm_name), c[T.ramp(T.int32(0), 1, lanes)],
                T.reinterpret(T.broadcast(T.reinterpret(a.vload([0], "uint8x4"), dtype="int32"), lanes),
                              dtype=f"uint8x{nbytes}"),
                b.vload([0, 0], dtype=f"int8x{nbytes}"), dtype=f"int32x{lanes}")

    return desc, impl


def _register(lanes: int) -> str:
    from tvm.s_tir import TensorIntrin

    name = VPDPBUSD[lanes][0]
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, *_intrin(lanes))
    return name


def pack_weight(w_hwio: np.ndarray, nr: int) -> np.ndarray:
    """(KH, KW, CI, CO) int8 -> (CO/nr, KH, KW, CI/4, nr, 4), CO padded to nr and CI to 4 with zero weights."""
    kh, kw, ci, co = w_hwio.shape
    cip, cop = round_up(ci, 4), round_up(co, nr)
    w = np.zeros((kh, kw, cip, cop), np.int8)
    w[:, :, :ci, :co] = w_hwio
    w = w.reshape(kh, kw, cip // 4, 4, cop // nr, nr)
    return np.ascontiguousarray(w.transpose(4, 0, 1, 2, 5, 3))


HALF_TILE_K = (64, 256)  # reduction lengths whose zmm tile is 6 rows, not 12 (tile_of)


def tile_of(lanes: int, m: int, k: int = 0) -> tuple[int, int]:
    """(mr, nr): mr rows x 2 vectors of channels; a lone row (a 1x1 output) 4 vectors wide.

    zmm with 64 <= K <= 256 taps: 6 rows (12 accumulators), not 12. The exact requantize of a 24-accumulator
    tile needs more than the 32 zmm (LLVM interleaves the rows' epilogues: 40 spill stores a tile in the
    objdump), and at these K the epilogue is 15-40 % of the layer. Measured on this Zen 4 (1x1, thread CPU
    ms, 12 vs 6 rows interleaved, two runs at load 28-30): 56x56x64->128 0.295/0.284 -> 0.265/0.258,
    56x56x128->128 0.432/0.440 -> 0.373/0.393, 28x28x128->256 0.209/0.204 -> 0.184/0.187, 28x28x256->256
    0.348/0.366 -> 0.324/0.316; outside the range it is not better: K = 32 (112x112x32->64) 0.437/0.499 ->
    0.508/0.700, K = 512/1024 within +-5 %."""
    if m == 1:
        return 1, 4 * lanes
    half = lanes == 16 and HALF_TILE_K[0] <= k <= HALF_TILE_K[1]
    return pick_tile(m, MR_MAX[lanes] // 2 if half else MR_MAX[lanes]), 2 * lanes


def _a8(x, kdims, geom: ConvGeom, in_zp: int, *, mr: int):
    """The u8 im2col view A[i, ky, kx, c] = x + 128 over padded rows; padding taps Z_in + 128, the CI pad 0."""
    kh, kw, ci, cip = kdims
    dense = len(x.shape) == 2
    if dense:
        m = int(x.shape[0])
    else:
        n, h, w_, _ = (int(d) for d in x.shape)
        oh, ow = geom.out_hw
        m = n * oh * ow
    (sh, sw), (dh, dw) = geom.stride, geom.dilation
    pt, _, pl, _ = geom.pads
    flip = tirx.const(OFFSET, "uint8")

    def a8(i, ry, rx, c):
        i = te.min(i, m - 1) if round_up(m, mr) != m else i
        conds = [c < ci] if cip != ci else []
        if dense:
            val = x[i, c]
        else:
            a, y, z = i // (oh * ow), i // ow % oh, i % ow
            yy, xx = y * sh + ry * dh - pt, z * sw + rx * dw - pl
            val = x[a, yy, xx, c]
            if any(geom.pads):
                pad_ok = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w_)
                val = tirx.if_then_else(pad_ok, val, tirx.const(in_zp, "int8"))
        u = tirx.reinterpret("uint8", val) ^ flip
        return tirx.if_then_else(tirx.all(*conds), u, tirx.const(0, "uint8")) if conds else u

    return te.compute((round_up(m, mr), kh, kw, cip), a8, name="a8")


def _padded_u8(x, geom: ConvGeom, in_zp: int, cip: int):
    """x + 128 as u8, padded once with Z_in + 128 and its channels to cip with 0: (N, H + pt + pb, W + pl + pr,
    cip). A KxK conv's taps then read it directly (one dword per tap and pixel, no guards, no im2col copy)."""
    n, h, w_, ci = (int(d) for d in x.shape)
    pt, pb, pl, pr = geom.pads
    flip, zp = tirx.const(OFFSET, "uint8"), tirx.const((in_zp + OFFSET) % 256, "uint8")

    def u8(a, y, z, c):
        inside = [y >= pt, y < h + pt, z >= pl, z < w_ + pl] if any(geom.pads) else []
        safe = x[a, te.min(te.max(y - pt, 0), h - 1), te.min(te.max(z - pl, 0), w_ - 1), te.min(c, ci - 1)] \
            if inside or cip != ci else x[a, y, z, c]
        val = tirx.reinterpret("uint8", safe) ^ flip
        if inside:
            val = tirx.if_then_else(tirx.all(*inside), val, zp)
        return tirx.if_then_else(c < ci, val, tirx.const(0, "uint8")) if cip != ci else val

    return te.compute((n, h + pt + pb, w_ + pl + pr, cip), u8, name="xu")


def _tap_reader(x, kdims, geom: ConvGeom, in_zp: int, *, mr: int):
    """A(i, ky, kx, c): u8 operand of row i (output pixel) and tap (ky, kx, c); the padded input for a KxK
    conv, else the per-row-tile copy of _a8 (a 1x1 conv's rows are its input's pixels)."""
    kh, kw, ci, cip = kdims
    if len(x.shape) == 2 or (kh, kw) == (1, 1):
        a = _a8(x, kdims, geom, in_zp, mr=mr)
        return lambda i, ry, rx, c: a[i, ry, rx, c]
    xu = _padded_u8(x, geom, in_zp, cip)
    oh, ow = geom.out_hw
    m = int(x.shape[0]) * oh * ow
    (sh, sw), (dh, dw) = geom.stride, geom.dilation

    def read(i, ry, rx, c):
        i = te.min(i, m - 1) if round_up(m, mr) != m else i
        return xu[i // (oh * ow), i // ow % oh * sh + ry * dh, i % ow * sw + rx * dw, c]

    return read


def conv_gemm(x_shape, w_hwio: np.ndarray, rq, *, geom: ConvGeom = DENSE, simd: Simd, name: str):
    """PrimFunc out (M, COpad) int8 = requant(im2col(x) @ W + bias), as gemm_int8_widen16.conv_gemm (same
    arguments x, W, bias, mult, rshift and result (func, packed weight, npad)); the bias must include
    offset_correction(w_hwio) besides the zero point's term."""
    lanes = simd.vnni
    kh, kw, ci, co = w_hwio.shape
    m = x_shape[0] if len(x_shape) == 2 else x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    mr, nr = tile_of(lanes, m, kh * kw * round_up(ci, 4))
    nr = min(nr, round_up(co, lanes))  # few channels (a classifier): less padding
    npad, mp, cip = round_up(co, nr), round_up(m, mr), round_up(ci, 4)
    x = te.placeholder(tuple(x_shape), "int8", name="x")
    a = _tap_reader(x, (kh, kw, ci, cip), geom, rq.in_zp, mr=mr)
    wp = pack_weight(w_hwio, nr)
    wt = te.placeholder(wp.shape, "int8", name="w")
    bt, mt, rt_ = (te.placeholder((npad,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    rp, rt = te.reduce_axis((0, cip // 4), "rp"), te.reduce_axis((0, 4), "rt")
    acc = te.compute((mp, npad), lambda i, j: te.sum(
        a(i, ry, rx, rp * 4 + rt).astype("int32") * wt[j // nr, ry, rx, rp, j % nr, rt].astype("int32"),
        axis=[ry, rx, rp, rt]), name="acc")
    lo, hi = rq.act
    # the requantized tile whole (no tail predicate, which tensorize refuses), then its valid rows stored
    r1 = x86_requant.rounding_of(rq.shift)  # rshift holds x86_requant.rshift_arg(shift)
    q = te.compute((mp, npad), lambda i, j: x86_requant.epilogue(acc[i, j] + bt[j], mt[j], rt_[j], rq.out_zp, lo, hi,
                                                                  r_minus_1=r1), name="q")
    out = te.compute((m, npad), lambda i, j: q[i, j], name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, mt, rt_, out]))
    copy_vec = (kh, kw) == (1, 1) and cip == ci and not any(geom.pads)
    _schedule(sch, GemmTile(mr, nr, m, kh * kw * cip, npad, (kh, kw, cip // 4, 4), False, copy_vec), lanes,
              x86_requant.register(lanes, rq.out_zp, lo, hi, r_minus_1=r1))
    return finish(sch, name), wp, npad


def _schedule(sch, tile: GemmTile, lanes: int, requant: str):
    """mr x nr register tile over (row tile, channel tile), the bigger operand's panel outer; the u8 copy of
    A per row tile (or whole, when the weights are outer; widen_vec: a vectorized copy); the 4-tap step
    tensorized to vpdpbusd, the epilogue's vectors to x86_requant's `requant`."""
    mr, nr, m, k, npad, red = tile.mr, tile.nr, tile.m, tile.k, tile.npad, tile.red
    cb, qb, ob = (sch.get_sblock(b) for b in ("acc", "q", "out"))
    i, j = sch.get_loops(ob)
    mo, mi = sch.split(i, [None, mr])
    no, ni = sch.split(j, [None, nr])
    weights_outer = k * npad > m * k
    outer = [no, mo] if weights_outer else [mo, no]
    sch.reorder(*outer, mi, ni)
    for blk in (qb, cb):  # registers: ACC_SCOPE (see ops.common), a stack alloca LLVM promotes
        sch.compute_at(blk, outer[1])
        sch.set_scope(blk, 0, ACC_SCOPE)
    q_vec = _by_vector(sch, sch.get_loops(qb)[2:], mr, lanes, vec=False)  # tensorized at the end
    if _has_block(sch, "xu"):  # a KxK conv: its padded u8 input, whole, rows in parallel
        xl = sch.get_loops(sch.get_sblock("xu"))
        sch.parallel(sch.fuse(xl[0], xl[1]))
    else:
        place_a_copy(sch, sch.get_sblock("a8"), outer, weights_outer=weights_outer, vec=tile.widen_vec)
    sch.parallel(outer[0])
    _by_vector(sch, [mi, ni], mr, lanes)
    inner = list(sch.get_loops(cb)[2:])  # compute_at dropped unit loops
    ci_ = inner.pop(0) if mr > 1 else None
    cj = inner.pop(0)
    rl = [inner.pop(0) for e in red[:3] if e > 1]
    rt = inner.pop(0)
    assert not inner, "unexpected loop structure"
    cjo, cji = sch.split(cj, [None, lanes])
    sch.reorder(*rl, *[lp for lp in (ci_, cjo, cji, rt) if lp is not None])
    for lp in (ci_, cjo):
        if lp is not None:
            sch.unroll(lp)
    init = sch.decompose_reduction(cb, rl[0] if rl else (ci_ if ci_ is not None else cjo))
    il = sch.get_loops(init)[2:]
    for lp in il[:-1]:
        sch.unroll(lp)
    if il:
        sch.vectorize(il[-1])
    sch.tensorize(cji, _register(lanes))
    sch.tensorize(q_vec, requant)


def _by_vector(sch, loops, mr: int, lanes: int, *, vec: bool = True):
    """A tile's (row, channel) loops: rows unrolled, channels as unrolled vectors of the accumulators' width.
    Every access to the tile is then one accumulator vector and LLVM's SROA keeps the tile in registers; a
    2-vector-wide epilogue read left it a stack array, zeroed by a 1.5 KB memset per tile (the reduction's
    init) and stored back after the k loop. The init's loops are vectorized too (serial, LLVM made them the
    memset again)."""
    *rows, col = loops  # compute_at drops a unit row loop (mr = 1)
    if mr > 1:
        sch.unroll(rows[0])
    co, ci = sch.split(col, [None, lanes])
    sch.unroll(co)
    if not vec and mr > 1:  # the epilogue: one channel vector's constants live at a time, down its rows
        sch.reorder(co, rows[0])
    if vec:
        sch.vectorize(ci)
    return ci


def _has_block(sch, name: str) -> bool:
    from tvm.s_tir.schedule import ScheduleError

    try:
        sch.get_sblock(name)
    except ScheduleError:
        return False
    return True
