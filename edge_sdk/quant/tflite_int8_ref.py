"""The numpy reference run of an Int8Graph (models/tflite_int8.py), and each op's quantization parameters.

    y = run_reference(g, x)           # edge_sdk.quant.int8 kernels, op by op: bit-exact with TFLite BUILTIN_REF
    conv_params / add_params / op_act # what a conv, an add or a clamp needs: the compiler (compiler/int8) reads them too
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry
from edge_sdk.graph.int8 import Int8Graph, Op
from edge_sdk.quant import int8 as q8, int8_nonlinear as qn
from edge_sdk.quant.tflite_int8_ref_ops import add_params, eval_registered, op_act

__all__ = ["add_params", "conv_params", "eval_op", "op_act", "run_reference"]


def conv_params(g: Int8Graph, op: Op) -> tuple[np.ndarray, np.ndarray | None, q8.Requant]:
    """(weights, int32 bias or None, Requant): everything a conv/depthwise/dense kernel needs besides the input."""
    x, w, out = (g.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    bias = g.tensors[op.inputs[2]].data if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    mult, shift = q8.conv_multipliers(x.q.s, w.q.scale, out.q.s)
    n_out = w.shape[-1] if op.kind == "DEPTHWISE_CONV_2D" else w.shape[0]
    if mult.size == 1:
        mult, shift = np.repeat(mult, n_out), np.repeat(shift, n_out)
    rq = q8.Requant(in_zp=x.q.z, multiplier=mult, shift=shift, out_zp=out.q.z, act=op_act(g, op))
    return w.data, None if bias is None else bias.astype(np.int32), rq


def eval_op(g: Int8Graph, op: Op, env: dict[int, np.ndarray]) -> np.ndarray:
    """One op on numpy inputs from env, with the edge_sdk.quant.int8 reference kernels."""
    x = env.get(op.inputs[0]) if op.inputs else None
    t_in = g.tensors[op.inputs[0]] if op.inputs else None
    t_out = g.tensors[op.outputs[0]]
    k, o = op.kind, op.opts
    if k == "CONV_2D":
        return q8.conv2d(x, *conv_params(g, op), q8.Window.of(o))
    if k == "DEPTHWISE_CONV_2D":
        return q8.depthwise_conv2d(x, *conv_params(g, op), q8.Window.of(o),
                                   depth_multiplier=t_out.shape[-1] // t_in.shape[-1])
    if k == "FULLY_CONNECTED":
        return q8.fully_connected(x, *conv_params(g, op)).reshape(t_out.shape)
    if registry.of(k) is not None:  # graph/ops: ADD (any operands), MUL, HARD_SWISH, SPLIT ...
        return eval_registered(g, op, env)
    if k in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        fn = q8.avg_pool if k == "AVERAGE_POOL_2D" else q8.max_pool
        return fn(x, kh=o["filter"][0], kw=o["filter"][1], stride=o["stride"], padding=o["padding"],
                  act=op_act(g, op))
    if k == "MEAN":
        axes = tuple(int(a) for a in np.asarray(g.tensors[op.inputs[1]].data).reshape(-1))
        y = q8.mean(x, axes, in_zp=t_in.q.z, out_zp=t_out.q.z, in_scale=t_in.q.s, out_scale=t_out.q.s,
                    keep_dims=o["keep_dims"])
        return y.reshape(t_out.shape)
    if k in ("RESHAPE", "SQUEEZE"):
        return x.reshape(t_out.shape)
    if k in ("PAD", "PADV2"):
        value = t_out.q.z
        if k == "PADV2" and len(op.inputs) > 2:
            value = int(np.asarray(g.tensors[op.inputs[2]].data).reshape(-1)[0])
        return q8.pad(x, g.tensors[op.inputs[1]].data, value=value)
    if k == "CONCATENATION":
        y = np.concatenate([env[i] for i in op.inputs], axis=o["axis"])
        lo, hi = op_act(g, op)
        return np.clip(y, lo, hi).astype(np.int8)
    if k == "SOFTMAX":
        return qn.softmax(x, beta=o["beta"], in_scale=t_in.q.s)
    if k == "QUANTIZE":
        if t_in.dtype == "float32":
            return q8.quantize(x, t_out.q.s, t_out.q.z)
        mult, shift = q8.quantize_multiplier(float(np.float32(t_in.q.s)) / float(np.float32(t_out.q.s)))
        return q8.requantize(x.astype(np.int64) - t_in.q.z, mult, shift, t_out.q.z, (q8.INT8_MIN, q8.INT8_MAX))
    if k == "DEQUANTIZE":
        return q8.dequantize(x, t_in.q.s, t_in.q.z)
    raise ModelError(f"{g.path}: op {op.index} ({k}) has no reference kernel")


def run_reference(g: Int8Graph, x: np.ndarray, *, keep: bool = False):
    """Run the whole graph; returns the output (and, with keep=True, every intermediate tensor by index)."""
    env = {g.inputs[0]: np.asarray(x)}
    for op in g.ops:
        y = eval_op(g, op, env)
        for i, v in zip(op.outputs, y if isinstance(y, list) else [y]):
            env[i] = v
    out = env[g.outputs[0]]
    return (out, env) if keep else out
