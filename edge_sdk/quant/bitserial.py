"""Bitserial numerics in plain numpy: the truth that compiled kernels are tested against.

Conventions (the compiled ops in `edge_sdk.compiler.bitserial.kernels` follow them exactly):

Codes and values
  Every low-bit tensor is stored as unsigned integer *codes* u in {0 .. 2^b - 1}. What a code means
  depends on its role:
  - unipolar activations: value = u (Riptide: a ReLU then a quantizer gives 0 .. 2^a - 1);
  - weights (both modes) and bipolar activations: value = 2u - (2^b - 1), so that every bit plane j
    is a {-1, +1} plane (bit 1 -> +1, bit 0 -> -1) weighted by 2^j. 1-bit: {-1, +1};
    2-bit: {-3, -1, +1, +3} (a symmetric, zero-free 2-bit scheme; the scale is per output channel).
  Complementing a weight code (u -> 2^b - 1 - u) negates its value exactly; the fused glue uses this to
  fold a negative BN scale into the weights.

Bit packing (LSB-first)
  Along the pack axis, element c goes to word c // W, bit c % W (bit 0 = least significant), W the
  word width (8, 16, 32 or 64). Bit plane i of code u is (u >> i) & 1 and lives at index i of a new
  bit-plane axis. Positions past the last element of a partly filled word are 0 in every plane.

Dot products (over one packed word, summed over words and bit-plane pairs i, j, shifted by i + j)
  unipolar: popcount(a_i & w_j) - popcount(a_i & ~w_j)          (each popcount cast to int first)
  bipolar:  nbits - 2 * popcount(a_i ^ w_j)  (= 2*popcount(xnor) - nbits), nbits = real elements
  The zero tail bits make both exact: a_i = 0 there in unipolar, a_i ^ w_j = 0 there in bipolar.

Padding (conv2d)
  The result always equals a plain integer convolution with *zero-valued* padding.
  - unipolar: pad activation codes with 0, which is the value 0; nothing else needed.
  - bipolar: no code has the value 0 (every plane is +-1), so a padded tap is *skipped*: its whole
    term (nbits - 2*popcount) is masked to 0 by the tap's in-bounds test. No weight-dependent
    correction table is needed (Larq's alternative), at the cost of one select per tap.
"""
from __future__ import annotations

import numpy as np

WORD_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
MODES = ("unipolar", "bipolar")


def word_bits(word: str) -> int:
    try:
        return WORD_BITS[word]
    except KeyError:
        raise ValueError(f"bitpack word type '{word}' is not one of {sorted(WORD_BITS)}") from None


def _check_codes(x: np.ndarray, bits: int, what: str) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{what}: expected integer codes, got dtype {x.dtype}")
    if bits < 1 or bits > 8:
        raise ValueError(f"{what}: bit width {bits} is outside 1..8")
    if x.size and (x.min() < 0 or x.max() > (1 << bits) - 1):
        raise ValueError(f"{what}: codes must lie in 0..{(1 << bits) - 1} for {bits} bits, "
                         f"got {x.min()}..{x.max()}")
    return x


