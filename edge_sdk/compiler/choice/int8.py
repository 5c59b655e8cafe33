"""The int8 kernel families with more than one schedule, as compile/choice Sites.

    int8.gemm8   convs on the 8-bit NEON tile (compiler/int8/gemm_int8_smull_neon.conv_gemm8):
                 GEMM8_SCHEDULES, the outer tile loop (rows or weight panels) x the 4x4x16 step
                 (with named temporaries, compiler/int8/smull_step_variants' temporary-free one, or
                 compiler/int8/gemm_int8_a53_ldr64's assembly tile with ncnn's A53 operand loads)

The reference is numpy (im2col in int64 over the zero-point-padded input, quant.int8.requantize),
compared bit-exact (rtol = atol = 0).
"""
from __future__ import annotations

import numpy as np

from edge_sdk.compiler.choice import Built, Site, Spec, register_candidates


@register_candidates("int8.gemm8")
def _gemm8_schedules(workload: dict) -> list[str]:
    """Both outer orders with the named-temporary step; the temporary-free step only for 1x1 convs, the
    layers where it once won (1c878bb): on 3x3 convs it priced ~2x (ResNet18 int8, 72d3fff; 28x28x64
    here at 34621c1: 16.8 vs 8.6 M modelled cycles), so pricing it there only costs compile time."""
    from edge_sdk.compiler.int8.gemm_int8_smull_neon import GEMM8_SCHEDULES

    one_by_one = workload["w"][:2] == [1, 1]
    return [s for s in GEMM8_SCHEDULES if one_by_one or not s.endswith("/notmp")]


def np_conv_int8(x: np.ndarray, w_hwio: np.ndarray, bias, rq, geom) -> np.ndarray:
    """(M, CO) int8: requant(sum((x - in_zp) * w) + bias) over the window `geom` (pads: top, bottom, left, right)."""
    from edge_sdk.quant.int8 import requantize

    kh, kw, ci, co = w_hwio.shape
    pt, pb, pl, pr = geom.pads
    (sh, sw), (dh, dw) = geom.stride, geom.dilation
    oh, ow = geom.out_hw
    xp = np.zeros((x.shape[0], x.shape[1] + pt + pb, x.shape[2] + pl + pr, ci), np.int64)
    xp[:, pt:pt + x.shape[1], pl:pl + x.shape[2], :] = x.astype(np.int64) - rq.in_zp
    acc = np.zeros((x.shape[0], oh, ow, co), np.int64)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw, :]
            acc += np.einsum("nhwc,co->nhwo", win, w_hwio[i, j].astype(np.int64))
    if bias is not None:
        acc += np.asarray(bias, np.int64)
    return requantize(acc.reshape(-1, co), rq.multiplier, rq.shift, rq.out_zp, rq.act)


def gemm8_site(x_shape, w_hwio: np.ndarray, bias, folded_bias: np.ndarray, rq, geom, *, layer: str = "") -> Site:
    """A conv on the 8-bit tile: inputs x, packed int8 weights, folded bias, multiplier, right shift."""
    from edge_sdk.compiler.int8 import gemm_int8_smull_neon as g8

    kh, kw, ci, co = w_hwio.shape
    m = x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    workload = {"x": list(x_shape), "w": [kh, kw, ci, co], "stride": list(geom.stride),
                "dilation": list(geom.dilation), "pads": list(geom.pads), "out_hw": list(geom.out_hw),
                "in_zp": int(rq.in_zp), "out_zp": int(rq.out_zp), "act": [int(a) for a in rq.act]}
    shift = np.asarray(rq.shift, np.int64)

    def build(schedule: str, name: str, xs: list[np.ndarray]) -> Built:
        func, wp, npad = g8.conv_gemm8(tuple(x_shape), w_hwio, rq, geom=geom, name=name, schedule=schedule)

        def padded(v):
            out = np.zeros(npad, np.int32)
            out[:co] = v
            return out

        args = [xs[0], wp, padded(folded_bias), padded(rq.multiplier), padded(-shift)]
        return Built(func, args, Spec((m, npad), "int8"))

    return Site("int8.gemm8", workload, build, [Spec(tuple(x_shape), "int8")],
                lambda xs: np_conv_int8(xs[0], w_hwio, bias, rq, geom), rtol=0.0, atol=0.0, layer=layer)
