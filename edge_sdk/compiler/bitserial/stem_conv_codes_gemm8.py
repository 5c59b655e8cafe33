"""The integer stem's conv on the int8 backend's 8-bit A53 tile with its requantize replaced by threshold
compares: int8 rows x int8 weights -> the a-bit codes (aarch64 NEON).

    t = code_thresholds(mult, shift, a_bits)       # None: not monotone (keep kernels.conv2d)
    func, wp, npad = conv_codes_gemm8(x_shape, w_hwio, geom, t.shape[0], in_zp=..., name=...)
    # arguments: x (int8 NHWC), wp, bias (npad,) int32, thresholds (2^a - 1, npad) int32 -> (M, npad) int8

The stem's codes are clamp(MBQM(acc + bias, M, shift), 0, 2^a - 1) (quant/bitserial_net_ref.int8_stem_requantize,
TFLite's fixed-point multiply). With M > 0 that is non-decreasing in acc, so code >= j iff acc + bias >= T_j, the
least int32 value whose MBQM reaches j (found per channel by bisection over the numpy MBQM: exact). The kernel
is compiler/int8/gemm_int8_smull_neon's default conv path, called, not changed: the same pre-padded im2col rows
(im2col_int8_rows), packed weights, accumulator compute and schedule (_acc_strip / _acc_sums, _schedule: its
default step, the strip of tiles or the ldr64 tile, conv_gemm8's rule); only the elementwise output block differs: 2^a - 1 compares and adds a 4-lane vector, where the
requantize is a sqrdmulh, a rounding fixup, srshl, the zero point and a clamp (compiler/int8/fixedpoint
mbqm32_neon; ResNet18's stem requantize ~3.3 M of its ~39 M modelled cycles, r18i9's note).
"""
from __future__ import annotations

import numpy as np

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def code_thresholds(multiplier, shift, a_bits: int) -> np.ndarray | None:
    """(2^a - 1, C) int64 T_j (module docstring) on the biased accumulator, or None when a channel's
    multiplier is not positive (not monotone) or its shift is a left shift (the 8-bit tile's path refuses it)."""
    from edge_sdk.quant.int8 import multiply_by_quantized_multiplier as mbqm

    mult, sh = np.atleast_1d(np.asarray(multiplier, np.int64)), np.atleast_1d(np.asarray(shift, np.int64))
    c = mult.shape[0]
    if np.any(mult <= 0) or np.any(sh > 0):
        return None
    out = np.zeros(((1 << a_bits) - 1, c), np.int64)
    for j in range(1, (1 << a_bits)):
        lo, hi = np.full(c, I32_MIN, np.int64), np.full(c, I32_MAX, np.int64)  # mbqm(hi) >= j unless never
        never = mbqm(hi, mult, sh) < j
        while np.any(hi - lo > 1):
            mid = (lo + hi) // 2
            up = mbqm(mid, mult, sh) >= j
            hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
        out[j - 1] = np.where(never, I32_MAX, np.where(mbqm(lo, mult, sh) >= j, lo, hi))
    return out


def fits(x_shape, w_hwio: np.ndarray, geom) -> bool:
    """Where the 8-bit tile's pre-padded path applies (gemm_int8_smull_neon.fits, im2col_int8_rows.halves)."""
    from edge_sdk.compiler.int8 import gemm_int8_smull_neon as g8, im2col_int8_rows as rows8

    kh, kw, ci, _ = w_hwio.shape
    m = x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    return g8.fits(w_hwio, m) and rows8.halves(kh, kw, ci, geom.dilation[1]) is not None


def conv_codes_gemm8(x_shape, w_hwio: np.ndarray, geom, levels: int, *, in_zp: int, name: str):
    """PrimFunc out (M, COpad) int8 = number of thresholds t[j, c] the biased accumulator reaches; the 8-bit
    NEON tile (module docstring). Returns (func, packed int8 weight, npad)."""
    from tvm import s_tir, te, tirx

    from edge_sdk.compiler.int8 import gemm_int8_smull_neon as g8, im2col_int8_rows as rows8
    from edge_sdk.compiler.ops.common import finish, round_up

    kh, kw, ci, co = w_hwio.shape
    m = x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    npad, mp = round_up(co, g8.NR), round_up(m, g8.MR)
    hps = rows8.halves(kh, kw, ci, geom.dilation[1])
    x = te.placeholder(tuple(x_shape), "int8", name="x")
    a8, nb = rows8.a8_rows(x, kh, hps, geom, in_zp, g8.MR)
    wp = rows8.pack_weight_rows(w_hwio, hps)
    wt = te.placeholder(wp.shape, "int8", name="w")
    bt = te.placeholder((npad,), "int32", name="bias")
    tt = te.placeholder((levels, npad), "int32", name="thresholds")
    wo = npad > m  # conv_gemm8's "default": its outer order and step (the strip from 2 blocks, else ldr64)
    strip = nb >= 2 and g8.strip_tiles(m, npad, wo) > 1
    if strip:
        acc3 = g8._acc_strip(a8, wt, nb, mp, npad, wo)
        biased = te.compute((mp, npad), lambda i, j: (acc3[i // g8.MR, i % g8.MR, j] if wo else
                                                      acc3[i, j // g8.NR, j % g8.NR]) + bt[j], name="biased")
    else:
        acc = g8._acc_sums(a8, wt, nb, mp, npad)
        biased = te.compute((mp, npad), lambda i, j: acc[i, j] + bt[j], name="biased")

    def codes(i, j):
        v = biased[i, j]
        hits = [tirx.Select(v >= tt[k, j], tirx.const(1, "int32"), tirx.const(0, "int32")) for k in range(levels)]
        total = hits[0]
        for h in hits[1:]:
            total = total + h
        return total.astype("int8")

    out = te.compute((m, npad), codes, name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, tt, out]))
    half_tail = nb >= 2 and not wp[:, -1, :, rows8.HALF:].any()
    g8._schedule(sch, m=m, npad=npad, plain_copy=rows8.HALF, red_b=nb, weights_outer=wo, asm=nb >= 2 and not strip,
                 half_tail=half_tail, strip=strip)
    return finish(sch, name), wp, npad
