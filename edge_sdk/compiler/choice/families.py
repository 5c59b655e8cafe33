"""Today's kernel families with more than one schedule, as compile/choice Sites, and their candidates.

    float.gemm   1x1 stride-1 convs and dense layers (ops/conv2d.gemm): the loop order over register
                 tiles, conv2d.GEMM_ORDERS (rows outer, weight panels outer, blocks of panels)
    float.conv   KxK convs: the direct conv with pixels or weight panels outer (ops/conv2d.conv2d_direct),
                 the implicit im2col on the A53 tile (ops/conv_im2col_a53) where it applies, and for 3x3
                 stride 1, Winograd F(2x2) and F(4x4) (ops/winograd.py), packed and planar
    float.dw     depthwise convs (ops/depthwise.py): channel blocks outside or inside the pixel tiles

Each *_site function returns the Site of one layer: the chooser builds it alone with each candidate,
and the compile (ops/fuse.py) emits the kernel of the schedule chosen. The references are numpy in
float64 (independent of TVM), in the kernel's layout without the channel padding.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.compiler.choice import Built, Site, Spec, register_candidates
from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops import conv_im2col_a53 as im2col
from edge_sdk.compiler.ops import winograd
from edge_sdk.compiler.ops.common import Epilogue, Simd, round_up
from edge_sdk.compiler.ops.depthwise import depthwise_conv2d
from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act


def np_activate(y: np.ndarray, act: tuple, *vectors) -> np.ndarray:
    """ops/activation.py's activations in numpy: the numpy reference of act's graph/ops/float_act entry;
    `vectors`: per-channel parameters that the kernel reads from an argument (PRELU's slopes)."""
    d = float_act.of(act[0])
    if d is None:
        raise ValueError(f"unknown activation {act!r}")
    return registry.resolve(d.reference)(y, *act[1:], *vectors)


def np_epilogue(y: np.ndarray, bias: np.ndarray, act: tuple, residual=None) -> np.ndarray:
    """The kernels' epilogue in numpy: + bias [+ residual], then the activation; `bias` (2, C) for a PRELU
    epilogue (the biases, then the slopes: common.Epilogue.bias_rows)."""
    rows = np.atleast_2d(np.asarray(bias, np.float64))
    y = y + rows[0]
    if residual is not None:
        y = y + residual
    return np_activate(y, act, *rows[1:])


def _epi_json(epi: Epilogue) -> dict:
    return {"act": [str(a) if isinstance(a, str) else float(a) for a in epi.act], "residual": epi.residual,
            "gate": epi.gate}


# -- float.gemm ------------------------------------------------------------------------------------

@register_candidates("float.gemm")
def _gemm_orders(workload: dict) -> list[str]:
    return list(conv_ops.GEMM_ORDERS) if workload["m"] > 1 else []


def gemm_site(simd: Simd, m: int, wkn: np.ndarray, bias: np.ndarray, epi: Epilogue, nr: int, *, layer: str = "") -> Site:
    """C (m, n) = act(A (m, k) [* G (k,)] @ W (k, n) + bias [+ R (m, n)])."""
    k, n = wkn.shape
    npad = round_up(n, nr)
    workload = {"m": m, "k": k, "n": n, "nr": nr, "isa": simd.isa, **_epi_json(epi)}
    acts = [Spec((m, k), "float32")] + ([Spec((k,), "float32")] if epi.gate else []) + (
        [Spec((m, n), "float32")] if epi.residual else [])

    def build(schedule: str, name: str, xs: list[np.ndarray]) -> Built:
        func = conv_ops.gemm(m, k, npad, simd, epi=epi, nr=nr, name=name, schedule=schedule)
        args = [xs[0], conv_ops.pack_gemm_weight(wkn, nr), conv_ops.pad_bias(bias, npad)]
        rest = list(xs[1:])
        if epi.gate:
            args.append(rest.pop(0))
        if epi.residual:
            r = np.zeros((m, npad), "float32")
            r[:, :n] = rest.pop(0)
            args.append(r)
        return Built(func, args, Spec((m, npad), "float32"))

    def reference(xs: list[np.ndarray]) -> np.ndarray:
        a = xs[0].astype(np.float64)
        rest = list(xs[1:])
        if epi.gate:
            a = a * rest.pop(0).astype(np.float64)
        return np_epilogue(a @ wkn.astype(np.float64), bias, epi.act, rest.pop(0) if epi.residual else None)

    return Site("float.gemm", workload, build, acts, reference, rtol=1e-4, atol=1e-4, layer=layer)


# -- float.conv ------------------------------------------------------------------------------------

DIRECT = ("direct_pixels_outer", "direct_weights_outer")
IM2COL = "direct_im2col"  # ops/conv_im2col_a53 by name: the strided convs' rule, a candidate at stride 1 too
WINOGRAD = {"winograd2": 2, "winograd4": 4}
# LLVM's tile over planar V / M (ops/winograd.conv2d_winograd_planar), where the rule takes the packed V
# panels on the A53 assembly tile (943d4d1): the planar one priced dearer on ResNet18's four 3x3 s1 layers
# alone (float2's table), but the two differ in memory terms, so they are priced per layer
PLANAR = {"winograd2_planar": 2, "winograd4_planar": 4}


@register_candidates("float.conv")
def _conv_schedules(workload: dict) -> list[str]:
    names = list(DIRECT)
    simd = Simd(workload["isa"], 4, 32)
    if im2col.applies(simd, workload["shape"], workload["kernel"], workload["strides"], workload["pad"], workload["nr"]):
        names.append(IM2COL)
    if (tuple(workload["kernel"]) == (3, 3) and tuple(workload["strides"]) == (1, 1) and workload["shape"][0] == 1
            and min(workload["shape"][3], workload["cout"]) >= winograd.OFFERED_MIN_CHANNELS and len(workload["pad"]) == 4):
        names += list(WINOGRAD) + (list(PLANAR) if workload["isa"] == "neon" else [])
    return names


def conv_plan(simd: Simd, shape, kernel, strides, pad, cout: int, schedule: str) -> tuple[int | None, str]:
    """(Winograd tile m or None for the direct conv, the direct conv's schedule or, with a Winograd m,
    "planar" / "default" for winograd.conv2d_winograd_planar / conv2d_winograd) for a schedule name."""
    if schedule == "default":
        fills = len(pad) > 4
        m = None if fills else winograd.choose_m(simd, shape, kernel, strides, cout, pad=pad)
        return m, "default"
    if schedule in WINOGRAD:
        return WINOGRAD[schedule], "default"
    if schedule in PLANAR:
        return PLANAR[schedule], "planar"
    return None, schedule.removeprefix("direct_")


def winograd_kernel(plan: str):
    """The Winograd builder of conv_plan's second item (same signature)."""
    return winograd.conv2d_winograd_planar if plan == "planar" else winograd.conv2d_winograd


def _pad_np(x: np.ndarray, pad) -> np.ndarray:
    pt, pl, pb, pr = pad[:4]
    n, h, w, c = x.shape
    out = np.empty((n, h + pt + pb, w + pl + pr, c), np.float64)
    out[...] = np.asarray(pad[4], np.float64) if len(pad) > 4 else 0.0
    out[:, pt:pt + h, pl:pl + w, :] = x
    return out


def np_conv(x: np.ndarray, w_hwio: np.ndarray, strides, pad) -> np.ndarray:
    """NHWC conv in float64 (padding (top, left, bottom, right[, per-channel fills]))."""
    xp = _pad_np(x.astype(np.float64), pad)
    kh, kw, _, co = w_hwio.shape
    sh, sw = strides
    oh = (xp.shape[1] - kh) // sh + 1
    ow = (xp.shape[2] - kw) // sw + 1
    y = np.zeros((x.shape[0], oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nhwc,co->nhwo", xp[:, i:i + sh * oh:sh, j:j + sw * ow:sw, :], w_hwio[i, j].astype(np.float64))
    return y


def conv_site(simd: Simd, shape, w_hwio: np.ndarray, strides, pad, bias: np.ndarray, epi: Epilogue, *,
              layer: str = "") -> Site:
    """A KxK conv (NHWC, packed weights, epilogue fused), direct or Winograd by schedule."""
    kh, kw, ci, co = w_hwio.shape
    nr = conv_ops.choose_nr(simd, 2, co)
    cpad = round_up(co, nr)
    pad_json = [int(p) for p in pad[:4]] + ([[float(f) for f in pad[4]]] if len(pad) > 4 else [])
    workload = {"shape": list(shape), "kernel": [kh, kw], "strides": list(strides), "pad": pad_json, "cout": co,
                "nr": nr, "isa": simd.isa, **_epi_json(epi)}
    n = shape[0]
    oh = (shape[1] + pad[0] + pad[2] - kh) // strides[0] + 1
    ow = (shape[2] + pad[1] + pad[3] - kw) // strides[1] + 1
    acts = [Spec(tuple(shape), "float32")] + ([Spec((n, oh, ow, co), "float32")] if epi.residual else [])

    def build(schedule: str, name: str, xs: list[np.ndarray]) -> Built:
        m, direct = conv_plan(simd, shape, (kh, kw), strides, pad, co, schedule)
        if m is not None:
            func = winograd_kernel(direct)(tuple(shape), tuple(pad[:4]), cpad, m, simd, epi=epi, nr=nr, name=name)
            wpack = winograd.transform_weight(w_hwio, m, nr)
        else:
            func = conv_ops.conv2d_direct(tuple(shape), (kh, kw), strides, pad, cpad, simd, epi=epi, name=name,
                                          schedule=direct)
            wpack = conv_ops.pack_conv_weight(w_hwio, nr)
        args = [xs[0], wpack, conv_ops.pad_bias(bias, cpad)]
        if epi.residual:
            r = np.zeros((n, oh, ow, cpad), "float32")
            r[..., :co] = xs[1]
            args.append(r)
        return Built(func, args, Spec((n, oh, ow, cpad), "float32"))

    def reference(xs: list[np.ndarray]) -> np.ndarray:
        return np_epilogue(np_conv(xs[0], w_hwio, strides, pad), bias, epi.act, xs[1] if epi.residual else None)

    # Winograd F(4x4) rounds more (winograd.py: 4e-6..1e-5 of max |y|): the tolerance is relative to the output
    return Site("float.conv", workload, build, acts, reference, rtol=1e-3, atol=1e-3, layer=layer)


# -- float.dw --------------------------------------------------------------------------------------

@register_candidates("float.dw")
def _dw_orders(workload: dict) -> list[str]:
    return ["channels_outer", "pixels_outer"]


def dw_site(simd: Simd, shape, w_hwc: np.ndarray, strides, pad, bias: np.ndarray, epi: Epilogue, multiplier: int, *,
            layer: str = "") -> Site:
    """A depthwise conv (weights (KH, KW, C*M)), epilogue fused."""
    kh, kw, c = w_hwc.shape
    n = shape[0]
    oh = (shape[1] + pad[0] + pad[2] - kh) // strides[0] + 1
    ow = (shape[2] + pad[1] + pad[3] - kw) // strides[1] + 1
    workload = {"shape": list(shape), "kernel": [kh, kw], "strides": list(strides), "pad": [int(p) for p in pad],
                "multiplier": multiplier, "isa": simd.isa, **_epi_json(epi)}
    acts = [Spec(tuple(shape), "float32")] + ([Spec((n, oh, ow, c), "float32")] if epi.residual else [])

    def build(schedule: str, name: str, xs: list[np.ndarray]) -> Built:
        func = depthwise_conv2d(tuple(shape), (kh, kw), strides, pad, simd, epi=epi, multiplier=multiplier,
                                name=name, schedule=schedule)
        return Built(func, [xs[0], w_hwc, bias.astype("float32").reshape(-1), *xs[1:]], Spec((n, oh, ow, c), "float32"))

    def reference(xs: list[np.ndarray]) -> np.ndarray:
        xp = _pad_np(xs[0], pad)
        src = np.repeat(xp, multiplier, axis=3) if multiplier > 1 else xp
        y = np.zeros((n, oh, ow, c))
        for i in range(kh):
            for j in range(kw):
                y += src[:, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1], :] * w_hwc[i, j]
        return np_epilogue(y, bias, epi.act, xs[1] if epi.residual else None)

    return Site("float.dw", workload, build, acts, reference, rtol=1e-4, atol=1e-4, layer=layer)
