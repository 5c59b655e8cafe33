"""The core int8 ops' kernel emitters (graph/ops entries name them): the kernels we scheduled
(kernels.py: conv / depthwise / dense with the requantize fused in; glue.py: add, pool, mean, pad,
softmax, quantize) as one call_tir each, and reshape / concat as Relax ops TVM legalizes.

    emit(bb, g, op, env, *, name) -> [one relax value per output]   (the signature every entry's kernel has)

The target is the one build_relax runs under (`with target`), so the SIMD width comes from
tvm.target.Target.current(). These functions pick and call a kernel; the kernels' bodies live in
kernels.py / glue.py.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from edge_sdk.compiler.int8 import binary_unary_resize_move, glue, kernels
from edge_sdk.compiler.ops.common import simd_of
from edge_sdk.errors import ModelError
from edge_sdk.graph.int8 import Int8Graph, Op
from edge_sdk.quant.int8 import Window
from edge_sdk.quant.tflite_int8_ref_ops import add_params, conv_params, op_act, pad_value


def _simd():
    return simd_of(tvm.target.Target.current(allow_none=False))


def call(bb, g: Int8Graph, op: Op, env: dict, k: kernels.Kernel, name: str, *, n_inputs: int = 1) -> list:
    """One call_tir of a scheduled Kernel on the op's first n_inputs, sliced / reshaped to the output."""
    t_out = g.tensors[op.outputs[0]]
    gv = bb.add_func(k.func, name)
    args = [env[i] for i in op.inputs[:n_inputs]]
    if op.kind == "FULLY_CONNECTED" and len(g.tensors[op.inputs[0]].shape) != 2:
        k_in = g.tensors[op.inputs[1]].shape[1]  # (1,1,1,K) after a keep-dims pool
        args[0] = bb.emit(relax.op.reshape(args[0], (-1, k_in)))
    args += [relax.const(c) for c in k.consts]
    val = bb.emit(relax.call_tir(gv, args, relax.TensorType(k.out_shape, k.out_dtype)))
    if k.out_shape[-1] > t_out.shape[-1]:  # the GEMM's channel padding
        val = bb.emit(relax.op.strided_slice(val, [len(k.out_shape) - 1], [0], [t_out.shape[-1]]))
    if tuple(k.out_shape[:-1]) + (t_out.shape[-1],) != tuple(t_out.shape):
        val = bb.emit(relax.op.reshape(val, t_out.shape))
    return [val]


def _shape(g: Int8Graph, op: Op) -> tuple:
    return g.tensors[op.inputs[0]].shape


def conv2d(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    k = kernels.conv2d(_shape(g, op), *conv_params(g, op), Window.of(op.opts), simd=_simd(), name=name)
    return call(bb, g, op, env, k, name)


def depthwise(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    xs = _shape(g, op)
    k = kernels.depthwise(xs, *conv_params(g, op), Window.of(op.opts),
                          depth_multiplier=g.tensors[op.outputs[0]].shape[-1] // xs[-1], simd=_simd(), name=name)
    return call(bb, g, op, env, k, name)


def dense(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    w, bias, rq = conv_params(g, op)
    k = kernels.dense(int(np.prod(_shape(g, op))) // w.shape[1], w, bias, rq, simd=_simd(), name=name)
    return call(bb, g, op, env, k, name)


def add(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    """ADD: the broadcasting / constant / 32-bit kernels of binary_unary_resize_move, else glue.add (int64)."""
    vals = binary_unary_resize_move.emit_binary(bb, g, op, env, name=name)
    if vals is not None:
        return vals
    xs = _shape(g, op)
    if g.tensors[op.inputs[1]].shape != xs:
        raise ModelError(f"{g.path}: op {op.index} (ADD): broadcasting add {list(xs)} + "
                         f"{list(g.tensors[op.inputs[1]].shape)} is not supported")
    return call(bb, g, op, env, glue.add(xs, add_params(g, op), op_act(g, op), name=name), name, n_inputs=2)


def pool(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    o = op.opts
    k = glue.pool(_shape(g, op), kind=op.kind, kh=o["filter"][0], kw=o["filter"][1], stride=o["stride"],
                  padding=o["padding"], act=op_act(g, op), name=name)
    return call(bb, g, op, env, k, name)


def mean(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    xs, t_in, t_out = _shape(g, op), g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]
    axes = sorted({int(a) % len(xs) for a in np.asarray(g.tensors[op.inputs[1]].data).reshape(-1)})
    keep = tuple(1 if d in axes else s for d, s in enumerate(xs))
    k = glue.mean(xs, axes, keep, in_zp=t_in.q.z, out_zp=t_out.q.z, in_scale=t_in.q.s, out_scale=t_out.q.s,
                  name=name)
    return call(bb, g, op, env, k, name)


def pad(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    k = glue.pad(_shape(g, op), g.tensors[op.inputs[1]].data, pad_value(g, op), name=name)
    return call(bb, g, op, env, k, name)


def softmax(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    k = glue.softmax(_shape(g, op), beta=op.opts["beta"], in_scale=g.tensors[op.inputs[0]].q.s, name=name)
    return call(bb, g, op, env, k, name)


def quantize(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    xs, t_in, t_out = _shape(g, op), g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]
    if t_in.dtype == "float32":
        k = glue.quantize(xs, scale=t_out.q.s, zero_point=t_out.q.z, name=name)
    else:
        k = glue.requantize(xs, in_zp=t_in.q.z, out_zp=t_out.q.z, in_scale=t_in.q.s, out_scale=t_out.q.s, name=name)
    return call(bb, g, op, env, k, name)


def dequantize(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    t_in = g.tensors[op.inputs[0]]
    return call(bb, g, op, env, glue.dequantize(t_in.shape, scale=t_in.q.s, zero_point=t_in.q.z, name=name), name)


def reshape(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    return [bb.emit(relax.op.reshape(env[op.inputs[0]], g.tensors[op.outputs[0]].shape))]


def concatenation(bb, g: Int8Graph, op: Op, env: dict, *, name: str) -> list:
    val = bb.emit(relax.op.concat([env[i] for i in op.inputs], axis=op.opts["axis"]))
    lo, hi = op_act(g, op)
    if (lo, hi) != (-128, 127):
        val = bb.emit(relax.op.clip(val, lo, hi))
    return [val]
