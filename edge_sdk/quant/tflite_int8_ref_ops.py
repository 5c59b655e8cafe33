"""The numpy reference of every int8 op (graph/ops entries name their reference here, or a table in
int8_pointwise / int8_nonlinear), dispatched by eval_registered (quant/tflite_int8_ref.eval_op calls it);
and the per-op parameters the compiler (compiler/int8: emit_scheduled, binary_unary_resize_move) reads too.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.graph import ops as registry
from edge_sdk.graph.int8 import ACT_NAMES, Int8Graph, Op
from edge_sdk.quant import int8 as q8, int8_layout as ql, int8_nonlinear as qn, int8_pointwise as qp



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


def _io(g: Int8Graph, op: Op, env: dict):
    return env[op.inputs[0]], g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]


# ---- the core ops' references (graph/ops entries name them: f(g, op, env) -> array) -------------------

def conv2d(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    return q8.conv2d(env[op.inputs[0]], *conv_params(g, op), q8.Window.of(op.opts))


def depthwise_conv2d(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    x, t_in, t_out = _io(g, op, env)
    return q8.depthwise_conv2d(x, *conv_params(g, op), q8.Window.of(op.opts),
                               depth_multiplier=t_out.shape[-1] // t_in.shape[-1])


def fully_connected(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    return q8.fully_connected(env[op.inputs[0]], *conv_params(g, op)).reshape(g.tensors[op.outputs[0]].shape)


def pool(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    o = op.opts
    fn = q8.avg_pool if op.kind == "AVERAGE_POOL_2D" else q8.max_pool
    return fn(env[op.inputs[0]], kh=o["filter"][0], kw=o["filter"][1], stride=o["stride"], padding=o["padding"],
              act=op_act(g, op))


def mean(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    x, t_in, t_out = _io(g, op, env)
    axes = tuple(int(a) for a in np.asarray(g.tensors[op.inputs[1]].data).reshape(-1))
    y = q8.mean(x, axes, in_zp=t_in.q.z, out_zp=t_out.q.z, in_scale=t_in.q.s, out_scale=t_out.q.s,
                keep_dims=op.opts["keep_dims"])
    return y.reshape(t_out.shape)


def reshape(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    return env[op.inputs[0]].reshape(g.tensors[op.outputs[0]].shape)


def pad_value(g: Int8Graph, op: Op) -> int:
    """PAD fills with the output zero point, PADV2 with its constant value operand (if given)."""
    if op.kind == "PADV2" and len(op.inputs) > 2:
        return int(np.asarray(g.tensors[op.inputs[2]].data).reshape(-1)[0])
    return g.tensors[op.outputs[0]].q.z


def pad(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    return q8.pad(env[op.inputs[0]], g.tensors[op.inputs[1]].data, value=pad_value(g, op))


def concatenation(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    y = np.concatenate([env[i] for i in op.inputs], axis=op.opts["axis"])
    lo, hi = op_act(g, op)
    return np.clip(y, lo, hi).astype(np.int8)


def softmax(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    x, t_in, _ = _io(g, op, env)
    return qn.softmax(x, beta=op.opts["beta"], in_scale=t_in.q.s)


def quantize(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    x, t_in, t_out = _io(g, op, env)
    if t_in.dtype == "float32":
        return q8.quantize(x, t_out.q.s, t_out.q.z)
    mult, shift = q8.quantize_multiplier(float(np.float32(t_in.q.s)) / float(np.float32(t_out.q.s)))
    return q8.requantize(x.astype(np.int64) - t_in.q.z, mult, shift, t_out.q.z, (q8.INT8_MIN, q8.INT8_MAX))


def dequantize(g: Int8Graph, op: Op, env: dict) -> np.ndarray:
    x, t_in, _ = _io(g, op, env)
    return q8.dequantize(x, t_in.q.s, t_in.q.z)


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
