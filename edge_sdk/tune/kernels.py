"""The distinct kernel workloads of a model, found the way compile finds them.

The model goes through the same steps as compile_relax up to the kernel rewrite (prepare, then
KernelRewriter), so a workload here is exactly what compile will look up: same compute, same packed
weight layout, same register-tile choices for the target. Kernels that carry no workload (other
engineers' kernels before they call finish(..., workload=...)) are counted, not tuned.
"""
from __future__ import annotations

from dataclasses import dataclass

from edge_sdk.errors import CompileError


@dataclass
class Workload:
    name: str  # the PrimFunc name in the model (edge_dw_3): what --kernel selects and the manifest lists
    kind: str  # conv, dw, gemm, pool, ... (from the name)
    scheduled: object  # our scheduled PrimFunc (workload attribute dropped)
    func: object  # the unscheduled PrimFunc: the MetaSchedule task and the record key
    whash: str
    layers: list[str]  # the model layers that call it
    flops: float  # estimated, for GFLOP/s in the progress line

    @property
    def description(self) -> str:
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        shapes = ["x".join(str(int(d)) for d in a.shape) for a in ArgInfo.from_prim_func(self.func)]
        return f"{self.kind} {' '.join(shapes[:-1])} -> {shapes[-1]}"


def _kind(name: str) -> str:
    parts = name.split("_")
    return "_".join(parts[1:-1]) if len(parts) > 2 and parts[-1].isdigit() else name


def collect(model, target) -> tuple[list[Workload], list[str]]:
    """(tunable workloads in first-call order, names of our kernels that carry no workload)."""
    import tvm

    from edge_sdk.compiler.lower import prepare, rewrite_kernels
    from edge_sdk.compiler.ops.common import WORKLOAD_ATTR
    from edge_sdk.tune.store import workload_hash

    if model.mod is None:
        raise CompileError(f"{model.source}: no float Relax graph to tune")
    tvm_target = target.tvm_target()
    try:
        with tvm_target:
            emitted: list = []
            mod, _ = rewrite_kernels(prepare(model.mod), tvm_target, emitted=emitted)
    except (RuntimeError, ValueError) as err:
        raise CompileError(f"lowering {model.name} for target '{target.name}' failed: {err}") from err
    layers: dict[str, list[str]] = {}
    for layer, name in emitted:
        layers.setdefault(name, []).append(layer)
    found: dict[str, Workload] = {}
    plain: list[str] = []
    for name in layers:  # first-call order
        func = mod[name]
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if func.attrs is None or WORKLOAD_ATTR not in func.attrs:
            plain.append(name)
            continue
        wl = func.attrs[WORKLOAD_ATTR]
        whash = workload_hash(wl)
        if whash in found:  # two kernels with one workload: tuned once, applied to both
            found[whash].layers.extend(layers[name])
            continue
        found[whash] = Workload(name, _kind(name), func.without_attr(WORKLOAD_ATTR), wl, whash,
                                list(layers[name]), _flops(wl))
    return list(found.values()), plain


def _flops(func) -> float:
    try:
        from tvm.s_tir.analysis import estimate_tir_flops
    except ImportError:
        return 0.0
    import tvm

    try:
        return float(estimate_tir_flops(tvm.IRModule({"main": func})))
    except (RuntimeError, ValueError, TypeError):
        return 0.0


def select(workloads: list[Workload], names: list[str]) -> list[Workload]:
    """Keep the workloads whose kernel name or kind is in `names` (empty: all)."""
    if not names:
        return workloads
    from edge_sdk.errors import UsageError

    known = {w.name for w in workloads} | {w.kind for w in workloads}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--kernel {', '.join(unknown)}: not a kernel of this model; it has "
                         + ", ".join(f"{w.name} ({w.description})" for w in workloads))
    return [w for w in workloads if w.name in names or w.kind in names]
