"""Bitserial ops in TVM TE, with our own schedules for x86 and aarch64.

The numerics are `edge_sdk.quant.bitserial` exactly (codes, LSB-first packing, unipolar/bipolar,
padding, see its docstring) and the fused glue is `edge_sdk.quant.glue.fused_glue`.

Layouts (what the compiled kernels read and write)
  activations  (N, H, W, ceil(C/Wa), A)   words of type `word`, bit planes last
  conv weights (KH, KW, ceil(C/Wa), B, O) pre-packed in numpy (`quant.bitserial.pack_conv_weights`):
                                          output channels innermost, so a vector of O lanes loads at once
  dense        data (N, ceil(K/W), A), weights (ceil(K/W), B, O)
  conv output  int32 (N, OH, OW, O), or, with the fused glue, packed next-layer codes
               (N, OH, OW, ceil(O/Wo), out_bits): no float and no int32 tensor leaves the kernel.

Why not topi.nn.bitserial_conv2d_nhwc: its unipolar form subtracts two uint32 popcounts, which LLVM
marks `sub nuw` and miscompiles on x86; here each popcount is cast to int32 before subtracting.
"""
from __future__ import annotations

from dataclasses import dataclass

from edge_sdk.compiler.bitserial import popc
from edge_sdk.compiler.bitserial.popc import unipolar_conv
from edge_sdk.errors import CompileError
from edge_sdk.quant.bitserial import MODES, WORD_BITS, conv_out_size, pad4

SUPPORTED_BITS = {"weights": (1, 2), "activations": (1, 2, 3)}


def _check(mode: str, a_bits: int, w_bits: int, word: str, op: str) -> int:
    if mode not in MODES:
        raise CompileError(f"{op}: bitserial mode '{mode}' is not one of {MODES}")
    if a_bits not in SUPPORTED_BITS["activations"]:
        raise CompileError(f"{op}: {a_bits}-bit activations are not supported "
                           f"(supported: {SUPPORTED_BITS['activations']})")
    if w_bits not in SUPPORTED_BITS["weights"]:
        raise CompileError(f"{op}: {w_bits}-bit weights are not supported (supported: {SUPPORTED_BITS['weights']})")
    if word not in WORD_BITS:
        raise CompileError(f"{op}: word type '{word}' is not one of {sorted(WORD_BITS)}")
    return WORD_BITS[word]


# ---- compute definitions --------------------------------------------------------------------

