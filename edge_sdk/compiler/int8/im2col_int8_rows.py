"""The pre-padded im2col of the 8-bit GEMM (gemm_int8_smull_neon.py) for convs whose channels are not a
multiple of 16 (the 7x7x3 and 3x3x3 stems): rows copied as 8-byte vector moves, not byte by byte.

The flattened layout (a (KH*KW*CI) row cut in 16-byte blocks) makes every byte of a row its own tap:
a division by CI, a bounds test and a select per byte (ResNet18's 7x7x3 stem: 90 of its 122 M modelled
cycles went into that copy). Here the input is first padded once with the zero point into rows of
bytes, xpad[n, y, x*CI + c], so a kernel row's taps (kx, c) are KW*CI contiguous bytes. Each kernel row
takes HPS 8-byte halves of the K row (KW*CI rounded up to 8): half h of a 16-byte block b is kernel row
(2b + h) // HPS, bytes (2b + h) % HPS * 8 .. + 8 from the pixel's first tap. The bytes past KW*CI (and
the K pad) read real input or the padding, against zero weights, so they add 0; xpad is made large
enough that they stay in bounds. Applies with dilation 1 along x (the taps of a row are then adjacent).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from edge_sdk.compiler.ops.common import round_up

HALF = 8  # bytes a vector copy moves (ldr d / str d)
KB, NR = 16, 4


def halves(kh: int, kw: int, ci: int, dilation_w: int) -> int | None:
    """8-byte halves per kernel row of the pre-padded layout, or None where it does not apply."""
    if kh * kw == 1 or ci % KB == 0 or dilation_w != 1:
        return None
    return -(-kw * ci // HALF)


def blocks(kh: int, hps: int) -> int:
    """16-byte blocks of a packed row."""
    return round_up(kh * hps * HALF, KB) // KB


def pack_weight_rows(w_hwio: np.ndarray, hps: int) -> np.ndarray:
    """(KH, KW, CI, CO) int8 -> int8 (CO/4, NB, 4, 16): kernel row ry's KW*CI weights at ry*HPS*8, zeros
    elsewhere (the bytes the copy moves past a row's taps and the K pad)."""
    kh, kw, ci, co = w_hwio.shape
    cop, nb = round_up(co, NR), blocks(kh, hps)
    rows = np.zeros((cop, kh, hps * HALF), np.int8)
    rows[:co, :, :kw * ci] = w_hwio.transpose(3, 0, 1, 2).reshape(co, kh, kw * ci)
    flat = np.zeros((cop, nb * KB), np.int8)
    flat[:, :kh * hps * HALF] = rows.reshape(cop, -1)
    return np.ascontiguousarray(flat.reshape(cop // NR, NR, nb, KB).transpose(0, 2, 1, 3))


def padded_rows(x, kh: int, hps: int, geom, in_zp: int):
    """xpad[n, y, x*CI + c] = x, or the zero point outside it: every row and byte the copy reads."""
    n, h, w_, ci = (int(d) for d in x.shape)
    oh, ow = geom.out_hw
    (sh, sw), (dh, _) = geom.stride, geom.dilation
    pt, _, pl, _ = geom.pads
    last_row = (2 * blocks(kh, hps) - 1) // hps  # the K pad's halves read past the last kernel row
    hp = (oh - 1) * sh + last_row * dh + 1
    wc = (ow - 1) * sw * ci + hps * HALF

    def val(a, y, f):
        yy, xx, c = y - pt, f // ci - pl, f % ci
        return tirx.if_then_else(tirx.all(yy >= 0, yy < h, xx >= 0, xx < w_), x[a, yy, xx, c],
                                 tirx.const(in_zp, "int8"))

    return te.compute((n, hp, wc), val, name="xpad")


def a8_rows(x, kh: int, hps: int, geom, in_zp: int, mr: int):
    """a8[tile, NB, row, 16] of pack_weight_rows' layout, read from padded_rows(x)."""
    xp = padded_rows(x, kh, hps, geom, in_zp)
    n, ci = int(x.shape[0]), int(x.shape[3])
    oh, ow = geom.out_hw
    (sh, sw), (dh, _) = geom.stride, geom.dilation
    m = n * oh * ow
    mp = round_up(m, mr)
    nb = blocks(kh, hps)

    def val(io, b, ii, t):
        i = io * mr + ii
        i = te.min(i, m - 1) if mp != m else i
        hh = b * 2 + t // HALF
        ry, off = hh // hps, hh % hps * HALF + t % HALF
        a, y, z = i // (oh * ow), i // ow % oh, i % ow
        return xp[a, y * sh + ry * dh, z * sw * ci + off]

    return te.compute((mp // mr, nb, mr, KB), val, name="a8"), nb
