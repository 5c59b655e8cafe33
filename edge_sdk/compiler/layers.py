"""The per-layer table of a model: op, shapes, FLOPs, bytes read and written (for the manifest and roofline).

Computed on the high-level Relax graph before lowering. A "layer" is one compute op (conv, dense, pool,
...); the elementwise epilogue that follows it (bias, BN, ReLU) is counted into it, as our kernels fuse it.
"""
from __future__ import annotations

import math

FUSABLE = ("conv2d", "depthwise_conv2d", "dense")
EPILOGUE_OPS = {"relax.add", "relax.clip", "relax.nn.relu", "relax.nn.relu6", "relax.multiply", "relax.subtract"}


def _shape(sinfo) -> list[int]:
    return [int(s) for s in sinfo.shape]


def _nbytes(sinfo) -> int:
    return math.prod(_shape(sinfo)) * _dtype_bytes(str(sinfo.dtype))


def _dtype_bytes(dtype: str) -> int:
    bits = int("".join(ch for ch in dtype if ch.isdigit()) or 32)
    return max(1, bits // 8)


def _flops(call, out_shape) -> int:
    op = call.op.name
    out = math.prod(out_shape)
    if op == "relax.nn.conv2d":
        w = _shape(call.args[1].ty)
        layout = str(call.attrs.kernel_layout)
        kh, kw = w[layout.index("H")], w[layout.index("W")]
        cin_per_group = w[layout.index("I")]
        return 2 * out * kh * kw * cin_per_group
    if op == "relax.matmul":
        k = _shape(call.args[0].ty)[-1]
        return 2 * out * k
    if op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        kh, kw = (int(v) for v in call.attrs.pool_size)
        return out * kh * kw
    if op in ("relax.mean", "relax.nn.adaptive_avg_pool2d", "relax.sum"):
        return math.prod(_shape(call.args[0].ty))
    if op == "relax.nn.softmax":
        return 5 * out
    return out


def layer_table(mod) -> list[dict]:
    """One row per compute op of mod["main"]: name, op, input/weight/output shapes, FLOPs, bytes."""
    from tvm import relax
    from tvm.ir.expr import GenericConst

    rows: list[dict] = []
    last_by_var: dict = {}
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, relax.Call) or not hasattr(v.op, "name"):
                continue
            op = v.op.name
            tensors = [a for a in v.args if isinstance(getattr(a, "ty", None), relax.TensorType)]
            out_shape = _shape(b.var.ty) if isinstance(b.var.ty, relax.TensorType) else []
            read = sum(_nbytes(a.ty) for a in tensors)
            written = _nbytes(b.var.ty) if out_shape else 0
            producer = next((last_by_var[a] for a in v.args if isinstance(a, relax.Var) and a in last_by_var), None)
            if op in EPILOGUE_OPS and producer is not None and producer["op"] in FUSABLE \
                    and all(isinstance(a, GenericConst) or last_by_var.get(a) is producer for a in tensors):
                # an epilogue of the producer (bias, BN, activation): its FLOPs and constant reads join that row
                producer["flops"] += _flops(v, out_shape)
                producer["bytes_read"] += sum(_nbytes(a.ty) for a in tensors if isinstance(a, GenericConst))
                producer["epilogue"].append(op.split(".")[-1])
                last_by_var[b.var] = producer
                continue
            kind = {"relax.nn.conv2d": "conv2d", "relax.matmul": "dense"}.get(op, op.split(".")[-1])
            if kind == "conv2d" and int(v.attrs.groups) > 1:
                kind = "depthwise_conv2d"
            row = {
                "name": b.var.name,
                "op": kind,
                "inputs": [_shape(a.ty) for a in tensors if not isinstance(a, GenericConst)],
                "weights": [_shape(a.ty) for a in tensors if isinstance(a, GenericConst)],
                "output": out_shape,
                "flops": _flops(v, out_shape),
                "bytes_read": read,
                "bytes_written": written,
                "epilogue": [],
            }
            rows.append(row)
            last_by_var[b.var] = row
    for r in rows:
        r["intensity"] = round(r["flops"] / max(1, r["bytes_read"] + r["bytes_written"]), 3)
    return rows
