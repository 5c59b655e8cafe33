"""Where a bitserial network meets float: quantize+bitpack in, unpack / dequantize / average pool out.

Small TE computes around the bitserial convs (numerics: edge_sdk.quant.bitserial). The ones on every
MobileNet layer (quantize+pack after a float depthwise, dequant before the next) are also scheduled kernels
(quantize_pack_prim_func, unpack_dequant_prim_func; graph.py uses them for whole words); the rest, once
per network, are left to TVM's default lowering.
"""
from __future__ import annotations

from edge_sdk.compiler.bitserial.kernels import WORD_BITS, bitpack


def quantize_pack_compute(x, *, bits: int, step: float, word: str = "uint32"):
    """Float NHWC activations -> packed unipolar codes clip(floor(x / step + 0.5), 0, 2^bits - 1).

    The entry into the binary part (after the float stem); step is a power of two, so x * (1/step)
    is exact and the codes equal the numpy quantizer's for the same float input.
    """
    from tvm import te, tirx

    qmax = float((1 << bits) - 1)
    inv = tirx.const(1.0 / step, x.dtype)
    codes = te.compute(x.shape, lambda *i: tirx.max(tirx.min(
        tirx.floor(x[i] * inv + tirx.const(0.5, x.dtype)), tirx.const(qmax, x.dtype)),
        tirx.const(0.0, x.dtype)).astype("int32"), name="quantize")
    return bitpack(codes, bits=bits, word=word, name="pack")


