"""The manifest's per-layer table for a full-int8 .tflite graph (op, shapes, FLOPs, bytes)."""
from __future__ import annotations

import math

from edge_sdk.models.tflite_int8 import Int8Graph

_ACT = {1: ["relu"], 3: ["relu6"]}  # TFLite fused_activation_function codes
_KIND = {"CONV_2D": "conv2d", "DEPTHWISE_CONV_2D": "depthwise_conv2d", "FULLY_CONNECTED": "dense"}


def _nbytes(t) -> int:
    return math.prod(t.shape) * {"int8": 1, "uint8": 1, "int16": 2, "int32": 4, "float32": 4, "int64": 8}.get(t.dtype, 4)


def int8_layer_table(g: Int8Graph) -> list[dict]:
    """One row per TFLite op; weights and bias are the constant inputs. FLOPs count multiply-adds as 2."""
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
            "name": f"{op.index}:{out.name}"[:80],
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
    return rows
