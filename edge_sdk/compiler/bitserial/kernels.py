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
from edge_sdk.compiler.bitserial.schedule import schedule_conv2d, schedule_dense
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


@dataclass(frozen=True)
class ConvSpec:
    """One bitserial conv2d (NHWC): input (batch, height, width, channels) as a_bits planes of `word`s,
    `filters` square `kernel` x `kernel` filters of w_bits planes, stride, padding (int or (t, l, b, r)).

    pad_value (bipolar, 1-bit activations only): 0 pads with the value 0 (a padded tap is skipped),
    1 pads with +1 (every bit set in the word's real channels): Larq's `pad_values=1` one-padding.

    With glue_out_bits, three more int32 (O,) inputs follow: lshift, offset, rshift, and the output is
    bitpack(clip(((acc << lshift) + offset) >> rshift, 0, 2^out_bits - 1)) in `out_word`s.

    residual (a ResNet shortcut added in the quantized domain, before the clip; the clip at 0 is the
    block's ReLU):
      "codes": one more input, the block input as packed codes (N, OH, OW, ceil(O/Wo), glue_out_bits)
               of out_word; its codes, << res_lshift (aligns power-of-two steps), are added;
      "glue":  four more inputs, the shortcut conv's int32 accumulators (N, OH, OW, O) and its own
               lshift, offset, rshift: ((acc_d << l) + off) >> r is added (the shortcut's glue, unclipped).

    thresholds (residual None, out_bits <= 2): the three inputs are glue_thresholds' T_1..T_3 instead, and
    the code is #{k <= 2^out_bits - 1 : acc >= T_k}: the same value (the glue is non-decreasing in acc), one
    compare per output and code step instead of the shift / add / shift chain.
    """

    batch: int
    height: int
    width: int
    channels: int
    filters: int
    kernel: int
    a_bits: int
    w_bits: int
    stride: int = 1
    padding: object = 0
    mode: str = "unipolar"
    word: str = "uint32"
    glue_out_bits: int | None = None
    out_word: str = "uint32"
    residual: str | None = None
    res_lshift: int = 0
    pad_value: int = 0
    thresholds: bool = False
    w_group: int = 0  # > 0 (unipolar): weights stored (O / w_group, KH, KW, ceil(C/W), B, w_group), see _weights

    @property
    def cw(self) -> int:
        """Words per pixel and bit plane."""
        return -(-self.channels // WORD_BITS[self.word])

    @property
    def out_hw(self) -> tuple[int, int]:
        t, l, b, r = pad4(self.padding)
        return (conv_out_size(self.height, self.kernel, self.stride, t, b),
                conv_out_size(self.width, self.kernel, self.stride, l, r))


def _weights(s: ConvSpec):
    """(the weight placeholder, its (KH, KW, Cw, B, O) view). w_group = L stores each group of L output
    channels' weights contiguously, (O/L, KH, KW, Cw, B, L), the view inlined by the schedule. Why: in
    (KH, KW, Cw, B, O) one popc tile's L lanes are 2L bytes of every O * 2-byte row, and with O = 256..1024
    those rows are 0.5-2 KB apart: a few of the L1's 128 sets (4 ways) hold all of a tile's taps, so the
    weights were re-read from L2 on every pixel tile (layer3/4 3x3: ~1.5 M of ~9 M modelled cycles)."""
    from tvm import te

    if not s.w_group:
        w = te.placeholder((s.kernel, s.kernel, s.cw, s.w_bits, s.filters), s.word, name="weight")
        return w, w
    if s.mode != "unipolar" or s.filters % s.w_group:
        raise CompileError(f"bitserial conv2d: weight groups of {s.w_group} need unipolar mode and a multiple of "
                           f"{s.w_group} filters (got {s.mode}, {s.filters})")
    g = s.w_group
    stored = te.placeholder((s.filters // g, s.kernel, s.kernel, s.cw, s.w_bits, g), s.word, name="weight")
    view = te.compute((s.kernel, s.kernel, s.cw, s.w_bits, s.filters),
                      lambda ry, rx, rc, j, f: stored[f // g, ry, rx, rc, j, f % g], name="weight_view")
    return stored, view


def group_weights(packed, group: int):
    """pack_conv_weights' (KH, KW, Cw, B, O) words in ConvSpec.w_group's layout (O/group, KH, KW, Cw, B, group)."""
    import numpy as np

    kh, kw, cw, b, o = packed.shape
    return np.ascontiguousarray(packed.reshape(kh, kw, cw, b, o // group, group).transpose(4, 0, 1, 2, 3, 5))


def _check_conv(s: ConvSpec) -> None:
    _check(s.mode, s.a_bits, s.w_bits, s.word, "bitserial conv2d")
    if s.glue_out_bits is not None:
        _check(s.mode, s.glue_out_bits, s.w_bits, s.out_word, "bitserial conv2d glue")
    if s.pad_value not in (0, 1) or (s.pad_value and (s.mode != "bipolar" or s.a_bits != 1)):
        raise CompileError(f"bitserial conv2d: pad_value {s.pad_value} needs 0, or 1 with bipolar 1-bit activations")
    oh, ow = s.out_hw
    if oh < 1 or ow < 1:
        raise CompileError(f"bitserial conv2d: a {s.kernel}x{s.kernel} kernel does not fit {s.height}x{s.width} input")
    if s.glue_out_bits is not None and s.residual not in (None, "codes", "glue"):
        raise CompileError(f"bitserial conv2d: residual '{s.residual}' is not one of None, 'codes', 'glue'")
    if s.thresholds and (s.glue_out_bits is None or s.glue_out_bits > 2 or s.residual is not None):
        raise CompileError("bitserial conv2d: threshold glue needs glue_out_bits <= 2 (three thresholds) and no residual")


def glue_thresholds(lshift, offset, rshift, out_bits: int) -> list:
    """T_k = min acc with ((acc << l) + off) >> r >= k, k = 1..3 (int32 (O,) each; k > 2^out_bits - 1: unused,
    INT32_MAX): acc * 2^l >= k * 2^r - off, so T_k = ceil((k * 2^r - off) / 2^l), clipped to int32 (acc is)."""
    import numpy as np

    l, off, r = (np.asarray(v, np.int64) for v in (lshift, offset, rshift))
    hi = np.iinfo(np.int32).max
    out = []
    for k in range(1, 4):
        t = -((off - (np.int64(k) << r)) >> l)  # ceil(a / 2^l) = -floor(-a / 2^l), >> is floor on int64
        out.append(np.clip(t, np.iinfo(np.int32).min, hi).astype(np.int32) if k < 1 << out_bits
                   else np.full(t.shape, hi, np.int32))
    return out


def _unipolar_acc(s: ConvSpec, data, wgt):
    """int32 (N, OH, OW, O): the popcount kernel (popc.py) on the zero-padded input (code 0 is the value 0)."""
    from tvm import te, tirx

    t, l, b, r = pad4(s.padding)
    src = data
    if t or l or b or r:
        zero = tirx.const(0, s.word)
        src = te.compute(
            (s.batch, s.height + t + b, s.width + l + r, s.cw, s.a_bits),
            lambda n, y, x, c, i: tirx.if_then_else(
                tirx.all(y >= t, y < s.height + t, x >= l, x < s.width + l), data[n, y - t, x - l, c, i], zero),
            name="pad")
    return unipolar_conv(src, wgt, s)


def _bipolar_acc(s: ConvSpec, data, wgt):
    """int32 (N, OH, OW, O) as per-term sums; a padded tap is skipped, not read as -1 (quant.bitserial)."""
    from tvm import te, tirx

    wbits = WORD_BITS[s.word]
    t, l, _, _ = pad4(s.padding)
    ry, rx = te.reduce_axis((0, s.kernel), "ry"), te.reduce_axis((0, s.kernel), "rx")
    rc = te.reduce_axis((0, s.cw), "rc")
    ib, jb = te.reduce_axis((0, s.a_bits), "ib"), te.reduce_axis((0, s.w_bits), "jb")
    zero = tirx.const(0, s.word)

    def acc(n, y, x, f):
        iy, ix = y * s.stride + ry - t, x * s.stride + rx - l
        valid = tirx.all(iy >= 0, iy < s.height, ix >= 0, ix < s.width)
        nbits = tirx.min(wbits, s.channels - rc * wbits).astype("int32")
        if s.pad_value:  # +1 in every real channel of the word; tail bits stay 0, as in the weights
            ones = tirx.const((1 << wbits) - 1, s.word) >> (wbits - nbits).astype(s.word)
            a = tirx.if_then_else(valid, data[n, iy, ix, rc, ib], ones)
        else:
            a = tirx.if_then_else(valid, data[n, iy, ix, rc, ib], zero)
        term = _pair_term(a, wgt[ry, rx, rc, jb, f], s.mode, nbits, (ib + jb).astype("int32"))
        return te.sum(term if s.pad_value else tirx.if_then_else(valid, term, 0), axis=[ry, rx, rc, ib, jb])

    return te.compute((s.batch, *s.out_hw, s.filters), acc, name="conv")


def _residual(s: ConvSpec):
    """(extra inputs, term(n, y, x, f) or None) of the block's shortcut (ConvSpec.residual)."""
    from tvm import te, tirx

    oh, ow = s.out_hw
    if s.residual == "codes":
        owb = WORD_BITS[s.out_word]
        res = te.placeholder((s.batch, oh, ow, -(-s.filters // owb), s.glue_out_bits), s.out_word, name="residual")

        def codes(n, y, x, f):
            bit = (f % owb).astype(s.out_word)
            code = sum(((res[n, y, x, f // owb, b] >> bit) & tirx.const(1, s.out_word)).astype("int32") << b
                       for b in range(s.glue_out_bits))
            return code << s.res_lshift if s.res_lshift else code

        return [res], codes
    if s.residual == "glue":
        racc = te.placeholder((s.batch, oh, ow, s.filters), "int32", name="res_acc")
        rl, ro, rr = (te.placeholder((s.filters,), "int32", name=f"res_{k}") for k in ("lshift", "offset", "rshift"))
        return [racc, rl, ro, rr], lambda n, y, x, f: ((racc[n, y, x, f] << rl[f]) + ro[f]) >> rr[f]
    return [], None


def conv2d_compute(spec: ConvSpec | None = None, /, **fields):
    """TE tensors of a bitserial conv2d (NHWC, ConvSpec: a spec, or its fields as keywords); returns
    (inputs, output) for create_prim_func."""
    from tvm import te, tirx

    s = spec if spec is not None else ConvSpec(**fields)
    _check_conv(s)
    data = te.placeholder((s.batch, s.height, s.width, s.cw, s.a_bits), s.word, name="data")
    stored, wgt = _weights(s)
    conv = (_unipolar_acc if s.mode == "unipolar" else _bipolar_acc)(s, data, wgt)
    if s.glue_out_bits is None:
        return [data, stored], conv
    lsh, off, rsh = (te.placeholder((s.filters,), "int32", name=k) for k in ("lshift", "offset", "rshift"))
    extra, res_term = _residual(s)
    qmax = (1 << s.glue_out_bits) - 1

    def thresholds(n, y, x, f):  # lsh, off, rsh hold T_1..T_3 (ConvSpec.thresholds)
        v = conv[n, y, x, f]
        return sum(((v >= t[f]).astype("int32") for t in (lsh, off, rsh)[:qmax]), tirx.const(0, "int32"))

    def glue(n, y, x, f):
        t = ((conv[n, y, x, f] << lsh[f]) + off[f]) >> rsh[f]
        if res_term is not None:
            t = t + res_term(n, y, x, f)
        return tirx.max(tirx.min(t, qmax), 0)

    q = te.compute(conv.shape, thresholds if s.thresholds else glue, name="glue")
    inputs = [data, stored, lsh, off, rsh, *extra]
    if s.mode == "unipolar" and s.filters % WORD_BITS[s.out_word] == 0:  # whole words: the vector bitpack
        return inputs, popc.pack_planes(q, bits=s.glue_out_bits, word=s.out_word)
    return inputs, bitpack(q, bits=s.glue_out_bits, word=s.out_word, name="pack")


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


# ---- build helpers ----------------------------------------------------------------------------

def conv2d_prim_func(*, arch: str | None = None, **spec):
    """A (scheduled when arch is given) PrimFunc for conv2d_compute(**spec) (ConvSpec's fields)."""
    from tvm import te

    inputs, out = conv2d_compute(ConvSpec(**spec))
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
    except (RuntimeError, ValueError) as e:  # tvm 0.27 (tvm_ffi) raises these; it has no tvm.error.TVMError
        raise CompileError(f"bitserial op for target '{target.name}' failed to build: {e}") from e
