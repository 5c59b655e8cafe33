"""The manifest's per-layer table for a full-int8 .tflite graph (op, shapes, FLOPs, bytes, kernels).

Row i is named row_name(g, op) = "i:<output tensor>"; given the compiled module's PrimFunc call sites
(backend.compile_int8's kernel_sites: kernel_map.call_sites of the ops' kernels in emission order), each row
gets its "kernels" as the float path's rows do (compiler/kernel_map.py), so `run --profile` and the modelled
per-layer split find a layer's kernel even when ops of one shape share one PrimFunc.
"""
from __future__ import annotations

import math

from edge_sdk.models.tflite_int8 import Int8Graph

_ACT = {1: ["relu"], 3: ["relu6"]}  # TFLite fused_activation_function codes
_KIND = {"CONV_2D": "conv2d", "DEPTHWISE_CONV_2D": "depthwise_conv2d", "FULLY_CONNECTED": "dense"}


def _nbytes(t) -> int:
    return math.prod(t.shape) * {"int8": 1, "uint8": 1, "int16": 2, "int32": 4, "float32": 4, "int64": 8}.get(t.dtype, 4)


def row_name(g: Int8Graph, op) -> str:
    """The table's name of op's row (its index and output tensor), what the compile records per kernel."""
    return f"{op.index}:{g.tensors[op.outputs[0]].name}"[:80]


def int8_layer_table(g: Int8Graph, sites: list[dict] | None = None) -> list[dict]:
    """One row per TFLite op; weights and bias are the constant inputs. FLOPs count multiply-adds as 2.
    With `sites` (kernel_map.call_sites of the compiled module), each row lists its kernels."""
    rows = []
    for op in g.ops:
        ins = [g.tensors[i] for i in op.inputs if i >= 0]
        outs = [g.tensors[i] for i in op.outputs]
        out = outs[0]
        n_out = math.prod(out.shape)
        if op.kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            w = ins[1].shape  # OHWI, or (1, KH, KW, C*M) for depthwise
            per_out = w[1] * w[2] * (w[3] if op.kind == "CONV_2D" else 1)
            flops = 2 * n_out * per_out
        elif op.kind == "FULLY_CONNECTED":
            flops = 2 * n_out * ins[1].shape[-1]
        else:
            flops = n_out
        read = sum(_nbytes(t) for t in ins)
        written = sum(_nbytes(t) for t in outs)
        rows.append({
            "name": row_name(g, op),
            "op": _KIND.get(op.kind, op.kind.lower()),
            "inputs": [list(t.shape) for t in ins if t.data is None],
            "weights": [list(t.shape) for t in ins if t.data is not None],
            "output": list(out.shape),
            "flops": int(flops),
            "bytes_read": int(read),
            "bytes_written": int(written),
            "epilogue": (["requantize"] + _ACT.get(op.opts.get("act", 0), [])) if op.kind in _KIND else [],
            "intensity": round(flops / max(1, read + written), 3),
        })
    if sites is None:
        return rows
    from edge_sdk.compiler.kernel_map import assign_kernels

    return assign_kernels(rows, sites)
