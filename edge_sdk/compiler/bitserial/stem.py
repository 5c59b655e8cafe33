"""The integer stem of a bitserial network: float image -> int8 -> int8 conv -> a-bit codes -> pool -> packed.

    emit_int8_stem(bb, x, net, *, simd, word, out="packed"|"codes"|"values") -> (relax var, {var: row})

Numerics are quant/bitserial_net_ref.py's (stem_codes), the model's are models/binarized.py's (Stem):
1. quantize: round(x / in_scale) + in_zp, clamped to int8, as TFLite's QUANTIZE (quant.int8.quantize);
   our own kernel, vectorized over each image row (the int8 backend's glue.quantize is scalar).
2. conv: the int8 backend's conv (compiler/int8/kernels.conv2d: the register-tiled GEMM, smlal tile on
   aarch64, vpmaddwd on x86) with its fused epilogue bias + fixed-point requantize + clamp; zero point
   0 and clamp [0, 2^a - 1] make its int8 outputs the a-bit codes themselves.
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
    inv = tirx.const(float(np.float32(scale)), "float32")

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


def quantize_pad_prim_func(shape, *, scale: float, zero_point: int, pads, name: str):
    """float32 NHWC -> int16 (N, H+pt+pb, W+pl+pr, C): the int8 quantize of quantize_prim_func, padded with
    the zero point and widened once, so the conv's im2col is a plain gather (no bounds, no widening)."""
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.ops.common import finish

    n, h, w, c = (int(d) for d in shape)
    pt, pb, pl, pr = pads
    x = te.placeholder((n, h, w, c), "float32", name="x")
    inv = tirx.const(float(np.float32(scale)), "float32")

    def f(a, y, z, k):
        r = _quantized(x[a, y - pt, z - pl, k] / inv, zero_point)
        inside = tirx.all(y >= pt, y < h + pt, z >= pl, z < w + pl)
        return tirx.if_then_else(inside, r.astype("int16"), tirx.const(zero_point, "int16"))

    out = te.compute((n, h + pt + pb, w + pl + pr, c), f, name="quantize")
    sch = s_tir.Schedule(te.create_prim_func([x, out]))
    la, ly, _, _ = sch.get_loops(sch.get_sblock("quantize"))
    sch.parallel(sch.fuse(la, ly))
    return finish(sch, name)


def conv_rows_gemm(xp_shape, w_hwio: np.ndarray, bias, rq, *, stride: int, out_hw, name: str):
    """The int8 backend's NEON GEMM (compiler/int8/gemm_int8_widen16.py: 8 pixels x 8 channels, 16 smlal by lane per k
    step, its schedule and epilogue) on an input already quantized, padded and widened to int16: a row
    tile of 8 pixels never crosses an image row (OW % 8 == 0), so the im2col gather has no bounds checks
    and no per-element index division. Returns (func, consts, (M, COpad)). rq: a quant.int8.Requant with
    zero points 0 (the input zero point is in the padded input already)."""
    from tvm import s_tir, te

    from edge_sdk.compiler.int8 import fixedpoint as fp
    from edge_sdk.compiler.int8 import gemm_int8_widen16 as gemm
    from edge_sdk.compiler.ops.common import finish, round_up

    n, _, _, ci = (int(d) for d in xp_shape)
    kh, kw, _, co = w_hwio.shape
    oh, ow = out_hw
    mr = nr = 8
    if ow % mr:
        raise CompileError(f"integer stem: output width {ow} is not a multiple of {mr}")
    m, npad, tpr = n * oh * ow, round_up(co, nr), ow // mr
    x = te.placeholder(tuple(int(d) for d in xp_shape), "int16", name="x")
    wp = gemm.pack_weight(w_hwio, nr, pairs=False)
    wt = te.placeholder(wp.shape, "int16", name="w")
    bt, mt, rt_ = (te.placeholder((npad,), "int32", name=nm) for nm in ("bias", "mult", "rshift"))

    def a16(io, ry, rx, c, ii):
        img, rem = io // (oh * tpr), io % (oh * tpr)
        return x[img, rem // tpr * stride + ry, (rem % tpr * mr + ii) * stride + rx, c]

    a_t = te.compute((m // mr, kh, kw, ci, mr), a16, name="a16")
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, ci), "rc")
    acc = te.compute((m, npad), lambda i, j: te.sum(
        a_t[i // mr, ry, rx, rc, i % mr].astype("int32") * wt[j // nr, ry, rx, rc, j % nr].astype("int32"),
        axis=[ry, rx, rc]), name="acc")
    biased = te.compute((m, npad), lambda i, j: acc[i, j] + bt[j], name="biased")
    lo, hi = rq.act
    out = te.compute((m, npad), lambda i, j: fp.clamp_int8_32(fp.mbqm32(biased[i, j], mt[j], rt_[j]), lo, hi),
                     name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, mt, rt_, out]))
    gemm.schedule(sch, gemm.GemmTile(mr, nr, m, kh * kw * ci, npad, (kh, kw, ci), pairs=False, widen_vec=False,
                                     lanes=True))

    def padded(v):
        o = np.zeros(npad, np.int32)
        o[:co] = v
        return o

    consts = [wp, padded(bias), padded(rq.multiplier), padded(-np.asarray(rq.shift, np.int64))]
    return finish(sch, name), consts, (m, npad)


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


