"""The numpy reference of an imported Larq Compute Engine graph (models/lce.py's LceGraph).

    run_reference(graph, x) -> y      the network in plain numpy (the golden output of a package)

Packed tensors are held as +-1 int64 values, float ones in float64; LCE's semantics are described in
models/lce.py. It shares no code with the compiled path (compiler/bitserial/lce.py) beyond the graph's
geometry (padding, unpacked weights).
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph.lce import ACTIVATIONS, LceGraph, bconv_geometry, pads
from edge_sdk.graph.ops import lce as registry


def _conv(x, w, stride, pad, *, fill=0.0, depthwise=False):
    """NHWC conv (w HWIO, or (KH, KW, C) depthwise) in float64, padded with `fill`."""
    t, l, b, r = pad
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (t, b), (l, r), (0, 0)), constant_values=fill)
    kh, kw = w.shape[:2]
    oh, ow = (xp.shape[1] - kh) // stride[0] + 1, (xp.shape[2] - kw) // stride[1] + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[-1]))
    for ry in range(kh):
        for rx in range(kw):
            patch = xp[:, ry:ry + stride[0] * (oh - 1) + 1:stride[0], rx:rx + stride[1] * (ow - 1) + 1:stride[1]]
            out += patch * w[ry, rx] if depthwise else patch @ np.asarray(w[ry, rx], np.float64)
    return out


def _pool(x, k, stride, pad, how: str):
    t, l, b, r = pad
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=np.nan)
    oh, ow = (xp.shape[1] - k[0]) // stride[0] + 1, (xp.shape[2] - k[1]) // stride[1] + 1
    win = np.stack([xp[:, ry:ry + stride[0] * (oh - 1) + 1:stride[0], rx:rx + stride[1] * (ow - 1) + 1:stride[1]]
                    for ry in range(k[0]) for rx in range(k[1])])
    return np.nanmax(win, axis=0) if how == "max" else np.nanmean(win, axis=0)  # padded taps ignored (TFLite)


def _act(x, code):
    rng = ACTIVATIONS[code]
    if rng is None:
        return x
    lo, hi = rng
    return np.clip(x, lo, np.inf if hi is None else hi)


# ---- each op's reference (graph/ops/lce.py entries name them): f(g, op, env) -> array -------------------

def quantize(g: LceGraph, op, env: dict):
    return np.where(env[op.inputs[0]] < 0, -1, 1)


def dequantize(g: LceGraph, op, env: dict):
    return env[op.inputs[0]].astype(np.float64)


def bmaxpool(g: LceGraph, op, env: dict):
    a, o = env[op.inputs[0]], op.options
    f, s = (o["filter_height"], o["filter_width"]), (o["stride_height"], o["stride_width"])
    return _pool(a.astype(np.float64), f, s, pads(op, a.shape, f, s, o["padding"]), "max").astype(np.int64)


def bconv2d(g: LceGraph, op, env: dict):
    a, o = env[op.inputs[0]], op.options
    w, stride, pad, kk = bconv_geometry(g, op)
    v = np.rint(_conv(a, w, stride, pad, fill=float(o["pad_values"]))).astype(np.int64)
    if g.dtypes[op.outputs[0]] == "int32":
        thr = g.const(op.inputs[4], op, "thresholds").astype(np.int64)
        return np.where((kk - v) // 2 > thr, -1, 1)
    mult = g.const(op.inputs[2], op, "post_activation_multiplier").astype(np.float64)
    bias = g.const(op.inputs[3], op, "post_activation_bias").astype(np.float64)
    return _act(v.astype(np.float64), o["fused_activation_function"]) * mult + bias


def conv2d(g: LceGraph, op, env: dict):
    """CONV_2D and DEPTHWISE_CONV_2D."""
    a, o, k = env[op.inputs[0]], op.options, op.kind
    w = g.const(op.inputs[1], op, "the filter").astype(np.float64)
    w = w.transpose(1, 2, 3, 0) if k == "CONV_2D" else w[0]  # OHWI -> HWIO; (1, KH, KW, C) -> (KH, KW, C)
    pad = pads(op, a.shape, w.shape[:2], o["stride"], o["padding"])
    y = _conv(a, w, o["stride"], pad, depthwise=k == "DEPTHWISE_CONV_2D")
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        y = y + g.const(op.inputs[2], op, "the bias")
    return _act(y, o["act"])


def pool(g: LceGraph, op, env: dict):
    a, o = env[op.inputs[0]], op.options
    return _act(_pool(a, o["filter"], o["stride"], pads(op, a.shape, o["filter"], o["stride"], o["padding"]),
                      "max" if op.kind == "MAX_POOL_2D" else "mean"), o["act"])


def add(g: LceGraph, op, env: dict):
    return _act(env[op.inputs[0]] + _value(g, env, op.inputs[1]), op.options["act"])


def mean(g: LceGraph, op, env: dict):
    axes = tuple(int(v) for v in np.atleast_1d(g.const(op.inputs[1], op, "the axes")))
    return env[op.inputs[0]].mean(axis=axes, keepdims=op.options["keep_dims"])


def fully_connected(g: LceGraph, op, env: dict):
    w = g.const(op.inputs[1], op, "the weights").astype(np.float64)
    y = env[op.inputs[0]].reshape(-1, w.shape[1]) @ w.T
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        y = y + g.const(op.inputs[2], op, "the bias")
    return _act(y, op.options["act"]).reshape(g.shapes[op.outputs[0]])


def softmax(g: LceGraph, op, env: dict):
    z = env[op.inputs[0]] * op.options.get("beta", 1.0)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def reshape(g: LceGraph, op, env: dict):
    return env[op.inputs[0]].reshape(g.shapes[op.outputs[0]])


def relu(g: LceGraph, op, env: dict):
    """RELU and RELU6."""
    return np.clip(env[op.inputs[0]], 0, 6 if op.kind == "RELU6" else np.inf)


def pad(g: LceGraph, op, env: dict):
    return np.pad(env[op.inputs[0]], g.const(op.inputs[1], op, "the paddings").astype(np.int64))


def run_reference(g: LceGraph, x: np.ndarray) -> np.ndarray:
    """The network in numpy: packed tensors are held as +-1 int64 values, float ones in float64; each op by
    its graph/ops/lce.py entry's reference."""
    env = {g.input: np.asarray(x, np.float64)}
    for op in g.ops:
        d = registry.of(op.kind)
        if d is None:
            raise ModelError(f"{g.path}: op {op.kind} has no numpy reference")
        env[op.outputs[0]] = registry.resolve(d.reference)(g, op, env)
    return env[g.output].astype(np.float32)


def _value(g: LceGraph, env: dict, i: int):
    return env[i] if i in env else g.consts[i].astype(np.float64)
