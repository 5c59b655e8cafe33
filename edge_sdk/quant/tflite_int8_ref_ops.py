"""The numpy reference run of the int8 ops beyond conv/pool (MORE_KINDS), called by
quant/tflite_int8_ref.eval_op; and the per-op parameters the compiler (compiler/int8/binary_unary_resize_move.py) reads too.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.graph.int8 import ACT_NAMES, Int8Graph, Op
from edge_sdk.quant import int8 as q8, int8_layout as ql, int8_pointwise as qp

# the kinds eval_more computes (models/tflite_int8_ops.MORE, and ADD / LOGISTIC)
MORE_KINDS = ("ADD", "SUB", "MUL", "PRELU", "MAXIMUM", "MINIMUM", "HARD_SWISH", "LEAKY_RELU", "TANH", "LOGISTIC",
              "SPLIT", "SPLIT_V", "STRIDED_SLICE", "TRANSPOSE", "GATHER", "PACK", "RESIZE_NEAREST_NEIGHBOR",
              "RESIZE_BILINEAR")


def operand(g: Int8Graph, env: dict, i: int) -> np.ndarray:
    """A computed tensor from env, or a constant operand's data."""
    return env[i] if i in env else g.tensors[i].data


def _q(g: Int8Graph, i: int) -> tuple[float, int]:
    t = g.tensors[i]
    return t.q.s, t.q.z


def op_act(g: Int8Graph, op: Op) -> tuple[int, int]:
    """The clamp of the op's fused activation on its output quantization."""
    out = g.tensors[op.outputs[0]]
    return q8.activation_range(ACT_NAMES.get(op.opts.get("act", 0), "NONE"), out.q.s, out.q.z)


def add_params(g: Int8Graph, op: Op) -> q8.AddParams:
    return q8.AddParams.make(*_q(g, op.inputs[0]), *_q(g, op.inputs[1]), *_q(g, op.outputs[0]))


def mul_params(g: Int8Graph, op: Op) -> qp.MulParams:
    return qp.MulParams.make(*_q(g, op.inputs[0]), *_q(g, op.inputs[1]), *_q(g, op.outputs[0]))


def prelu_params(g: Int8Graph, op: Op) -> qp.PreluParams:
    return qp.PreluParams.make(*_q(g, op.inputs[0]), *_q(g, op.inputs[1]), *_q(g, op.outputs[0]))


def unary_table(g: Int8Graph, op: Op) -> np.ndarray | None:
    """The 256-entry output table of a unary int8 op (HARD_SWISH, LEAKY_RELU, TANH, LOGISTIC), else None."""
    from edge_sdk.quant.int8_nonlinear import logistic_table

    if op.kind not in ("HARD_SWISH", "LEAKY_RELU", "TANH", "LOGISTIC"):
        return None
    io = (*_q(g, op.inputs[0]), *_q(g, op.outputs[0]))
    if op.kind == "HARD_SWISH":
        return qp.hard_swish_table(*io)
    if op.kind == "LEAKY_RELU":
        return qp.leaky_relu_table(op.opts.get("alpha", 0.2), *io)
    if op.kind == "TANH":
        return qp.tanh_table(*io)
    return logistic_table(*io)


def slice_spec(g: Int8Graph, op: Op):
    """STRIDED_SLICE as (python slices, axes dropped by shrink_axis_mask)."""
    o = op.opts
    begin, end, strides = (g.tensors[i].data for i in op.inputs[1:4])
    return ql.slices(g.tensors[op.inputs[0]].shape, begin, end, strides, begin_mask=o["begin_mask"],
                     end_mask=o["end_mask"], shrink_mask=o["shrink_axis_mask"])


def split_spec(g: Int8Graph, op: Op) -> tuple[int, list[int]]:
    """(axis, part sizes) of SPLIT (inputs: axis, x) or SPLIT_V (inputs: x, sizes, axis)."""
    if op.kind == "SPLIT":
        x, axis = g.tensors[op.inputs[1]], int(np.asarray(g.tensors[op.inputs[0]].data).reshape(-1)[0])
        axis %= len(x.shape)
        return axis, ql.split_sizes(x.shape[axis], num_splits=op.opts["num_splits"])
    x, axis = g.tensors[op.inputs[0]], int(np.asarray(g.tensors[op.inputs[2]].data).reshape(-1)[0])
    axis %= len(x.shape)
    return axis, ql.split_sizes(x.shape[axis], num_splits=op.opts["num_splits"],
                                size_splits=g.tensors[op.inputs[1]].data)


def binary(g: Int8Graph, op: Op, a, b):
    """ADD/SUB/MUL/PRELU/MAXIMUM/MINIMUM of two int8 arrays (numpy broadcasting), as the op's kernel."""
    k = op.kind
    if k == "ADD":
        return q8.add(a, b, add_params(g, op), op_act(g, op))
    if k == "SUB":
        return qp.sub(a, b, add_params(g, op), op_act(g, op))
    if k == "MUL":
        return qp.mul(a, b, mul_params(g, op), op_act(g, op))
    if k == "PRELU":
        return qp.prelu(a, b, prelu_params(g, op))
    return qp.maximum(a, b) if k == "MAXIMUM" else qp.minimum(a, b)


def eval_more(g: Int8Graph, op: Op, env: dict):
    """One op of MORE (or ADD with a constant or broadcast operand); SPLIT/SPLIT_V return a list."""
    k, o = op.kind, op.opts
    t_out = g.tensors[op.outputs[0]]
    if k in ("ADD", "SUB", "MUL", "PRELU", "MAXIMUM", "MINIMUM"):
        return binary(g, op, operand(g, env, op.inputs[0]), operand(g, env, op.inputs[1]))
    table = unary_table(g, op)
    if table is not None:
        return qp.lookup(env[op.inputs[0]], table)
    if k in ("SPLIT", "SPLIT_V"):
        axis, sizes = split_spec(g, op)
        x = env[op.inputs[1] if k == "SPLIT" else op.inputs[0]]
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    x = env[op.inputs[0]]
    if k == "STRIDED_SLICE":
        return ql.strided_slice(x, *slice_spec(g, op)).reshape(t_out.shape)
    if k == "TRANSPOSE":
        return np.transpose(x, [int(v) for v in g.tensors[op.inputs[1]].data])
    if k == "GATHER":
        idx = np.asarray(g.tensors[op.inputs[1]].data, np.int64)
        return np.take(x, idx, axis=o["axis"] % x.ndim)
    if k == "PACK":
        return np.stack([operand(g, env, i) for i in op.inputs], axis=o["axis"] % (x.ndim + 1))
    if k in ("RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR"):
        fn = ql.resize_nearest if k == "RESIZE_NEAREST_NEIGHBOR" else ql.resize_bilinear
        return fn(x, ql.out_hw_of(g.tensors[op.inputs[1]].data), align_corners=o["align_corners"],
                  half_pixel_centers=o["half_pixel_centers"])
    return None