def bitpack(x, *, bits: int, pack_axis: int, bit_axis: int, word: str = "uint32") -> np.ndarray:
    """Pack codes along `pack_axis` into words, adding a bit-plane axis of length `bits`.

    `bit_axis` is the index of the new bit-plane axis in the *output*; the packed axis keeps its
    position among the other axes (so it shifts right by one when bit_axis <= pack_axis).
    Example: NHWC activations, pack_axis=3, bit_axis=4 -> (N, H, W, ceil(C/W), bits).
    """
    x = _check_codes(x, bits, "bitpack")
    wb, dtype = word_bits(word), np.dtype(word)
    pack_axis = pack_axis % x.ndim
    bit_axis = bit_axis % (x.ndim + 1)
    moved = np.moveaxis(x, pack_axis, -1)
    n = moved.shape[-1]
    nw = -(-n // wb)
    padded = np.zeros(moved.shape[:-1] + (nw * wb,), dtype=np.uint64)
    padded[..., :n] = moved
    padded = padded.reshape(moved.shape[:-1] + (nw, wb))
    planes = (padded[..., None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)  # (..., nw, wb, bits)
    words = np.bitwise_or.reduce(planes << np.arange(wb, dtype=np.uint64)[:, None], axis=-2)
    out = np.moveaxis(words.astype(dtype), -2, pack_axis)  # (..., nw at pack_axis, ..., bits)
    return np.moveaxis(out, -1, bit_axis)


def bitunpack(packed, *, length: int, pack_axis: int, bit_axis: int) -> np.ndarray:
    """Inverse of `bitpack`: codes (int64) with `length` elements on the unpacked axis.

    `pack_axis` is the axis index the packed words had in the *unpacked* array (as given to bitpack).
    """
    packed = np.asarray(packed)
    wb = packed.dtype.itemsize * 8
    bit_axis = bit_axis % packed.ndim
    bits = packed.shape[bit_axis]
    planes_last = np.moveaxis(packed, bit_axis, -1).astype(np.uint64)  # pack_axis is now correct
    words = np.moveaxis(planes_last, pack_axis, -2)  # (..., nw, bits)
    k = np.arange(wb, dtype=np.uint64)
    bitsk = (words[..., :, None, :] >> k[:, None]) & np.uint64(1)  # (..., nw, wb, bits)
    codes = (bitsk << np.arange(bits, dtype=np.uint64)).sum(axis=-1)
    codes = codes.reshape(codes.shape[:-2] + (-1,))[..., :length]
    return np.moveaxis(codes.astype(np.int64), -1, pack_axis)


# ---- quantization to codes ------------------------------------------------------------------

def quantize_activations(x, *, bits: int, step: float) -> np.ndarray:
    """Unipolar a-bit codes: clip(floor(x / step + 0.5), 0, 2^a - 1). The clip at 0 is the ReLU."""
    q = np.floor(np.asarray(x, dtype=np.float64) / step + 0.5)
    return np.clip(q, 0, (1 << bits) - 1).astype(np.int64)


def quantize_weights(w, *, bits: int, out_axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Codes and per-output-channel scales s with w ~= s * (2u - (2^b - 1)).

    1 bit: u = (w >= 0), s = mean |w| (XNOR-Net's optimal scale for sign(w)).
    2 bit: levels s * {-3, -1, +1, +3} with s = mean |w| / 2 (levels straddle the typical |w|),
    u = clip(floor((w / s + 3) / 2 + 0.5), 0, 3), i.e. round to the nearest level.
    """
    if bits not in (1, 2):
        raise ValueError(f"weights: {bits}-bit weights are not supported (1 or 2)")
    w = np.asarray(w, dtype=np.float64)
    axes = tuple(i for i in range(w.ndim) if i != out_axis % w.ndim)
    mean_abs = np.mean(np.abs(w), axis=axes, keepdims=True)
    mean_abs = np.where(mean_abs > 0, mean_abs, 1.0)
    if bits == 1:
        return (w >= 0).astype(np.int64), mean_abs.reshape(-1)
    s = mean_abs / 2
    u = np.clip(np.floor((w / s + 3) / 2 + 0.5), 0, 3).astype(np.int64)
    return u, s.reshape(-1)


def code_values(codes, *, bits: int, signed: bool) -> np.ndarray:
    """Integer value of codes: u (unsigned: unipolar activations) or 2u - (2^b - 1) (signed)."""
    codes = np.asarray(codes).astype(np.int64)
    return 2 * codes - ((1 << bits) - 1) if signed else codes


# ---- plain integer references (the independent check) ----------------------------------------

def pad4(padding) -> tuple[int, int, int, int]:
    """int p | (ph, pw) | (top, left, bottom, right) -> (top, left, bottom, right)."""
    if isinstance(padding, (int, np.integer)):
        p = (int(padding),) * 4
    elif len(padding) == 2:
        p = (int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1]))
    elif len(padding) == 4:
        p = tuple(int(v) for v in padding)
    else:
        raise ValueError(f"padding {padding!r}: expected an int, (ph, pw) or (top, left, bottom, right)")
    if min(p) < 0:
        raise ValueError(f"padding {padding!r}: negative padding")
    return p


def conv_out_size(size: int, k: int, stride: int, before: int, after: int) -> int:
    return (size + before + after - k) // stride + 1


def conv2d_nhwc_int(x, w, *, stride: int = 1, padding=0) -> np.ndarray:
    """Plain int64 conv2d: x (N, H, W, C) values, w (KH, KW, C, O) values, zero padding."""
    x, w = np.asarray(x, dtype=np.int64), np.asarray(w, dtype=np.int64)
    t, l, b, r = pad4(padding)
    kh, kw = w.shape[:2]
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
    oh = conv_out_size(x.shape[1], kh, stride, t, b)
    ow = conv_out_size(x.shape[2], kw, stride, l, r)
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]), dtype=np.int64)
    for ry in range(kh):
        for rx in range(kw):
            patch = xp[:, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride]
            out += patch @ w[ry, rx]
    return out


def dense_int(x, w) -> np.ndarray:
    """Plain int64 dense: x (N, K) values, w (K, O) values."""
    return np.asarray(x, dtype=np.int64) @ np.asarray(w, dtype=np.int64)


# ---- bitserial (popcount) references ---------------------------------------------------------

def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"bitserial mode '{mode}' is not one of {MODES}")


def _word_nbits(n: int, wb: int) -> np.ndarray:
    """Real elements in each packed word: W for full words, the remainder for the last one."""
    nw = -(-n // wb)
    return np.minimum(wb, n - wb * np.arange(nw)).astype(np.int64)


def _plane_dot(a, w, mode: str, nbits: np.ndarray) -> np.ndarray:
    """Sum over the word axis (-2 of a, -2 of w) of one bit-plane pair: a (..., nw, 1), w (nw, O)."""
    pc = np.bitwise_count
    if mode == "unipolar":
        return (pc(a & w).astype(np.int64) - pc(a & ~w).astype(np.int64)).sum(axis=-2)
    return (nbits[:, None] - 2 * pc(a ^ w).astype(np.int64)).sum(axis=-2)


def pack_conv_weights(w_codes, *, bits: int, word: str = "uint32") -> np.ndarray:
    """HWIO codes -> (KH, KW, ceil(C/W), bits, O): the layout the compiled conv reads."""
    return bitpack(w_codes, bits=bits, pack_axis=2, bit_axis=3, word=word)


def pack_activations(a_codes, *, bits: int, word: str = "uint32") -> np.ndarray:
    """(..., C) codes -> (..., ceil(C/W), bits): NHWC activations, dense rows."""
    a = np.asarray(a_codes)
    return bitpack(a, bits=bits, pack_axis=a.ndim - 1, bit_axis=a.ndim, word=word)


def pack_dense_weights(w_codes, *, bits: int, word: str = "uint32") -> np.ndarray:
    """(K, O) codes -> (ceil(K/W), bits, O)."""
    return bitpack(w_codes, bits=bits, pack_axis=0, bit_axis=1, word=word)


def bitserial_conv2d_nhwc(a_codes, w_codes, *, a_bits: int, w_bits: int, mode: str,
                          stride: int = 1, padding=0, word: str = "uint32") -> np.ndarray:
    """int64 conv over packed bit planes: a (N, H, W, C) codes, w (KH, KW, C, O) codes.

    Equals conv2d_nhwc_int(code_values(a), code_values(w)) with zero-valued padding (see module doc).
    """
    _check_mode(mode)
    _check_codes(a_codes, a_bits, "activations")
    _check_codes(w_codes, w_bits, "weights")
    n, h, wd, c = np.shape(a_codes)
    kh, kw, c2, o = np.shape(w_codes)
    if c != c2:
        raise ValueError(f"conv2d: activations have {c} channels, weights {c2}")
    ap = pack_activations(a_codes, bits=a_bits, word=word)  # (N, H, W, Cw, A)
    wp = pack_conv_weights(w_codes, bits=w_bits, word=word)  # (KH, KW, Cw, B, O)
    nbits = _word_nbits(c, word_bits(word))
    t, l, b, r = pad4(padding)
    oh, ow = conv_out_size(h, kh, stride, t, b), conv_out_size(wd, kw, stride, l, r)
    app = np.pad(ap, ((0, 0), (t, b), (l, r), (0, 0), (0, 0)))
    valid = np.pad(np.ones((h, wd), dtype=bool), ((t, b), (l, r)))
    out = np.zeros((n, oh, ow, o), dtype=np.int64)
    for ry in range(kh):
        for rx in range(kw):
            sl = (slice(ry, ry + stride * (oh - 1) + 1, stride), slice(rx, rx + stride * (ow - 1) + 1, stride))
            patch = app[:, sl[0], sl[1]]  # (N, OH, OW, Cw, A)
            tap_ok = valid[sl[0], sl[1]][None, :, :, None]  # (1, OH, OW, 1)
            for i in range(a_bits):
                for j in range(w_bits):
                    d = _plane_dot(patch[..., i][..., None], wp[ry, rx, :, j, :], mode, nbits)
                    if mode == "bipolar":
                        d = np.where(tap_ok, d, 0)  # a padded tap is skipped, not a -1 tap
                    out += d << (i + j)
    return out


def bitserial_dense(a_codes, w_codes, *, a_bits: int, w_bits: int, mode: str,
                    word: str = "uint32") -> np.ndarray:
    """int64 dense over packed bit planes: a (N, K) codes, w (K, O) codes."""
    _check_mode(mode)
    _check_codes(a_codes, a_bits, "activations")
    _check_codes(w_codes, w_bits, "weights")
    k = np.shape(a_codes)[1]
    if np.shape(w_codes)[0] != k:
        raise ValueError(f"dense: activations have {k} features, weights {np.shape(w_codes)[0]}")
    ap = pack_activations(a_codes, bits=a_bits, word=word)  # (N, Kw, A)
    wp = pack_dense_weights(w_codes, bits=w_bits, word=word)  # (Kw, B, O)
    nbits = _word_nbits(k, word_bits(word))
    out = np.zeros((ap.shape[0], wp.shape[2]), dtype=np.int64)
    for i in range(a_bits):
        for j in range(w_bits):
            out += _plane_dot(ap[:, :, i][..., None], wp[:, j, :], mode, nbits) << (i + j)
    return out


def reference_values(a_codes, w_codes, *, a_bits: int, w_bits: int, mode: str):
    """(activation values, weight values) for the plain integer reference."""
    _check_mode(mode)
    return (code_values(a_codes, bits=a_bits, signed=mode == "bipolar"),
            code_values(w_codes, bits=w_bits, signed=True))
