"""The numpy reference run of an Int8Graph (models/tflite_int8.py).

    y = run_reference(g, x)           # edge_sdk.quant.int8 kernels, op by op: bit-exact with TFLite BUILTIN_REF
    eval_op(g, op, env)               # one op, by its graph/ops entry's reference (tflite_int8_ref_ops.py)
    conv_params / add_params / op_act # what a conv, an add or a clamp needs: the compiler (compiler/int8) reads them too
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry
from edge_sdk.graph.int8 import Int8Graph, Op
from edge_sdk.quant.tflite_int8_ref_ops import add_params, conv_params, eval_registered, op_act

__all__ = ["add_params", "conv_params", "eval_op", "op_act", "run_reference"]


def eval_op(g: Int8Graph, op: Op, env: dict[int, np.ndarray]) -> np.ndarray:
    """One op on numpy inputs from env, by its graph/ops entry's reference (a list for several outputs)."""
    if registry.of(op.kind) is None:
        raise ModelError(f"{g.path}: op {op.index} ({op.kind}) has no reference kernel")
    return eval_registered(g, op, env)


def run_reference(g: Int8Graph, x: np.ndarray, *, keep: bool = False):
    """Run the whole graph; returns the output (and, with keep=True, every intermediate tensor by index)."""
    env = {g.inputs[0]: np.asarray(x)}
    for op in g.ops:
        y = eval_op(g, op, env)
        for i, v in zip(op.outputs, y if isinstance(y, list) else [y]):
            env[i] = v
    out = env[g.outputs[0]]
    return (out, env) if keep else out
