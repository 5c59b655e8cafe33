"""int8 convolution / dense as a register-tiled GEMM: int16 operands, int32 accumulators, fused requantize.

The float kernels got fast from a `mr` pixels x `nr` channels block of accumulators held in vector
registers over the whole reduction, weights pre-packed so each step reads contiguous vectors, and a
padded tail tile (clamped reads, guarded stores). This is the same kernel for integers:

- A is the im2col view of the NHWC input (rows = output pixels, columns = (ky, kx, c)), widened to
  int16 once per row tile into a small buffer (padding taps filled with the input zero point, which the
  folded bias cancels exactly as TFLite skips them); for a 1x1 stride-1 conv it is a plain widening copy.
- Weights are packed in numpy at compile time: int8 (the package holds 1 byte a weight; x86's pair
  step widens them with vpmovsxbw, the vectorized < 8 row tile with sshll), int16 only for the NEON
  by-lane tile, which gemm_int8_smull_neon.py's 8-bit kernel replaces wherever it applies (weights in [-127, 127],
  >= 4 rows).
- x86 (AVX2): channels in pairs, W (CO/nr, KH, KW, CI/2, nr, 2), and the step is `vpmaddwd`: the pair
  (a[c], a[c+1]) broadcast as one int32 times 8 channels' weight pairs gives 8 int32 partial sums, two
  products each (|a*w| <= 2^14, so exact). TVM does not find pmaddwd itself: the 8x2 step is a tensor
  intrinsic (`llvm.x86.avx2.pmadd.wd`). CI is padded to even with zero weights.
- aarch64 (NEON, the A53 has no sdot): W (CO/8, KH, KW, CI, 8), a tile of 8 pixels x 8 channels, and A
  stored k-major per tile (the 8 pixels' values of one k side by side), so one k step is two q loads and
  16 `smlal`/`smlal2 v.4s, w, a.h[i]` by element: the 8x8 step is a tensor intrinsic whose body splats
  lane i with a shuffle (left to itself, LLVM emits an ld1r plus an address add per pixel instead:
  37 instructions per 96 MACs, against 18 per 64). Fewer than 8 rows: 6x16 vectorized over channels.
- Epilogue per output: + bias (zero-point cross term folded in) in its own block, so that the sum stays
  one int32 (inlined, TVM's simplifier rewrote int64(acc + bias) as int64(acc) + int64(bias), and LLVM
  then could not use the 32x32->64 vpmuldq / smull), then 32-bit fixed-point requantize
  (fixedpoint.mbqm32, one widening multiply), + output zero point, clamp, int8 store.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx
from tvm.script import tirx as T

from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.ops.common import ACC_SCOPE, Simd, finish, pick_tile, round_up

PMADDWD_8x2 = "edge_int16_pmaddwd_8x2_w8"


@T.prim_func(s_tir=True)
def _pmaddwd_desc(a: T.Buffer((2,), "int16", offset_factor=1), b: T.Buffer((8, 2), "int8", offset_factor=1),
                  c: T.Buffer((8,), "int32", offset_factor=1)) -> None:
    with T.sblock("root"):
        T.reads(c[0:8], a[0:2], b[0:8, 0:2])
        T.writes(c[0:8])
        for i in T.serial(0, 8):
            for k in T.serial(0, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _pmaddwd_impl(a: T.Buffer((2,), "int16", offset_factor=1), b: T.Buffer((8, 2), "int8", offset_factor=1),
                  c: T.Buffer((8,), "int32", offset_factor=1)) -> None:
    with T.sblock("root"):
        T.reads(c[0:8], a[0:2], b[0:8, 0:2])
        T.writes(c[0:8])
        # the pair inline (a named `pair = ...` became a 4-byte buffer from TVMBackendAllocWorkspace per row tile)
        c[T.ramp(T.int32(0), 1, 8)] = c[T.ramp(T.int32(0), 1, 8)] + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"),
            T.reinterpret(T.broadcast(T.reinterpret(a.vload([0], "int16x2"), dtype="int32"), 8), dtype="int16x16"),
            T.Cast("int16x16", b.vload([0, 0], dtype="int8x16")),
            dtype="int32x8")


SMLAL_8x8 = "edge_int16_smlal_lane_8x8"


@T.prim_func(s_tir=True)
def _smlal_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (8,), "int16", offset_factor=1)
    B = T.match_buffer(b, (8,), "int16", offset_factor=1)
    s0 = T.int32()
    C = T.match_buffer(c, (8, 8), "int32", offset_factor=1, scope="local", strides=[s0, 1])
    with T.sblock("root"):
        T.reads(C[0:8, 0:8], A[0:8], B[0:8])
        T.writes(C[0:8, 0:8])
        for i, j in T.grid(8, 8):
            with T.sblock("update"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi]) * T.Cast("int32", B[vj])


@T.prim_func(s_tir=True)
def _smlal_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, (8,), "int16", offset_factor=1)
    B = T.match_buffer(b, (8,), "int16", offset_factor=1)
    s0 = T.int32()
    C = T.match_buffer(c, (8, 8), "int32", offset_factor=1, scope="local", strides=[s0, 1])
    with T.sblock("root"):
        T.reads(C[0:8, 0:8], A[0:8], B[0:8])
        T.writes(C[0:8, 0:8])
        av = A.vload([0], "int16x8")
        bv = T.Cast("int32x8", B.vload([0], "int16x8"))
        C[0, T.ramp(T.int32(0), 1, 8)] = C[0, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [0, 0, 0, 0, 0, 0, 0, 0])) * bv
        C[1, T.ramp(T.int32(0), 1, 8)] = C[1, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [1, 1, 1, 1, 1, 1, 1, 1])) * bv
        C[2, T.ramp(T.int32(0), 1, 8)] = C[2, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [2, 2, 2, 2, 2, 2, 2, 2])) * bv
        C[3, T.ramp(T.int32(0), 1, 8)] = C[3, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [3, 3, 3, 3, 3, 3, 3, 3])) * bv
        C[4, T.ramp(T.int32(0), 1, 8)] = C[4, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [4, 4, 4, 4, 4, 4, 4, 4])) * bv
        C[5, T.ramp(T.int32(0), 1, 8)] = C[5, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [5, 5, 5, 5, 5, 5, 5, 5])) * bv
        C[6, T.ramp(T.int32(0), 1, 8)] = C[6, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [6, 6, 6, 6, 6, 6, 6, 6])) * bv
        C[7, T.ramp(T.int32(0), 1, 8)] = C[7, T.ramp(T.int32(0), 1, 8)] + T.Cast("int32x8", T.Shuffle([av], [7, 7, 7, 7, 7, 7, 7, 7])) * bv


def _register_intrin() -> None:
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(PMADDWD_8x2, allow_missing=True) is None:
        TensorIntrin.register(PMADDWD_8x2, _pmaddwd_desc, _pmaddwd_impl)
    if TensorIntrin.get(SMLAL_8x8, allow_missing=True) is None:
        TensorIntrin.register(SMLAL_8x8, _smlal_desc, _smlal_impl)


def uses_pairs(simd: Simd) -> bool:
    return simd.isa in ("avx2", "avx512")


def tile_of(simd: Simd, m: int) -> tuple[int, int]:
    """(mr, nr): x86 6 pixels x 16 channels (12 ymm accumulators of 16); NEON 8 x 8 (16 q accumulators,
    the by-lane intrinsic). A lone row takes wider nr."""
    if m == 1:
        return 1, 64
    if not uses_pairs(simd) and m >= 8:
        return 8, 8
    return pick_tile(m, 6), 16


def pack_weight(w_hwio: np.ndarray, nr: int, *, pairs: bool, dtype=None) -> np.ndarray:
    """(KH, KW, CI, CO) int8 -> (CO/nr, KH, KW, CI/2, nr, 2) with pairs, else (CO/nr, KH, KW, CI, nr);
    CO padded to nr and (pairs) CI to even, with zero weights. dtype: int8 with pairs (widened by
    vpmovsxbw in the step), int16 otherwise (the by-lane smlal step reads int16) unless given."""
    kh, kw, ci, co = w_hwio.shape
    cip, cop = (round_up(ci, 2) if pairs else ci), round_up(co, nr)
    w = np.zeros((kh, kw, cip, cop), dtype or (np.int8 if pairs else np.int16))
    w[:, :, :ci, :co] = w_hwio
    w = w.reshape(kh, kw, cip, cop // nr, nr)
    if pairs:
        return np.ascontiguousarray(w.reshape(kh, kw, cip // 2, 2, cop // nr, nr).transpose(4, 0, 1, 2, 5, 3))
    return np.ascontiguousarray(w.transpose(3, 0, 1, 2, 4))


@dataclass(frozen=True)
class ConvGeom:
    """A conv's resolved window for the int8 kernels: strides, dilation, (top, bottom, left, right) pads and
    the output (OH, OW). The default (out_hw None) is a dense layer: no window."""

    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    out_hw: tuple[int, int] | None = None


DENSE = ConvGeom()


@dataclass(frozen=True)
class GemmTile:
    """How schedule() tiles a GEMM: an mr x nr register tile over m rows and npad channels, a k-long
    reduction over the `red` loops; pairs: x86 pmaddwd steps; lanes: the NEON by-lane smlal step on a
    k-major A; widen_vec: the int16 copy of A is a plain vectorizable widening copy."""

    mr: int
    nr: int
    m: int
    k: int
    npad: int
    red: tuple[int, ...]
    pairs: bool
    widen_vec: bool
    lanes: bool = False


def _a16(x, kdims, geom: ConvGeom, in_zp: int, *, mr: int, kmajor: bool):
    """The int16 im2col view A[i, (ky, kx, c)] of x as a function (i, ky, kx, c), over a buffer of padded rows
    (k-major per tile for the NEON by-lane step); padding taps read the zero point, the CI pad 0."""
    kh, kw, ci, cip = kdims
    dense = len(x.shape) == 2
    if dense:
        m = int(x.shape[0])
    else:
        n, h, w_, _ = (int(d) for d in x.shape)
        oh, ow = geom.out_hw
        m = n * oh * ow
    mp = round_up(m, mr)
    (sh, sw), (dh, dw) = geom.stride, geom.dilation
    pt, _, pl, _ = geom.pads
    zp16 = tirx.const(in_zp, "int16")

    def a16(i, ry, rx, c):
        i = te.min(i, m - 1) if mp != m else i
        if dense:
            val = x[i, c]
            return val.astype("int16") if cip == ci else tirx.if_then_else(c < ci, val.astype("int16"),
                                                                          tirx.const(0, "int16"))
        a, y, z = i // (oh * ow), i // ow % oh, i % ow
        yy, xx = y * sh + ry * dh - pt, z * sw + rx * dw - pl
        conds = []
        if any(geom.pads):
            conds += [yy >= 0, yy < h, xx >= 0, xx < w_]
        if cip != ci:
            conds.append(c < ci)
        val = x[a, yy, xx, c].astype("int16")
        return tirx.if_then_else(tirx.all(*conds), val, zp16) if conds else val

    if kmajor:
        a_t = te.compute((mp // mr, kh, kw, cip, mr), lambda io, y, z, c, ii: a16(io * mr + ii, y, z, c), name="a16")
        return lambda i, y, z, c: a_t[i // mr, y, z, c, i % mr]
    a_t = te.compute((mp, kh, kw, cip), a16, name="a16")
    return lambda i, y, z, c: a_t[i, y, z, c]


def _accumulate(a, wt, kdims, *, shape: tuple[int, int], nr: int, pairs: bool):
    """acc (MPAD, NPAD) int32 = A @ W over (ky, kx, c), and the reduction loops' extents."""
    kh, kw, ci, cip = kdims
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    if pairs:
        rp, rt = te.reduce_axis((0, cip // 2), "rp"), te.reduce_axis((0, 2), "rt")
        acc = te.compute(shape, lambda i, j: te.sum(
            a(i, ry, rx, rp * 2 + rt).astype("int32") * wt[j // nr, ry, rx, rp, j % nr, rt].astype("int32"),
            axis=[ry, rx, rp, rt]), name="acc")
        return acc, (kh, kw, cip // 2, 2)
    rc = te.reduce_axis((0, ci), "rc")
    acc = te.compute(shape, lambda i, j: te.sum(
        a(i, ry, rx, rc).astype("int32") * wt[j // nr, ry, rx, rc, j % nr].astype("int32"),
        axis=[ry, rx, rc]), name="acc")
    return acc, (kh, kw, ci)


def conv_gemm(x_shape, w_hwio: np.ndarray, rq, *, geom: ConvGeom = DENSE, simd: Simd, name: str):
    """PrimFunc out (M, COpad) int8 = requant(im2col(x) @ W + bias); x NHWC (N,H,W,CI) or (M, K) for dense.

    rq: a quant.int8.Requant (its in_zp, out_zp and act; the multiplier and shift are arguments).
    Returns (func, packed weight, npad). Arguments: x, W, bias, mult, rshift (int32, (npad,)).
    """
    kh, kw, ci, co = w_hwio.shape
    pairs = uses_pairs(simd)
    m = x_shape[0] if len(x_shape) == 2 else x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    mr, nr = tile_of(simd, m)
    nr = min(nr, round_up(co, 16))  # a lone row over few channels (a classifier): less padding
    npad, mp = round_up(co, nr), round_up(m, mr)
    cip = round_up(ci, 2) if pairs else ci
    kmajor = not pairs and mr == 8 and nr == 8 and kh * kw * ci > 1  # NEON by-lane tile (see module doc)
    x = te.placeholder(tuple(x_shape), "int8", name="x")
    a = _a16(x, (kh, kw, ci, cip), geom, rq.in_zp, mr=mr, kmajor=kmajor)
    wp = pack_weight(w_hwio, nr, pairs=pairs, dtype=np.int16 if kmajor else np.int8)
    wt = te.placeholder(wp.shape, str(wp.dtype), name="w")
    bt, mt, rt_ = (te.placeholder((npad,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))
    acc, red = _accumulate(a, wt, (kh, kw, ci, cip), shape=(mp, npad), nr=nr, pairs=pairs)
    lo, hi = rq.act
    biased = te.compute((mp, npad), lambda i, j: acc[i, j] + bt[j], name="biased")
    out = te.compute((m, npad), lambda i, j: fp.clamp_int8_32(
        fp.mbqm32(biased[i, j], mt[j], rt_[j]) + tirx.const(rq.out_zp, "int32"), lo, hi), name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, mt, rt_, out]))
    widen_vec = (kh, kw) == (1, 1) and cip == ci and not any(geom.pads) and not kmajor
    schedule(sch, GemmTile(mr, nr, m, kh * kw * cip, npad, red, pairs, widen_vec, lanes=kmajor))
    return finish(sch, name), wp, npad


def _loops_by_extent(sch, block, n_outer: int, extents: list[int]):
    """The loops of `block` below the first n_outer, matched to `extents` (compute_at drops unit loops;
    a dropped loop maps to None)."""
    inner = list(sch.get_loops(block)[n_outer:])
    out = []
    for e in extents:
        out.append(inner.pop(0) if e > 1 else None)
    assert not inner, "unexpected loop structure"
    return out


def place_a_copy(sch, ab, outer, *, weights_outer: bool, vec: bool) -> None:
    """The widened copy of A (int16 here, u8 in x86_vnni): per row tile (reused by every channel tile) at
    the outer row loop, or whole, rows in parallel, when the weights are outer; vectorized if `vec`."""
    if weights_outer:
        sch.parallel(sch.get_loops(ab)[0])
    else:
        sch.compute_at(ab, outer[0])
    if vec:
        sch.vectorize(sch.get_loops(ab)[-1])


def schedule(sch, tile: GemmTile):
    """The GEMM's schedule (module doc); the integer stem's row-tiled GEMM (bitserial/stem.py) uses it too."""
    mr, nr, m, k, npad, pairs = tile.mr, tile.nr, tile.m, tile.k, tile.npad, tile.pairs
    ab, cb, ob = sch.get_sblock("a16"), sch.get_sblock("acc"), sch.get_sblock("out")
    bb = sch.get_sblock("biased")
    i, j = sch.get_loops(ob)
    mo, mi = sch.split(i, [None, mr])
    no, ni = sch.split(j, [None, nr])
    weights_outer = k * npad > m * k  # keep the bigger operand's panel in cache
    outer = [no, mo] if weights_outer else [mo, no]
    sch.reorder(*outer, mi, ni)
    # x86: the accumulator tile in ACC_SCOPE (a stack alloca LLVM keeps in registers); "local" made it a
    # TVMBackendAllocWorkspace per row tile, the 12 accumulators then round-tripping through memory
    scope = ACC_SCOPE if pairs else "local"
    for blk in (bb, cb):
        sch.compute_at(blk, outer[1])
        sch.set_scope(blk, 0, scope)
    bl = sch.get_loops(bb)[2:]
    if mr > 1:
        sch.unroll(bl[0])
    sch.vectorize(bl[-1])
    place_a_copy(sch, ab, outer, weights_outer=weights_outer, vec=tile.widen_vec)
    sch.parallel(outer[0])
    if mr > 1:
        sch.unroll(mi)
    sch.vectorize(ni)
    ci_, cj, *rloops = _loops_by_extent(sch, cb, 2, [mr, nr, *tile.red])
    if pairs:
        *rl, rt = rloops
        rl = [lp for lp in rl if lp is not None]
        cjo, cji = sch.split(cj, [None, 8])
        sch.reorder(*rl, *[lp for lp in (ci_, cjo, cji, rt) if lp is not None])
        for lp in (ci_, cjo):
            if lp is not None:
                sch.unroll(lp)
        if rl:
            sch.decompose_reduction(cb, rl[0])
        else:
            sch.decompose_reduction(cb, ci_ if ci_ is not None else cjo)
        _register_intrin()
        sch.tensorize(cji, PMADDWD_8x2)
    else:
        rl = [lp for lp in rloops if lp is not None]
        sch.reorder(*rl, *[lp for lp in (ci_, cj) if lp is not None])
        if tile.lanes:
            sch.decompose_reduction(cb, rl[0])
            _register_intrin()
            sch.tensorize(ci_, SMLAL_8x8)
        else:
            if ci_ is not None:
                sch.unroll(ci_)
            sch.vectorize(cj)
            if rl:
                sch.decompose_reduction(cb, rl[0])
