"""A plain-numpy interpreter of a float Relax graph: the independent reference for compiled code.

It evaluates the high-level Relax ops (before any lowering) in float64, so it shares no code with
TVM's kernels or ours. It covers the ops our zoo and the TFLite/ONNX importers emit for classifiers;
any other op is a ModelError naming it.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act, float_ops


def _eval_call(call, args):
    """The op's numpy reference: a float activation's (graph/ops/float_act), else its graph/ops/float_ops entry's."""
    op = call.op.name
    act = float_act.by_relax_op(op)  # relax.nn.relu, relax.clip, relax.sigmoid: the activation's reference
    if act is not None:
        return registry.resolve(act.reference)(args[0], *(float(v.value) for v in call.args[1:1 + len(act.params)]))
    d = float_ops.of(op)
    if d is None:
        raise ModelError(f"reference: op '{op}' is not supported by the numpy reference")
    return registry.resolve(d.reference)(call, args)


def evaluate(mod, x: np.ndarray, *, trace: dict | None = None) -> np.ndarray:
    """Run mod["main"] (one input, weights as constants) in numpy float64; return float32.

    With `trace`, every bound variable's float64 value is stored there (keyed by the relax.Var):
    post-training quantization calibrates activation ranges and measures per-layer error with it.
    """
    from tvm import relax
    from tvm.ir.expr import GenericConst

    func = mod["main"]
    env = {func.params[0]: np.asarray(x, np.float64)}

    def value(e):
        if isinstance(e, GenericConst):
            return e.value.numpy().astype(np.float64)
        if isinstance(e, relax.Var):
            return env[e]
        if isinstance(e, relax.Tuple):  # concat's operands; strided_slice's axes/begin/end
            return tuple(value(f) for f in e.fields)
        if hasattr(e, "value"):  # IntImm / FloatImm prim values
            return e.value
        raise ModelError(f"reference: unsupported expression {type(e).__name__}")

    body = func.body
    for block in body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call):
                args = [None if isinstance(arg, relax.ShapeExpr) else value(arg) for arg in v.args]
                env[b.var] = _eval_call(v, args)
            elif isinstance(v, (relax.Var, GenericConst)):
                env[b.var] = value(v)
            elif isinstance(v, relax.TupleGetItem):
                env[b.var] = env[v.tuple_value][v.index]
            elif isinstance(v, relax.Tuple):
                env[b.var] = tuple(value(f) for f in v.fields)
            else:
                raise ModelError(f"reference: unsupported binding {type(v).__name__}")
    if trace is not None:
        trace.update(env)
    out = value(body.body)
    if isinstance(out, tuple):
        out = out[0]
    return np.asarray(out, np.float32)
