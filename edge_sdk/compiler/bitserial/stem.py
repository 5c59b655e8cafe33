"""The integer stem of a bitserial network: float image -> int8 -> int8 conv -> a-bit codes -> pool -> packed.

    emit_int8_stem(bb, x, net, *, simd, word, out="packed"|"codes"|"values") -> (relax var, {var: row})

Numerics are quant/bitserial_net_ref.py's (stem_codes), the model's are models/binarized.py's (Stem):
1. quantize: round(x / in_scale) + in_zp, clamped to int8, as TFLite's QUANTIZE (quant.int8.quantize);
   our own kernel, vectorized over each image row (the int8 backend's glue.quantize is scalar).
2. conv: the int8 backend's conv as its own stems run it (compiler/int8/kernels.conv2d: on aarch64 the
   pre-padded im2col rows and the 8-bit A53 tile, gemm_int8_a53_ldr64; VNNI / vpmaddwd on x86) with its
   fused epilogue bias + fixed-point requantize + clamp; zero point 0 and clamp [0, 2^a - 1] make its int8
   outputs the a-bit codes themselves.
3. pool + pack (one kernel, ours): max pool 3x3/2 on the int8 codes, then the bitpack of each output row
   from a row buffer. Pooling codes equals quantizing pooled values (the quantizer is monotone
   non-decreasing, see bitserial_net_ref.stem_codes); padded taps are skipped (codes >= 0, every window
   has a real pixel, so a 0 fill is the same). out="codes" writes int32 codes (the unfused graph packs
   them with its separate bitpack kernel and keeps them for the first shortcut), out="values" float32
   code * step (MobileNet's first depthwise conv reads values; it has no pool).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_sdk.errors import CompileError

STEM_THRESHOLDS = True  # the NEON stem's codes by threshold compares (False: the int8 backend's requantize)


def _quantized(v, zero_point: int):
    """TFLite's QUANTIZE of a float32 value onto the int8 grid, still in float32: round half away from zero
    (the int8 backend's rounding), plus the zero point, clamped to [-128, 127]."""
    from tvm import tirx

    from edge_sdk.compiler.int8.fixedpoint import round_half_away

    r = round_half_away(v) + tirx.const(float(zero_point), "float32")
    return tirx.max(tirx.min(r, tirx.const(127.0, "float32")), tirx.const(-128.0, "float32"))


def quantize_prim_func(shape, *, scale: float, zero_point: int, name: str):
    """float32 NHWC -> int8: TFLite's round half away from zero of x / scale, + zero point, clamp."""
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.ops.common import finish

    x = te.placeholder(tuple(shape), "float32", name="x")
    s32 = np.float32(scale)
    if np.frexp(s32)[0] == 0.5:  # a power of two (the stems' 2^-7): x * 2^k is x / scale exactly, and a vector
        inv = tirx.const(float(np.float32(1) / s32), "float32")  # fdiv holds the divider 14 cycles (a53.py)

        def f(*i):
            return _quantized(x(*i) * inv, zero_point).astype("int8")
    else:
        inv = tirx.const(float(s32), "float32")

        def f(*i):
            return _quantized(x(*i) / inv, zero_point).astype("int8")

    out = te.compute(tuple(shape), f, name="quantize")
    sch = s_tir.Schedule(te.create_prim_func([x, out]))
    n, h, w, c = sch.get_loops(sch.get_sblock("quantize"))
    sch.parallel(sch.fuse(n, h))
    wc = sch.fuse(w, c)
    lanes = next((v for v in (16, 8, 4) if (int(shape[2]) * int(shape[3])) % v == 0), 1)
    if lanes > 1:
        sch.vectorize(sch.split(wc, [None, lanes])[1])
    return finish(sch, name)


@dataclass(frozen=True)
class StemOut:
    """What the stem's pool kernel writes: "packed" (`bits` planes of `word`s), "codes" (int32) or
    "values" (float32 code * step)."""

    out: str
    bits: int
    word: str
    step: float


def _pooled(x, stem, *, grid, channels: int):
    """max pool (stem.pool 0: none) of the int8 codes x: (M, Cpad) GEMM rows of grid (N, H, W), or NHWC."""
    from tvm import te, tirx

    n, h, w = grid
    flat = len(x.shape) == 2
    at = (lambda a, y, z, c: x[(a * h + y) * w + z, c]) if flat else (lambda a, y, z, c: x[a, y, z, c])  # noqa: E731
    if not stem.pool:
        return te.compute((n, h, w, channels), lambda a, y, z, c: at(a, y, z, c), name="pool")
    pool, stride, (t, l, b, r) = stem.pool, stem.pool_stride, stem.pool_pad
    oh, ow = (h + t + b - pool) // stride + 1, (w + l + r - pool) // stride + 1

    def tap(a, y, z, c, ry, rx):  # a padded tap reads 0: codes are >= 0 and every window has a real pixel
        yy, xx = y * stride + ry - t, z * stride + rx - l
        conds = [v for v, need in ((yy >= 0, t), (yy < h, b), (xx >= 0, l), (xx < w, r)) if need]
        v = at(a, yy, xx, c)
        return tirx.if_then_else(tirx.all(*conds), v, tirx.const(0, "int8")) if conds else v

    def window(a, y, z, c):  # the taps unrolled: a spatial block, vectorized over channels
        v = tap(a, y, z, c, 0, 0)
        for ry in range(pool):
            for rx in range(pool):
                if ry or rx:
                    v = tirx.max(v, tap(a, y, z, c, ry, rx))
        return v

    return te.compute((n, oh, ow, channels), window, name="pool")


def _schedule_pool_out(sch, res, *, packed: bool, channels: int) -> None:
    """Rows in parallel; the pool (and the widen of a packed output) per row, vectorized over channels."""
    last = sch.get_sblock(res.op.name)
    la, ly, *_ = sch.get_loops(last)
    row = sch.fuse(la, ly)
    sch.parallel(row)
    lanes = 16 if channels % 16 == 0 else 8 if channels % 8 == 0 else 1
    pb = sch.get_sblock("pool")
    if packed:
        wb = sch.get_sblock("widen")
        sch.compute_at(wb, row)
        sch.compute_at(pb, row)
        _, _, wc = sch.get_loops(wb)
        if lanes > 1:
            sch.vectorize(sch.split(wc, [None, lanes])[1])
    else:
        _, lz, lc = sch.get_loops(last)
        sch.compute_at(pb, lz)
        if lanes > 1:
            sch.vectorize(sch.split(lc, [None, lanes])[1])
    if lanes > 1:
        sch.vectorize(sch.split(sch.get_loops(pb)[-1], [None, lanes])[1])


def _schedule_pool_pack_words(sch, dest: StemOut) -> None:
    """Whole words (C % word bits == 0): rows in parallel; per output pixel and word the pool of the word's
    channels (one int8 vector a tap), its bit planes as word lanes and bitpack.pack_intrin's vector shift
    and horizontal add. Why: the te.sum bitpack of the other path is a scalar loop, ~5 instructions a bit
    (ResNet18 224's stem: 1.2 of its 53.6 modelled M cycles in this kernel)."""
    from edge_sdk.compiler.bitserial.bitpack import TILE_SCOPE, pack_intrin

    pn, py, _px, pw, pb, pk = sch.get_loops(sch.get_sblock("pack"))
    sch.parallel(sch.fuse(pn, py))
    for blk in (sch.get_sblock("bits"), sch.get_sblock("pool")):
        sch.compute_at(blk, pw)
        sch.set_scope(blk, 0, TILE_SCOPE)
    sch.vectorize(sch.get_loops(sch.get_sblock("pool"))[-1])
    bl = sch.get_loops(sch.get_sblock("bits"))
    if dest.bits > 1:
        sch.unroll(bl[-2])
    sch.vectorize(bl[-1])
    if int(sch.get(pb).extent) > 1:
        sch.unroll(pb)
    sch.decompose_reduction(sch.get_sblock("pack"), pk)
    sch.tensorize(pk, pack_intrin(dest.word))


def pool_out_prim_func(codes_shape, stem, dest: StemOut, *, grid, channels: int, name: str):
    """int8 codes -> max pool (stem.pool, pool_stride, pool_pad; pool 0: none) -> what `dest` says.

    codes_shape: (M, Cpad) of the GEMM (rows = pixels of grid (N, H, W)) or (N, H, W, C).
    """
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.bitserial.bitpack import pack_planes
    from edge_sdk.compiler.bitserial.kernels import WORD_BITS, bitpack
    from edge_sdk.compiler.ops.common import finish

    x = te.placeholder(tuple(codes_shape), "int8", name="codes")
    pooled = _pooled(x, stem, grid=grid, channels=channels)
    if dest.out == "packed" and channels % WORD_BITS[dest.word] == 0:
        res = pack_planes(pooled, bits=dest.bits, word=dest.word)
        sch = s_tir.Schedule(te.create_prim_func([x, res]))
        _schedule_pool_pack_words(sch, dest)
        return finish(sch, name), tuple(int(d) for d in pooled.shape)
    if dest.out in ("packed", "codes"):
        res = te.compute(pooled.shape, lambda *i: pooled(*i).astype("int32"), name="widen")
        if dest.out == "packed":
            res = bitpack(res, bits=dest.bits, word=dest.word, name="pack")
    elif dest.out == "values":
        res = te.compute(pooled.shape, lambda *i: pooled(*i).astype("float32") * tirx.const(dest.step, "float32"),
                         name="widen")
    else:
        raise CompileError(f"integer stem: output '{dest.out}' is not 'packed', 'codes' or 'values'")
    sch = s_tir.Schedule(te.create_prim_func([x, res]))
    _schedule_pool_out(sch, res, packed=dest.out == "packed", channels=channels)
    return finish(sch, name), tuple(int(d) for d in pooled.shape)


def _conv(in_shape, s, rq, win, *, simd, a_bits: int):
    """(func, consts, out_shape) of the stem's conv onto codes: on NEON the 8-bit tile with threshold compares
    (stem_conv_codes_gemm8) where the requantize is monotone, else the int8 backend's conv (kernels.conv2d)."""
    from edge_sdk.compiler.bitserial import stem_conv_codes_gemm8 as codes8
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.int8.gemm_int8_widen16 import ConvGeom

    w_ohwi = np.ascontiguousarray(s.qweight.transpose(3, 0, 1, 2))
    kh, kw, ci, co = s.qweight.shape
    oh, ow, pads = win.place(in_shape, kh, kw)
    geom = ConvGeom(tuple(win.stride), tuple(win.dilation), pads, (oh, ow))
    levels = codes8.code_thresholds(s.mult, s.shift, a_bits) if simd.isa == "neon" else None
    if levels is None or not codes8.fits(in_shape, s.qweight, geom) or not STEM_THRESHOLDS:
        k = kernels.conv2d(in_shape, w_ohwi, s.qbias, rq, win, simd=simd, name="edge_stem_conv_i8")
        return k.func, k.consts, k.out_shape
    func, wp, npad = codes8.conv_codes_gemm8(in_shape, np.ascontiguousarray(s.qweight), geom, levels.shape[0],
                                             in_zp=int(s.in_zp), name="edge_stem_conv_i8")
    bias = np.zeros(npad, np.int32)
    bias[:co] = kernels._folded_bias(s.qbias, s.qweight.reshape(-1, co), s.in_zp, 0)
    t = np.full((levels.shape[0], npad), codes8.I32_MAX, np.int32)
    t[:, :co] = levels
    m = in_shape[0] * oh * ow
    return func, [wp, bias, t], (m, npad)


def emit_int8_stem(bb, x, net, *, simd, word: str, out: str = "packed"):
    """Emit the integer stem into BlockBuilder bb (inside a dataflow block). Returns (var, rows) with rows
    {binding name: layer-table row overrides} for the quantize, conv and pool kernels."""
    import tvm
    from tvm import relax

    from edge_sdk.compiler.bitserial.kernels import WORD_BITS
    from edge_sdk.quant.int8 import Requant, Window

    s, act = net.stem, (0, (1 << net.a_bits) - 1)
    const = lambda a: relax.const(tvm.runtime.tensor(np.ascontiguousarray(a)))  # noqa: E731
    in_shape = tuple(int(d) for d in net.input_shape)
    kh, kw, ci, co = s.qweight.shape
    win = Window((s.stride, s.stride), (1, 1), "SAME")
    oh, ow, pads = win.place(in_shape, kh, kw)
    t, l, b, r = s.pad
    if pads != (t, b, l, r):
        raise CompileError(f"integer stem: padding {s.pad} is not TFLite SAME {pads} for {in_shape}, k {kh}")
    rows = {}
    qf = quantize_prim_func(in_shape, scale=s.in_scale, zero_point=s.in_zp, name="edge_stem_quantize")
    xq = bb.emit(relax.call_tir(bb.add_func(qf, "edge_stem_quantize"), [x], relax.TensorType(in_shape, "int8")),
                 name_hint="conv1_quantize")
    func, consts, out_shape = _conv(in_shape, s, Requant(s.in_zp, s.mult, s.shift, 0, act), win, simd=simd,
                                    a_bits=net.a_bits)
    rows[xq.name] = {"op": "quantize", "flops": int(np.prod(in_shape))}
    codes = bb.emit(relax.call_tir(bb.add_func(func, "edge_stem_conv_i8"), [xq] + [const(c) for c in consts],
                                   relax.TensorType(out_shape, "int8")), name_hint="conv1")
    rows[codes.name] = {"op": "conv2d", "flops": 2 * oh * ow * co * kh * kw * ci * in_shape[0],
                        "epilogue": ["bias", "requantize", "relu"], "precision": "int8"}
    func, shape = pool_out_prim_func(out_shape, s, StemOut(out, net.a_bits, word, net.step),
                                     grid=(in_shape[0], oh, ow), channels=co, name="edge_stem_pool_pack")
    if out == "packed":
        ty = relax.TensorType((*shape[:3], -(-co // WORD_BITS[word]), net.a_bits), word)
    else:
        ty = relax.TensorType(shape, "int32" if out == "codes" else "float32")
    res = bb.emit(relax.call_tir(bb.add_func(func, "edge_stem_pool_pack"), [codes], ty),
                  name_hint="pool" if s.pool else "conv1_codes")
    rows[res.name] = {"op": "max_pool2d" if s.pool else "bitserial_aux",
                      "flops": int(np.prod(shape)) * max(1, s.pool * s.pool)}
    return res, rows
