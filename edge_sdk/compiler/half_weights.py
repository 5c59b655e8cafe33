"""Weights a file stores as float16 ship as float16 and become float32 at load.

A .tflite with float16 weights (TFLiteConverter `supported_types=[tf.float16]`: mediapipe's detectors and
landmark models) holds them behind DEQUANTIZE; the import folds that to float32 constants, so a package
stored 2x the file's weights. Here, after lift_params, every float32 parameter whose values are all exactly
float16 (the file's weights, packed or padded by our kernels; sums such as folded batch norm are not) is
stored as float16, and main begins with a cast of it to float32: a load-time transform, so
split_load_transforms moves the casts into "infer_transform_params", which the runtimes (loader.py,
runner.cc) call once at load. The cast is exact: the output is unchanged bit for bit.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te

HALF_PREFIX = "edge_half_to_float"  # the cast PrimFuncs; lower.py treats their calls as load-time transforms


def _exact_half(arr: np.ndarray) -> bool:
    if arr.dtype != np.float32 or arr.size == 0 or not np.isfinite(arr).all():
        return False
    return bool(np.array_equal(arr.astype(np.float16).astype(np.float32), arr))


def _cast_func(name: str) -> tvm.tirx.PrimFunc:
    """B[i] = float32(A[i]) over a flat buffer of any length n (one PrimFunc for every weight)."""
    from edge_sdk.compiler.ops.common import mark_scheduled

    n = te.var("n")
    a = te.placeholder((n,), "float16", name="A")
    b = te.compute((n,), lambda i: a[i].astype("float32"), name="B")
    return mark_scheduled(te.create_prim_func([a, b]), name)


def store_half(mod: tvm.IRModule, params: dict[str, np.ndarray]) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """(main with its exact-float16 parameters taken as float16 and cast first, the params with those arrays
    as float16). Nothing changes when no parameter is exactly float16."""
    func = mod["main"]
    n_in = int(func.attrs["num_input"])
    half = {v.name for v in func.params[n_in:] if _exact_half(params[v.name])}
    if not half:
        return mod, params
    bb = relax.BlockBuilder(mod)
    cast = bb.add_func(_cast_func(HALF_PREFIX), HALF_PREFIX)
    new_params, bindings = list(func.params[:n_in]), []
    for v in func.params[n_in:]:
        if v.name not in half:
            new_params.append(v)
            continue
        shape = tuple(int(s) for s in v.ty.shape)
        size = int(np.prod(shape))
        v16 = relax.Var(v.name, relax.TensorType(shape, "float16"))
        new_params.append(v16)
        flat16 = relax.Var(f"{v.name}_flat16", relax.TensorType((size,), "float16"))
        flat = relax.Var(f"{v.name}_flat", relax.TensorType((size,), "float32"))
        bindings += [relax.VarBinding(flat16, relax.op.reshape(v16, (size,))),
                     relax.VarBinding(flat, relax.call_tir(cast, [flat16], relax.TensorType((size,), "float32"))),
                     relax.VarBinding(v, relax.op.reshape(flat, shape))]
    body = relax.SeqExpr([relax.BindingBlock(bindings), *func.body.blocks], func.body.body)
    out = bb.get()
    out["main"] = relax.Function(new_params, body, func.ret_ty, func.is_pure, func.attrs)
    return out, {k: (a.astype(np.float16) if k in half else a) for k, a in params.items()}
