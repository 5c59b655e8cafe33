"""Which compiled kernels (PrimFuncs) implement which layer of the manifest's layer table.

Why: the runner's --profile times each VM call by kernel symbol and call site (the k-th call of a
symbol in one inference); the manifest records per layer the sites that implement it, so the
runtime can add them up per layer with no compiler on the device:

    "kernels": [{"name": "edge_gemm_14", "call": 2, "role": "main", "glue_share_est": 0.002},
                {"name": "strided_slice", "call": 0, "role": "glue"}]

- role "main": the layer's own kernel. Known from the lowering (KernelRewriter's record of which
  layer each scheduled kernel serves; the bitserial emitter's binding names), else a kernel named
  after the layer's op (TVM's "softmax" for a softmax row) between the neighbouring known layers.
- role "glue": any other kernel (slices, casts, standalone quantize/bitpack, unfused bitserial glue
  chains) is charged to the layer whose output it consumes: the last layer with a main kernel
  before it (or the first layer, for kernels before any).
- glue_share_est on a conv/dense main kernel: the share of that kernel's time spent in its fused
  epilogue, estimated from op counts (bitserial: the row's glue.share_est; float: one op per output
  element per epilogue op, against the conv's FLOPs). Not a measurement.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict, deque

CONV_LIKE = ("conv", "dense", "matmul")  # as the dashboard's layer_kind: the rest is glue


def call_sites(mod, emitted: list[tuple[str, str]]) -> list[dict]:
    """PrimFunc calls of mod["main"] in call order: {"name", "call", "var", "layer"?}.

    `emitted` is KernelRewriter's (layer, PrimFunc name) list in emission order; the i-th emission
    of a PrimFunc is its i-th call (later passes keep the order; our kernels are opaque, never fused).
    """
    from tvm import relax, tirx

    pending: dict[str, deque] = defaultdict(deque)
    for layer, name in emitted:
        pending[name].append(layer)
    seen: Counter = Counter()
    sites = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, relax.Call):
                continue
            if getattr(v.op, "name", None) in ("relax.call_tir", "relax.call_tir_inplace"):
                gv = v.args[0]
            elif isinstance(v.op, relax.GlobalVar) and isinstance(mod[v.op], tirx.PrimFunc):
                gv = v.op
            else:
                continue
            name = gv.name_hint
            site = {"name": name, "call": seen[name], "var": b.var.name}
            seen[name] += 1
            if pending[name]:
                site["layer"] = pending[name].popleft()
            sites.append(site)
    return sites


def _glue_share(row: dict) -> float | None:
    if not any(s in row["op"] for s in CONV_LIKE):
        return None
    glue = row.get("glue")
    if isinstance(glue, dict):  # bitserial rows: fused glue in the epilogue, or separate kernels
        return float(glue.get("share_est", 0.0)) if glue.get("mode") == "fused" else 0.0
    out = math.prod(row.get("output") or [0])
    epi = [e for e in row.get("epilogue", []) if ":" not in e]
    return round(min(1.0, len(epi) * out / row["flops"]), 4) if row.get("flops") else 0.0


def assign_kernels(rows: list[dict], sites: list[dict], *, var_to_layer: dict[str, str] | None = None) -> list[dict]:
    """rows with "kernels" added where known (see the module docstring); rows are not modified."""
    pos = {r["name"]: i for i, r in enumerate(rows)}
    var_to_layer = var_to_layer or {}
    known = [pos.get(s.get("layer") or var_to_layer.get(s["var"], "")) for s in sites]
    kernels: dict[int, list] = defaultdict(list)
    owner, before_any = None, []
    for i, s in enumerate(sites):
        entry = {"name": s["name"], "call": s["call"]}
        idx = known[i]
        if idx is None:  # a kernel named after its op, between the known layers around it
            base = re.sub(r"\d+$", "", s["name"])
            lo = owner + 1 if owner is not None else 0
            hi = next((k for k in known[i + 1:] if k is not None), len(rows))
            idx = next((j for j in range(lo, hi) if rows[j]["op"] == base and j not in kernels), None)
        if idx is not None:
            share = _glue_share(rows[idx])
            kernels[idx].append({**entry, "role": "main", **({} if share is None else {"glue_share_est": share})})
            kernels[idx] += before_any
            owner, before_any = idx, []
        elif owner is None:
            before_any.append({**entry, "role": "glue"})
        else:
            kernels[owner].append({**entry, "role": "glue"})
    return [{**r, "kernels": kernels[i]} if i in kernels else r for i, r in enumerate(rows)]