def unpack_compute(p, *, channels: int):
    """Packed codes (N, H, W, ceil(C/W), bits) -> int32 codes (N, H, W, C)."""
    from tvm import te, tirx

    wb = WORD_BITS[str(p.dtype)]
    bits = int(p.shape[-1])

    def f(n, y, x, c):
        bit = (c % wb).astype(p.dtype)
        return sum(((p[n, y, x, c // wb, b] >> bit) & tirx.const(1, p.dtype)).astype("int32") << b
                   for b in range(bits))

    return te.compute((*p.shape[:3], channels), f, name="unpack")


def unpack_dequant_compute(p, *, channels: int, step: float):
    """Packed codes -> float32 values code * step (N, H, W, C): a float layer's input."""
    from tvm import te

    codes = unpack_compute(p, channels=channels)
    return te.compute(codes.shape, lambda *i: codes[i].astype("float32") * step, name="dequant")


def unpack_mean_compute(p, *, channels: int, step: float):
    """Global average pool of packed codes, dequantized: (N, H, W, Cw, bits) -> float32 (N, C)."""
    from tvm import te

    codes = unpack_compute(p, channels=channels)
    h, w = int(p.shape[1]), int(p.shape[2])
    ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
    total = te.compute((int(p.shape[0]), channels), lambda n, c: te.sum(codes[n, ry, rx, c], axis=[ry, rx]),
                       name="code_sum")
    scale = step / (h * w)
    return te.compute(total.shape, lambda n, c: total[n, c].astype("float32") * scale, name="dequant_mean")


def unpack_mean_prim_func(pshape, *, word: str, channels: int, step: float):
    """unpack_mean_compute (the head's global average pool of packed codes) as one scheduled kernel: per
    word of channels the codes' sum over the pixels in int32 vector lanes (the word broadcast, shifted by a
    lane ramp, masked, per plane), then one scale. Why: default-lowered it was a scalar loop a code and bit
    (ResNet18 w1a1 pi3: ~0.4 modelled ms in a 7x7x512 head). Needs whole words (channels == words * word
    bits)."""
    from tvm import s_tir, te

    p = te.placeholder(tuple(int(d) for d in pshape), word, name="p")
    out = unpack_mean_compute(p, channels=channels, step=step)
    sch = s_tir.Schedule(te.create_prim_func([p, out]))
    sch.compute_inline(sch.get_sblock("unpack"))
    sb, db = sch.get_sblock("code_sum"), sch.get_sblock("dequant_mean")
    _, c = sch.get_loops(db)
    co, ci = sch.split(c, [None, WORD_BITS[word]])
    sch.compute_at(sb, co)  # one word's channel sums, then their scale
    sch.set_scope(sb, 0, "global")  # a stack alloca LLVM keeps in registers (ops/common.ACC_SCOPE)
    lanes, *reds = sch.get_loops(sb)[2:]  # below (batch, word): lanes, then the pixels (unit ones dropped)
    if reds:
        sch.reorder(*reds, lanes)
        sch.vectorize(lanes)
        sch.decompose_reduction(sb, reds[0])
    sch.vectorize(ci)
    return _attrs(sch)


# ---- the unfused ablation's glue: one scheduled kernel per float op ----------------------------

GLUE_OPS = {  # kind -> (output dtype, f(x, *others at the same index / per channel))
    "to_float": ("float32", lambda x: x.astype("float32")),
    "scale": ("float32", lambda x, m: x * m),
    "bias": ("float32", lambda x, b: x + b),
    "floor": ("float32", lambda x: __import__("tvm").tirx.floor(x)),
    "add": ("float32", lambda x, y: x + y),
    "to_int": ("int32", lambda x: x.astype("int32")),
}


def glue_op_prim_func(kind: str, shape, *, arg_shapes, arg_dtypes, clip_max: float | None = None, lanes: int = 8):
    """One separate, scheduled elementwise glue op (the unfused ablation, Riptide's separate layers).

    Arguments of shape `shape` are read at the same index, 1-D ones per channel (last axis). Scheduled
    like any kernel we ship: rows in parallel, channels vectorized, so that fused vs unfused measures
    fusion (memory passes, float tensors) and not TVM's default loops. Marked opaque: FuseOps must
    not merge the ops back together.
    """
    from tvm import s_tir, te, tirx

    ins = [te.placeholder(tuple(s), d, name=f"in{i}") for i, (s, d) in enumerate(zip(arg_shapes, arg_dtypes))]
    if kind == "clip":
        dtype, f = "float32", lambda x: tirx.max(tirx.min(x, tirx.const(clip_max, "float32")),
                                                 tirx.const(0.0, "float32"))
    else:
        dtype, f = GLUE_OPS[kind]

    def body(*idx):
        vals = [t[idx] if len(t.shape) == len(idx) else t[idx[-1]] for t in ins]
        return f(*vals).astype(dtype)

    out = te.compute(tuple(shape), body, name="glue_op")
    sch = s_tir.Schedule(te.create_prim_func([*ins, out]))
    loops = sch.get_loops(sch.get_sblock("glue_op"))
    if len(loops) > 2:
        sch.parallel(sch.fuse(*loops[:-2]))
    c = int(shape[-1])
    if c % lanes == 0:
        _, ci = sch.split(loops[-1], [None, lanes])
        sch.vectorize(ci)
    return sch.mod["main"].with_attrs({"tirx.is_scheduled": True, "op_pattern": 8, "tirx.noalias": True})


def bitpack_prim_func(shape, *, bits: int, word: str):
    """The unfused graph's separate bitpack of int32 codes (N, H, W, C): rows in parallel, bit loop unrolled."""
    from tvm import s_tir, te

    x = te.placeholder(tuple(shape), "int32", name="codes")
    sch = s_tir.Schedule(te.create_prim_func([x, bitpack(x, bits=bits, word=word, name="pack")]))
    loops = sch.get_loops(sch.get_sblock("pack"))  # n, h, w, word, bit, k
    sch.parallel(sch.fuse(loops[0], loops[1]))
    return sch.mod["main"].with_attrs({"tirx.is_scheduled": True, "op_pattern": 8, "tirx.noalias": True})


def pool_quantize_pack_prim_func(shape, *, pool: int, stride: int, pad, bits: int, step: float, word: str):
    """The float stem's tail as one kernel: max pool (padded taps skipped), quantize (as
    quantize_pack_compute) and the vector bitpack (popc.pack_planes), per output word under one row loop.
    Why: the float pool wrote its (N, H/2, W/2, C) float32 output and the default-lowered quantize_pack
    wrote an int32 copy of it (0.8 MB each at 224) before packing ~3.5 scalar instructions per bit; here
    only the packed codes leave. Needs whole words (C % word bits == 0): the caller checks."""
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.bitserial import popc
    from edge_sdk.quant.bitserial import conv_out_size, pad4

    n, h, w, c = (int(d) for d in shape)
    t, l, b, r = pad4(pad)
    oh, ow = conv_out_size(h, pool, stride, t, b), conv_out_size(w, pool, stride, l, r)
    x = te.placeholder((n, h, w, c), "float32", name="x")
    ry, rx = te.reduce_axis((0, pool), "ry"), te.reduce_axis((0, pool), "rx")
    lowest = tirx.const(-3.0e38, "float32")

    def window(a, y, z, ch):
        iy, ix = y * stride + ry - t, z * stride + rx - l
        inside = tirx.all(iy >= 0, iy < h, ix >= 0, ix < w)
        return te.max(tirx.if_then_else(inside, x[a, iy, ix, ch], lowest), axis=[ry, rx])

    pooled = te.compute((n, oh, ow, c), window, name="pool")
    qmax, inv = float((1 << bits) - 1), tirx.const(1.0 / step, "float32")
    q = te.compute(pooled.shape, lambda *i: tirx.max(tirx.min(tirx.floor(pooled[i] * inv + tirx.const(0.5, "float32")),
                                                               tirx.const(qmax, "float32")),
                                                     tirx.const(0.0, "float32")).astype("int32"), name="quantize")
    pack = popc.pack_planes(q, bits=bits, word=word)
    sch = s_tir.Schedule(te.create_prim_func([x, pack]))
    pn, py, _px, pw, _pb, pk = sch.get_loops(sch.get_sblock("pack"))
    sch.parallel(sch.fuse(pn, py))
    for name in ("bits", "quantize", "pool"):
        blk = sch.get_sblock(name)
        sch.compute_at(blk, pw)
        sch.set_scope(blk, 0, popc.TILE_SCOPE)
    pl = sch.get_loops(sch.get_sblock("pool"))[-3:]  # channels of the word, ry, rx
    sch.reorder(pl[1], pl[2], pl[0])
    sch.unroll(pl[1])
    sch.unroll(pl[2])
    sch.vectorize(pl[0])
    sch.decompose_reduction(sch.get_sblock("pool"), pl[1])
    sch.vectorize(sch.get_loops(sch.get_sblock("quantize"))[-1])
    bl = sch.get_loops(sch.get_sblock("bits"))
    sch.unroll(bl[-2])
    sch.vectorize(bl[-1])
    if int(sch.get(_pb).extent) > 1:
        sch.unroll(_pb)
    sch.decompose_reduction(sch.get_sblock("pack"), pk)
    sch.tensorize(pk, popc.pack_intrin(word))
    return sch.mod["main"].with_attrs({"tirx.is_scheduled": True, "op_pattern": 8, "tirx.noalias": True})


def _attrs(sch):
    return sch.mod["main"].with_attrs({"tirx.is_scheduled": True, "op_pattern": 8, "tirx.noalias": True})


def quantize_pack_prim_func(shape, *, bits: int, step: float, word: str):
    """quantize_pack_compute (float NHWC -> packed codes) as one scheduled kernel: rows in parallel; per row
    the quantize as one flat vector loop into an int8 row of codes, then per output word the vector bitpack
    (popc.pack_planes). Why: left to TVM's default lowering (MobileNet's depthwise outputs) it packed ~3.5
    scalar instructions per bit; quantizing per word instead unrolled one load per word of a pixel, more
    read streams than the A53's prefetcher tracks (timing/a53.py pf_streams), so every line was a DRAM
    stall. Needs whole words (C % word bits == 0): the caller checks."""
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.bitserial import popc

    x = te.placeholder(tuple(int(d) for d in shape), "float32", name="x")
    qmax, inv = float((1 << bits) - 1), tirx.const(1.0 / step, "float32")
    q = te.compute(x.shape, lambda *i: tirx.max(tirx.min(tirx.floor(x(*i) * inv + tirx.const(0.5, "float32")),
                                                         tirx.const(qmax, "float32")),
                                                tirx.const(0.0, "float32")).astype("int8"), name="quantize")
    pack = popc.pack_planes(q, bits=bits, word=word)
    sch = s_tir.Schedule(te.create_prim_func([x, pack]))
    pn, py, _px, pw, pb, pk = sch.get_loops(sch.get_sblock("pack"))
    row = sch.fuse(pn, py)
    sch.parallel(row)
    bb, qb = sch.get_sblock("bits"), sch.get_sblock("quantize")
    sch.compute_at(bb, pw)
    sch.set_scope(bb, 0, popc.TILE_SCOPE)
    sch.compute_at(qb, row)
    sch.set_scope(qb, 0, popc.TILE_SCOPE)
    inner = sch.get_loops(qb)[1:]  # (pixels,) channels: compute_at drops unit loops
    flat = sch.fuse(*inner) if len(inner) > 1 else inner[0]
    sch.vectorize(sch.split(flat, [None, 4])[1])
    bl = sch.get_loops(bb)
    if bits > 1:
        sch.unroll(bl[-2])
    sch.vectorize(bl[-1])
    if int(sch.get(pb).extent) > 1:
        sch.unroll(pb)
    sch.decompose_reduction(sch.get_sblock("pack"), pk)
    sch.tensorize(pk, popc.pack_intrin(word))
    return _attrs(sch)


def unpack_dequant_prim_func(pshape, *, word: str, channels: int, step: float, rows: tuple | None = None):
    """unpack_dequant_compute (packed codes -> float32 code * step) as one scheduled kernel: rows in
    parallel, each word's channels as vector lanes (the word broadcast, shifted by a lane ramp, masked).
    Why: default-lowered it was one scalar loop, ~10 modelled A53 cycles per value (MobileNetV1 w1a2:
    28 M cycles in its dequant kernels). Needs whole words (channels == words * word bits).
    rows = (r0, r1): only those input rows (a depthwise band, graph.dw_packed), read in place: a separate
    strided_slice of the packed rows was default-lowered, 6.9 modelled ms of MobileNetV1 w1a2."""
    from tvm import s_tir, te

    p = te.placeholder(tuple(int(d) for d in pshape), word, name="p")
    src = p
    if rows is not None:
        n, _, w, cw, b = (int(d) for d in pshape)
        src = te.compute((n, rows[1] - rows[0], w, cw, b), lambda i, y, x, c, k: p[i, y + rows[0], x, c, k],
                         name="band")
    out = unpack_dequant_compute(src, channels=channels, step=step)
    sch = s_tir.Schedule(te.create_prim_func([p, out]))
    if rows is not None:
        sch.compute_inline(sch.get_sblock("band"))
    sch.compute_inline(sch.get_sblock("unpack"))
    n, y, x, c = sch.get_loops(sch.get_sblock("dequant"))
    sch.parallel(sch.fuse(n, y))
    _co, ci = sch.split(c, [None, WORD_BITS[str(p.dtype)]])
    sch.vectorize(ci)
    return _attrs(sch)