def pool_out_prim_func(codes_shape, stem, dest: StemOut, *, grid, channels: int, name: str):
    """int8 codes -> max pool (stem.pool, pool_stride, pool_pad; pool 0: none) -> what `dest` says.

    codes_shape: (M, Cpad) of the GEMM (rows = pixels of grid (N, H, W)) or (N, H, W, C).
    """
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.bitserial.kernels import bitpack
    from edge_sdk.compiler.ops.common import finish

    x = te.placeholder(tuple(codes_shape), "int8", name="codes")
    pooled = _pooled(x, stem, grid=grid, channels=channels)
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


def emit_int8_stem(bb, x, net, *, simd, word: str, out: str = "packed"):
    """Emit the integer stem into BlockBuilder bb (inside a dataflow block). Returns (var, rows) with rows
    {binding name: layer-table row overrides} for the quantize, conv and pool kernels."""
    import tvm
    from tvm import relax

    from edge_sdk.compiler.int8 import kernels
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
    if simd.isa == "neon" and ow % 8 == 0 and s.in_zp == 0:  # the row-tiled variant (conv_rows_gemm)
        xp_shape = (in_shape[0], in_shape[1] + t + b, in_shape[2] + l + r, in_shape[3])
        qf = quantize_pad_prim_func(in_shape, scale=s.in_scale, zero_point=s.in_zp, pads=pads,
                                    name="edge_stem_quantize")
        xq = bb.emit(relax.call_tir(bb.add_func(qf, "edge_stem_quantize"), [x], relax.TensorType(xp_shape, "int16")),
                     name_hint="conv1_quantize")
        func, consts, out_shape = conv_rows_gemm(xp_shape, s.qweight, s.qbias, Requant(0, s.mult, s.shift, 0, act),
                                                 stride=s.stride, out_hw=(oh, ow), name="edge_stem_conv_i8")
    else:  # the int8 backend's conv as it is (x86: its vpmaddwd GEMM)
        qf = quantize_prim_func(in_shape, scale=s.in_scale, zero_point=s.in_zp, name="edge_stem_quantize")
        xq = bb.emit(relax.call_tir(bb.add_func(qf, "edge_stem_quantize"), [x], relax.TensorType(in_shape, "int8")),
                     name_hint="conv1_quantize")
        k = kernels.conv2d(in_shape, np.ascontiguousarray(s.qweight.transpose(3, 0, 1, 2)), s.qbias,
                           Requant(s.in_zp, s.mult, s.shift, 0, act), win, simd=simd, name="edge_stem_conv_i8")
        func, consts, out_shape = k.func, k.consts, k.out_shape
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
