"""Per-layer modelled Pi time of a package: the timing model's price of each model.so function, by layer.

    rows = layer_split(figures, manifest["layers"])     # figures: api.model_package(..., layers=ALL_FUNCTIONS)

Attribution only: the cycles are the model's (model.top_functions: every executed block priced by the A53
rules, summed by the function that holds it, over all threads); nothing here prices anything.

- A layer's functions are the kernels its manifest row lists ("kernels": compiler/kernel_map.py, the same
  call sites the host profile, runtime/profile.py, times). TVM emits a kernel's body as "<name>_compute_"
  and "__tvm_ffi_<name>" around the "<name>" wrapper: all three are the kernel's. A kernel called at
  several sites (one PrimFunc for layers of one shape) is shared equally among its call sites (same
  shapes, same code: the model prices them alike, up to their cache state).
- The int8 path's table lists no kernels: its row i is named "i:<output tensor>" (compiler/int8/layers.py)
  and its kernel "<op kind>_i" (compiler/int8/backend.py build_relax), so a row without kernels whose name
  starts "i:" gets the model.so kernel ending "_i" as its main one (no glue estimate there: its fused
  requantize counts as conv; a standalone quantize or pool row is glue by its op).
- conv vs glue: runtime/profile.layer_times, as for the host profile (a fused conv kernel's epilogue is
  glue by the compiler's op-count estimate glue_share_est; separate glue kernels are glue).
- The rest is kept as named rows (op OUTSIDE), never dropped: the TVM runtime (VM calls, allocations),
  model.so code no layer lists, other libraries (libc: memcpy, malloc), blocks below the model's function
  table, and at N threads the span's parallel overhead (fork/join, waiting for the slowest thread).
  Layers + rest = the whole-model modelled ms (at N threads the layers' work is scaled to the span).
"""
from __future__ import annotations

import re

from edge_sdk.runtime.profile import OUTSIDE, layer_times

ALL_FUNCTIONS = 100_000  # `layers` for model_profile: every function (of the priced blocks), not the top few
RUNTIME = "(TVM runtime: VM calls, allocations)"
MODEL_OTHER = "(model.so: code no layer lists)"
LIBRARIES = "(libc and other libraries)"
BELOW = "(blocks below the model's function table)"
PARALLEL = "(parallel: fork/join, waiting for the slowest thread)"
_BODY = re.compile(r"_compute_.*$")  # TVM's name of a kernel's body beside its wrapper
_FFI = "__tvm_ffi_"  # TVM's packed-call wrapper of a kernel


def _kernel_of(function: str, names: set[str]) -> str | None:
    """The manifest kernel a model.so function belongs to: NAME, NAME_compute_..., __tvm_ffi_NAME."""
    for cand in (function, _BODY.sub("", function), function.removeprefix(_FFI)):
        if cand in names:
            return cand
    return None


_ROW_INDEX = re.compile(r"^(\d+):")  # the int8 table's row names
_KERNEL_INDEX = re.compile(r"_(\d+)$")  # ... and its kernels' names


def _with_indexed_kernels(layers: list[dict], functions: list[dict]) -> list[dict]:
    """layers, where a row without kernels named "i:..." gets the model.so kernel "<kind>_i" (the int8 path)."""
    by_index: dict[int, str] = {}
    for f in functions:
        if f["file"] == "model.so":
            base = _BODY.sub("", f["function"]).removeprefix(_FFI)
            m = _KERNEL_INDEX.search(base)
            if m:
                by_index.setdefault(int(m.group(1)), base)
    out = []
    for lyr in layers:
        m = None if lyr.get("kernels") else _ROW_INDEX.match(str(lyr.get("name", "")))
        k = by_index.get(int(m.group(1))) if m else None
        out.append(lyr if k is None else lyr | {"kernels": [{"name": k, "call": 0, "role": "main"}]})
    return out


def _sites(layers: list[dict]) -> dict[str, int]:
    """kernel name -> how many call sites the manifest lists for it (calls are numbered from 0)."""
    out: dict[str, int] = {}
    for lyr in layers:
        for k in lyr.get("kernels") or []:
            out[k["name"]] = max(out.get(k["name"], 0), int(k["call"]) + 1)
    return out


def _by_kernel(functions: list[dict], names: set[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(kernel -> cycles of its functions, rest row -> cycles of the functions no kernel owns)."""
    kernels: dict[str, float] = {}
    rest = {RUNTIME: 0.0, MODEL_OTHER: 0.0, LIBRARIES: 0.0}
    for f in functions:
        k = _kernel_of(f["function"], names) if f["file"] == "model.so" else None
        if k is not None:
            kernels[k] = kernels.get(k, 0.0) + f["cycles"]
        elif f["file"].startswith("libtvm_runtime"):
            rest[RUNTIME] += f["cycles"]
        elif f["file"] == "model.so":
            rest[MODEL_OTHER] += f["cycles"]
        else:
            rest[LIBRARIES] += f["cycles"]
    return kernels, rest


def layer_split(figures: dict, layers: list[dict]) -> list[dict]:
    """[{"name", "op", "ms", "conv_ms", "glue_ms"}] in layer order (the host profile's names and split),
    then the rest rows (op OUTSIDE); all modelled Pi ms, summing to figures["modelled_ms"]."""
    functions = figures.get("functions") or []
    clock = figures["clock_ghz"] * 1e6  # cycles per ms
    total = float(figures["modelled_cycles"])
    split = figures.get("cycles_split") or {}
    parallel = float(split.get("fork_join", 0.0)) + float(split.get("parallel_wait", 0.0))
    work = sum(float(t["cycles"]) for t in (figures.get("per_thread") or {}).values()) or \
        sum(f["cycles"] for f in functions)
    # at N threads the functions' cycles are every thread's work: scale them to the span without its overhead
    scale = (total - parallel) / work if figures.get("threads", 1) > 1 and work > 0 else 1.0
    layers = _with_indexed_kernels(layers, functions)
    sites = _sites(layers)
    kernels, rest = _by_kernel(functions, set(sites))
    profile = {"runs": 1, "sites": [{"kernel": k, "call": c, "calls": 1, "total_ms": cyc * scale / sites[k] / clock}
                                    for k, cyc in kernels.items() for c in range(sites[k])]}
    prof = layer_times(layers, profile)
    rows = [{"name": r["name"], "op": r["op"], **{k: r[k] for k in ("ms", "conv_ms", "glue_ms")}} for r in prof.layers]
    listed = sum(f["cycles"] for f in functions)
    rest[BELOW] = max(0.0, (work or listed) - listed)
    if scale != 1.0:
        rest[PARALLEL] = parallel / scale
    for name, cyc in rest.items():
        if cyc > 0:
            ms = cyc * scale / clock
            rows.append({"name": name, "op": OUTSIDE, "ms": ms, "conv_ms": 0.0, "glue_ms": ms})
    return [{**r, **{k: round(r[k], 6) for k in ("ms", "conv_ms", "glue_ms")}} for r in rows]