def bitpack(x, *, bits: int, word: str = "uint32", name: str = "bitpack"):
    """Pack the last axis of integer codes x (..., C) into (..., ceil(C/W), bits) words, LSB-first.

    A reduction over the W bits of a word (a sum of disjoint bits is their OR), so a schedule can
    compute_at its producer under the word loop: that is bitpack fusion.
    """
    from tvm import te, tirx

    wb = WORD_BITS[word]
    c = int(x.shape[-1])
    nw = -(-c // wb)
    k = te.reduce_axis((0, wb), name="k")

    def f(*idx):
        *lead, w, b = idx
        ch = w * wb + k
        bit = ((x[(*lead, ch)] >> b.astype(x.dtype)) & tirx.const(1, x.dtype)).astype(word)
        if c % wb:
            bit = tirx.if_then_else(ch < c, bit, tirx.const(0, word))
        return te.sum(bit << k.astype(word), axis=k)

    return te.compute((*x.shape[:-1], nw, bits), f, name=name)


def _pair_term(a, w, mode: str, nbits, shift):
    """One (word, bit-plane pair) term, in int32: popcounts are cast before they are subtracted.

    unipolar: popcount(a & w) - popcount(a & ~w) == 2 * popcount(a & w) - popcount(a); the right side
    is computed, since popcount(a) does not depend on the output channel (the vector lanes): one
    vector popcount per term instead of two.
    """
    from tvm import tirx

    if mode == "unipolar":
        t = 2 * tirx.popcount(a & w).astype("int32") - tirx.popcount(a).astype("int32")
    else:
        t = nbits - 2 * tirx.popcount(a ^ w).astype("int32")
    return t << shift


def conv2d_compute(*, batch: int, height: int, width: int, channels: int, filters: int,
                   kernel: int, stride: int = 1, padding=0, a_bits: int, w_bits: int,
                   mode: str = "unipolar", word: str = "uint32",
                   glue_out_bits: int | None = None, out_word: str = "uint32",
                   residual: str | None = None, res_lshift: int = 0, pad_value: int = 0):
    """TE tensors of a bitserial conv2d (NHWC); returns (inputs, output) for create_prim_func.

    pad_value (bipolar, 1-bit activations only): 0 pads with the value 0 (a padded tap is skipped),
    1 pads with +1 (every bit set in the word's real channels): Larq's `pad_values=1` one-padding.

    With glue_out_bits, three more int32 (O,) inputs follow: lshift, offset, rshift, and the output is
    bitpack(clip(((acc << lshift) + offset) >> rshift, 0, 2^out_bits - 1)).

    residual (a ResNet shortcut added in the quantized domain, before the clip; the clip at 0 is the
    block's ReLU):
      "codes": one more input, the block input as packed codes (N, OH, OW, ceil(O/Wo), glue_out_bits)
               of out_word; its codes, << res_lshift (aligns power-of-two steps), are added;
      "glue":  four more inputs, the shortcut conv's int32 accumulators (N, OH, OW, O) and its own
               lshift, offset, rshift: ((acc_d << l) + off) >> r is added (the shortcut's glue, unclipped).
    """
    from tvm import te, tirx

    wbits = _check(mode, a_bits, w_bits, word, "bitserial conv2d")
    if glue_out_bits is not None:
        _check(mode, glue_out_bits, w_bits, out_word, "bitserial conv2d glue")
    if pad_value not in (0, 1) or (pad_value and (mode != "bipolar" or a_bits != 1)):
        raise CompileError(f"bitserial conv2d: pad_value {pad_value} needs 0, or 1 with bipolar 1-bit activations")
    cw = -(-channels // wbits)
    t, l, b, r = pad4(padding)
    oh, ow = conv_out_size(height, kernel, stride, t, b), conv_out_size(width, kernel, stride, l, r)
    if oh < 1 or ow < 1:
        raise CompileError(f"bitserial conv2d: a {kernel}x{kernel} kernel does not fit {height}x{width} input")
    data = te.placeholder((batch, height, width, cw, a_bits), word, name="data")
    wgt = te.placeholder((kernel, kernel, cw, w_bits, filters), word, name="weight")
    ry, rx = te.reduce_axis((0, kernel), "ry"), te.reduce_axis((0, kernel), "rx")
    rc = te.reduce_axis((0, cw), "rc")
    ib, jb = te.reduce_axis((0, a_bits), "ib"), te.reduce_axis((0, w_bits), "jb")
    axes = [ry, rx, rc, ib, jb]
    zero = tirx.const(0, word)

    if mode == "unipolar":
        src = data
        if t or l or b or r:  # code 0 is the value 0: plain zero padding is exact
            src = te.compute(
                (batch, height + t + b, width + l + r, cw, a_bits),
                lambda n, y, x, c, i: tirx.if_then_else(
                    tirx.all(y >= t, y < height + t, x >= l, x < width + l), data[n, y - t, x - l, c, i], zero),
                name="pad")

        conv = unipolar_conv(src, wgt, batch=batch, oh=oh, ow=ow, filters=filters, kernel=kernel, stride=stride,
                             cw=cw, a_bits=a_bits, w_bits=w_bits, word=word)
    else:
        def acc(n, y, x, f):  # a padded tap is skipped, not read as -1 (quant.bitserial docstring)
            iy, ix = y * stride + ry - t, x * stride + rx - l
            valid = tirx.all(iy >= 0, iy < height, ix >= 0, ix < width)
            nbits = tirx.min(wbits, channels - rc * wbits).astype("int32")
            if pad_value:  # +1 in every real channel of the word; tail bits stay 0, as in the weights
                ones = tirx.const((1 << wbits) - 1, word) >> (wbits - nbits).astype(word)
                a = tirx.if_then_else(valid, data[n, iy, ix, rc, ib], ones)
            else:
                a = tirx.if_then_else(valid, data[n, iy, ix, rc, ib], zero)
            term = _pair_term(a, wgt[ry, rx, rc, jb, f], mode, nbits, (ib + jb).astype("int32"))
            return te.sum(term if pad_value else tirx.if_then_else(valid, term, 0), axis=axes)

        conv = te.compute((batch, oh, ow, filters), acc, name="conv")
    if glue_out_bits is None:
        return [data, wgt], conv
    if residual not in (None, "codes", "glue"):
        raise CompileError(f"bitserial conv2d: residual '{residual}' is not one of None, 'codes', 'glue'")
    lsh = te.placeholder((filters,), "int32", name="lshift")
    off = te.placeholder((filters,), "int32", name="offset")
    rsh = te.placeholder((filters,), "int32", name="rshift")
    inputs = [data, wgt, lsh, off, rsh]
    qmax = (1 << glue_out_bits) - 1
    res_term = None
    if residual == "codes":
        owb = WORD_BITS[out_word]
        res = te.placeholder((batch, oh, ow, -(-filters // owb), glue_out_bits), out_word, name="residual")
        inputs.append(res)

        def res_term(n, y, x, f):
            bit = (f % owb).astype(out_word)
            code = sum(((res[n, y, x, f // owb, b] >> bit) & tirx.const(1, out_word)).astype("int32") << b
                       for b in range(glue_out_bits))
            return code << res_lshift if res_lshift else code
    elif residual == "glue":
        racc = te.placeholder((batch, oh, ow, filters), "int32", name="res_acc")
        rl, ro, rr = (te.placeholder((filters,), "int32", name=f"res_{k}") for k in ("lshift", "offset", "rshift"))
        inputs += [racc, rl, ro, rr]

        def res_term(n, y, x, f):
            return ((racc[n, y, x, f] << rl[f]) + ro[f]) >> rr[f]

    def glue(n, y, x, f):
        t = ((conv[n, y, x, f] << lsh[f]) + off[f]) >> rsh[f]
        if res_term is not None:
            t = t + res_term(n, y, x, f)
        return tirx.max(tirx.min(t, qmax), 0)

    q = te.compute(conv.shape, glue, name="glue")
    if mode == "unipolar" and filters % WORD_BITS[out_word] == 0:  # whole words: the vector bitpack
        return inputs, popc.pack_planes(q, bits=glue_out_bits, word=out_word)
    return inputs, bitpack(q, bits=glue_out_bits, word=out_word, name="pack")


def dense_compute(*, batch: int, features: int, units: int, a_bits: int, w_bits: int,
                  mode: str = "unipolar", word: str = "uint32"):
    """TE tensors of a bitserial dense: data (N, Kw, A), weights (Kw, B, O) -> int32 (N, O)."""
    from tvm import te, tirx

    wbits = _check(mode, a_bits, w_bits, word, "bitserial dense")
    kw = -(-features // wbits)
    data = te.placeholder((batch, kw, a_bits), word, name="data")
    wgt = te.placeholder((kw, w_bits, units), word, name="weight")
    rc, ib, jb = te.reduce_axis((0, kw), "rc"), te.reduce_axis((0, a_bits), "ib"), te.reduce_axis((0, w_bits), "jb")
    nbits = tirx.min(wbits, features - rc * wbits).astype("int32")
    out = te.compute(
        (batch, units),
        lambda n, o: te.sum(_pair_term(data[n, rc, ib], wgt[rc, jb, o], mode, nbits, (ib + jb).astype("int32")),
                            axis=[rc, ib, jb]),
        name="dense")
    return [data, wgt], out


# ---- schedules --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CpuSchedule:
    """Per target family. Bipolar (per-term int32 form): `vec` channels x `xt` pixels per tile.
    Unipolar (bitserial/popc.py): uint16 `word`s and accumulators, a tile of pop_xt pixels x
    a_bits planes x pop_bits (32 channels): 2 x 2 x 4 NEON q registers (ld1r, and, cnt, uadalp), 2 x 2
    x 2 AVX2 ymm. x86 packs uint8 words, counted in uint8 per chunk of words (popc `popc8`):
    10-19% faster per layer on znver3 than uint16 (uint64 measured the same as uint16).
    chunk_loads: one vector load of a pixel's next words, each broadcast by lane (`dup`): aarch64's
    `ld1r` has no immediate offset, so a broadcast load per word also cost an address `sub`.
    """

    vec: int
    xt: int
    word: str = "uint16"
    pop_xt: int = 2
    pop_bits: int = 512
    chunk_loads: bool = False


SCHEDULES = {"aarch64": CpuSchedule(vec=8, xt=4, chunk_loads=True), "x86_64": CpuSchedule(vec=8, xt=4, word="uint8")}


def network_word(arch: str) -> str:
    """The packing word type a whole network uses on `arch` (weights, activations, outputs)."""
    return _arch_schedule(arch).word


def _divisor(n: int, at_most: int) -> int:
    """Largest factor of n not above at_most: tiles stay exact, so no predicated (scalar) tails."""
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def _arch_schedule(arch: str) -> CpuSchedule:
    try:
        return SCHEDULES[arch]
    except KeyError:
        raise CompileError(f"bitserial ops: no schedule for architecture '{arch}' "
                           f"(have {sorted(SCHEDULES)})") from None


def schedule_conv2d(func, *, arch: str):
    """Tile, vectorize over output channels, parallelize over rows; returns the scheduled PrimFunc."""
    from tvm import s_tir

    cfg = _arch_schedule(arch)
    sch = s_tir.Schedule(func)
    conv = sch.get_sblock("conv")
    _, _, ow, o = (int(v) for v in sch.get(conv).writes[0].source.shape)
    xt = _divisor(ow, cfg.xt)
    if popc.has_block(sch, "pad"):  # unipolar with padding: a cheap pass over the small packed input
        pl = sch.get_loops(sch.get_sblock("pad"))
        sch.parallel(sch.fuse(pl[0], pl[1]))
    if popc.has_block(sch, "popc"):  # unipolar: raw popcounts per bit-plane pair, combined late
        lanes = cfg.pop_bits // int(str(sch.get(sch.get_sblock("popc")).writes[0].source.dtype)[4:])
        xt = _divisor(ow, cfg.pop_xt)
        lanes *= cfg.pop_xt // xt  # a prime width (7) gets 1-pixel tiles: widen the channel group instead
        _, _, _, pa, pw, _ = (int(v) for v in sch.get(sch.get_sblock("popc")).writes[0].source.shape)
        if pa * pw == 1 and xt == cfg.pop_xt:  # one plane pair (w1a1): twice the channels, the same
            # accumulator count per tile (2 x 1 x 8 q registers); 1-pixel tiles are already widened
            lanes *= 2
        if popc.has_block(sch, "pack"):
            popc.schedule_fused(sch, xt=xt, lanes=lanes, chunks=cfg.chunk_loads)
        else:
            popc.schedule_int32(sch, xt=xt, lanes=lanes, chunks=cfg.chunk_loads)
    elif popc.has_block(sch, "pack"):
        _schedule_fused(sch, conv, o=o, xt=xt, cfg=cfg)
    else:
        _schedule_int32(sch, conv, o=o, xt=xt, cfg=cfg)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)


def _schedule_int32(sch, conv, *, o: int, xt: int, cfg: CpuSchedule) -> None:
    """[n*y parallel], xo, fo, ry, rx, rc, ib, jb, xi (unrolled), fi (vector): an xt x vec register tile."""
    vec = _divisor(o, cfg.vec)
    cache = sch.cache_write(conv, 0, "local")
    n, y, x, f, *red = sch.get_loops(conv)
    xo, xi = sch.split(x, [None, xt])
    fo, fi = sch.split(f, [None, vec])
    sch.reorder(n, y, xo, fo, *red, xi, fi)
    sch.parallel(sch.fuse(n, y))
    sch.reverse_compute_at(cache, fo)
    copy = sch.get_loops(cache)[3:]  # under fused(n, y), xo, fo; unit loops are dropped, so maybe none:
    if copy:  # vectorizing fo itself (o prime, a 1x1 output) computed wrong sums (found by hypothesis)
        sch.vectorize(copy[-1])
    sch.unroll(xi)
    sch.vectorize(fi)
    sch.decompose_reduction(conv, red[0])


def _schedule_fused(sch, conv, *, o: int, xt: int, cfg: CpuSchedule) -> None:
    """Per output word: the (xt, W) int32 conv tile, its glue (vectorized, once, not per bit plane),
    then the bitpack; all three tiles are local to the word loop (bitpack fusion)."""
    pack, glue = sch.get_sblock("pack"), sch.get_sblock("glue")
    pn, py, px, pw, pb, pk = sch.get_loops(pack)
    pxo, pxi = sch.split(px, [None, xt])
    sch.reorder(pn, py, pxo, pw, pxi, pb, pk)
    sch.parallel(sch.fuse(pn, py))
    wbits = WORD_BITS[str(sch.get(pack).writes[0].source.dtype)]
    sch.compute_at(glue, pw)
    sch.compute_at(conv, pw)
    sch.set_scope(conv, 0, "local")
    sch.set_scope(glue, 0, "local")
    full_words = o % wbits == 0  # a partial last word leaves predicated (scalar) loops
    gl = popc.named_loops(sch, glue, skip=3, extents={"x": xt, "f": min(o, wbits)})
    if "f" in gl and full_words:
        sch.vectorize(gl["f"])
    loops = popc.named_loops(sch, conv, skip=3, extents={"x": xt, "f": min(o, wbits), **_red_extents(sch, conv)})
    vec = _divisor(min(o, wbits), cfg.vec) if full_words else 1
    red = [loops[k] for k in ("ry", "rx", "rc", "ib", "jb") if k in loops]
    inner = [loops["x"]] if "x" in loops else []
    if inner:
        sch.unroll(inner[0])
    if "f" in loops:
        fo, fi = sch.split(loops["f"], [None, vec])
        sch.reorder(fo, *red, *inner, fi)
        if vec > 1:
            sch.vectorize(fi)
            # accumulate in an (xt, vec) register tile per fo, copied out to the word's (xt, W) tile:
            # indexing the word tile by the fo loop kept the accumulators in memory (2.5x slower)
            cache = sch.cache_write(conv, 0, "local")
            sch.reverse_compute_at(cache, fo)
            sch.vectorize(sch.get_loops(cache)[-1])
    elif red:
        sch.reorder(*red, *inner)
    if red:
        sch.decompose_reduction(conv, red[0])


def _red_extents(sch, blk) -> dict[str, int]:
    """Extents of the conv's reduction iterators (ry, rx, rc, ib, jb) from its block."""
    from tvm import tirx

    iters = [iv for iv in sch.get(blk).iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    return {k: int(iv.dom.extent) for k, iv in zip(("ry", "rx", "rc", "ib", "jb"), iters)}




def schedule_dense(func, *, arch: str):
    """Vectorize over output units, parallel over unit tiles, accumulate in registers."""
    from tvm import s_tir

    cfg = _arch_schedule(arch)
    sch = s_tir.Schedule(func)
    blk = sch.get_sblock("dense")
    units = int(sch.get(blk).writes[0].source.shape[1])
    vec = _divisor(units, cfg.vec)
    n, o, rc, ib, jb = sch.get_loops(blk)
    oo, oi = sch.split(o, [None, vec])
    sch.reorder(oo, n, rc, ib, jb, oi)
    sch.parallel(oo)
    sch.vectorize(oi)
    sch.decompose_reduction(blk, rc)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)


# ---- build helpers ----------------------------------------------------------------------------

def conv2d_prim_func(*, arch: str | None = None, **spec):
    """A (scheduled when arch is given) PrimFunc for conv2d_compute(**spec)."""
    from tvm import te

    inputs, out = conv2d_compute(**spec)
    func = te.create_prim_func([*inputs, out])
    return schedule_conv2d(func, arch=arch) if arch else func


def dense_prim_func(*, arch: str | None = None, **spec):
    from tvm import te

    inputs, out = dense_compute(**spec)
    func = te.create_prim_func([*inputs, out])
    return schedule_dense(func, arch=arch) if arch else func


def build(func, *, target):
    """Compile one PrimFunc for an edge_sdk Target; returns tvm's Executable (call ex.mod["main"])."""
    import tvm

    try:
        return tvm.compile(tvm.IRModule({"main": func}), target=target.tvm_target())
    except tvm.error.TVMError as e:
        raise CompileError(f"bitserial op for target '{target.name}' failed to build: {e}") from e
