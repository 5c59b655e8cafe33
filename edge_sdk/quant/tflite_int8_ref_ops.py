"""The numpy reference run of the registered int8 ops (graph/ops: binary, unary tables, movement, resize),
called by quant/tflite_int8_ref.eval_op; each entry names its reference here or in int8_pointwise /
int8_nonlinear. And the per-op parameters the compiler (compiler/int8/binary_unary_resize_move.py) reads too.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.graph import ops as registry
from edge_sdk.graph.int8 import ACT_NAMES, Int8Graph, Op
from edge_sdk.quant import int8 as q8, int8_layout as ql, int8_pointwise as qp



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
    """The 256-entry output table of a registered unary int8 op (HARD_SWISH, LEAKY_RELU, TANH, LOGISTIC ...:
    its entry's reference on every int8 value), else None."""
    d = registry.of(op.kind)
    if d is None or d.family != "unary":
        return None
    opts = [op.opts.get(key, default) for key, default in d.reference_opts]
    return registry.resolve(d.reference)(*opts, *_q(g, op.inputs[0]), *_q(g, op.outputs[0]))


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


# ---- the registered ops' references (graph/ops entries name them) ---------------------------------------

def add(g: Int8Graph, op: Op, a, b):
    return q8.add(a, b, add_params(g, op), op_act(g, op))


def sub(g: Int8Graph, op: Op, a, b):
    return qp.sub(a, b, add_params(g, op), op_act(g, op))


def mul(g: Int8Graph, op: Op, a, b):
    return qp.mul(a, b, mul_params(g, op), op_act(g, op))


def prelu(g: Int8Graph, op: Op, a, b):
    return qp.prelu(a, b, prelu_params(g, op))


def maximum(g: Int8Graph, op: Op, a, b):
    return qp.maximum(a, b)


def minimum(g: Int8Graph, op: Op, a, b):
    return qp.minimum(a, b)


def split(g: Int8Graph, op: Op, env: dict):
    axis, sizes = split_spec(g, op)
    x = env[op.inputs[1] if op.kind == "SPLIT" else op.inputs[0]]
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def strided_slice(g: Int8Graph, op: Op, env: dict):
    return ql.strided_slice(env[op.inputs[0]], *slice_spec(g, op)).reshape(g.tensors[op.outputs[0]].shape)


def transpose(g: Int8Graph, op: Op, env: dict):
    return np.transpose(env[op.inputs[0]], [int(v) for v in g.tensors[op.inputs[1]].data])


def gather(g: Int8Graph, op: Op, env: dict):
    x, idx = env[op.inputs[0]], np.asarray(g.tensors[op.inputs[1]].data, np.int64)
    return np.take(x, idx, axis=op.opts["axis"] % x.ndim)


def pack(g: Int8Graph, op: Op, env: dict):
    x = env[op.inputs[0]]
    return np.stack([operand(g, env, i) for i in op.inputs], axis=op.opts["axis"] % (x.ndim + 1))


def resize(g: Int8Graph, op: Op, env: dict):
    o = op.opts
    fn = ql.resize_nearest if op.kind == "RESIZE_NEAREST_NEIGHBOR" else ql.resize_bilinear
    return fn(env[op.inputs[0]], ql.out_hw_of(g.tensors[op.inputs[1]].data), align_corners=o["align_corners"],
              half_pixel_centers=o["half_pixel_centers"])


def binary(g: Int8Graph, op: Op, a, b):
    """A registered binary op (ADD/SUB/MUL/PRELU/MAXIMUM/MINIMUM ...) of two int8 arrays (numpy broadcasting)."""
    return registry.resolve(registry.of(op.kind).reference)(g, op, a, b)


def eval_registered(g: Int8Graph, op: Op, env: dict):
    """One registered op (graph/ops) by its entry's reference; SPLIT/SPLIT_V return a list; None if not one."""
    d = registry.of(op.kind)
    if d is None:
        return None
    if d.family == "binary":
        return binary(g, op, operand(g, env, op.inputs[0]), operand(g, env, op.inputs[1]))
    if d.family == "unary":
        return qp.lookup(env[op.inputs[0]], unary_table(g, op))
    return registry.resolve(d.reference)(g, op, env)
