"""Float32 lowering: a Relax model -> a Relax VM executable running our scheduled kernels + params.

    compile_relax(mod, target) -> (executable, {"p0000": weights, ...})

Steps (each one a Relax pass over "main"):
1. prepare: drop the importer's "params" attribute, decompose batch norm into elementwise ops,
   convert convs/pools to NHWC (ONNX graphs arrive NCHW; ops/permute_fold.py drops the transpose
   pairs left around clip), fold constants.
2. KernelRewriter (ops/fuse.py): conv2d / depthwise / dense (+ folded BN, bias, residual, ReLU/clip,
   and a preceding ZeroPadding2D) and pools become call_tir to PrimFuncs we scheduled
   (ops/conv2d.py, depthwise.py, pool.py); weights are folded and pre-packed at compile time.
   A 1x1 conv runs as a GEMM on the (H*W, C) view; the reshapes around it become VM views.
   apply_tuning: a kernel whose workload matches a tuning record that `edge-sdk tune` won gets
   the recorded MetaSchedule schedule instead of ours (edge_sdk/tune/store.py).
3. TVM's default CPU legalization + fusion for the small rest (reshape, softmax, add, ...); bilinear
   resize2d gets our kernel there (ops/resize.py); before it, a pad of the channels only becomes a
   vectorized copy (ops/pad_channels.py).
4. lift_params: every tensor constant left in "main" becomes a parameter p0000, p0001, ... in call
   order, so weights ship in params.bin and the .so holds only code. Weights a kernel reads
   transformed (Winograd's U = G g G^T, 4x the weights for F(4x4)) ship as stored, lifted before
   FoldConstant; split_load_transforms adds "infer_transform_params" (the runtime calls it once at
   load) and "infer" (main without the transforms) next to "main" (issue 13, lean packages).
5. tvm.compile with the stock dataflow-lowering and VM finalization passes and our TIR pipeline
   (stack_scratch.compile_vm: kernels' scratch on the stack, not a runtime allocation per call).
"""
from __future__ import annotations

import time

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from edge_sdk.compiler.half_weights import HALF_PREFIX, store_half
from edge_sdk.compiler.ops.weight_transform import TRANSFORM_PREFIX
from edge_sdk.errors import CompileError

# Our kernels replace these; anything else (softmax, reshape, add, ...) keeps TVM's legalization.
_NHWC_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"]}
_HEAVY_OPS = ("relax.nn.conv2d", "relax.matmul", "relax.nn.max_pool2d", "relax.nn.avg_pool2d")


def prepare(mod: tvm.IRModule) -> tvm.IRModule:
    """Normalize the imported graph into what KernelRewriter matches: NHWC, BN decomposed, folded."""
    func = mod["main"]
    if func.attrs is not None and "params" in func.attrs:
        mod = tvm.IRModule({**{gv: f for gv, f in mod.functions_items()}})
        mod["main"] = func.without_attr("params")
    nchw = []
    relax.analysis.post_order_visit(mod["main"], lambda e: nchw.append(1) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.conv2d"
        and e.attrs.data_layout != "NHWC") else None)
    seq = tvm.transform.Sequential([
        relax.transform.Normalize(),
        relax.transform.DecomposeOpsForInference(),
        *([relax.transform.ConvertLayout(_NHWC_LAYOUTS)] if nchw else []),
        relax.transform.Normalize(),
        relax.transform.FoldConstant(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.DeadCodeElimination(["main"]),
    ])
    mod = seq(mod)
    if nchw:  # ConvertLayout leaves transposes around ops without a layout rule (clip)
        from edge_sdk.compiler.ops.permute_fold import fold_permutes

        mod = fold_permutes(mod)
    return mod


def rewrite_kernels(mod: tvm.IRModule, target: tvm.target.Target, *,
                    emitted: list | None = None, chooser=None) -> tuple[tvm.IRModule, dict]:
    """Swap matched chains for our scheduled kernels; returns the module and counts per kind.

    `emitted`, when given, receives (layer name, PrimFunc name) per kernel call, in call order.
    `chooser`: compile/choice's per-layer schedule choice (None: choice.active(), the compile's)."""
    from edge_sdk.compiler.choice import active
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.compiler.ops.fuse import KernelRewriter

    rewriter = KernelRewriter(mod, simd_of(target), chooser or active())
    mod = rewriter.rewrite()
    mod = relax.transform.DeadCodeElimination(["main"])(mod)
    if emitted is not None:
        emitted.extend(rewriter.emitted)
    return mod, dict(rewriter.counts)


def apply_tuning(mod: tvm.IRModule, records) -> tuple[tvm.IRModule, list[dict]]:
    """Swap in tuned schedules where a record matches; drop every kernel's workload attribute.

    `records`: an edge_sdk.tune.store.RecordSet, or None (no tuning). A kernel keeps our schedule
    unless a record for its exact workload and target says the tuned schedule won. Returns the
    module and, per replaced kernel, {"kernel": name, "record", "ours_ms", "tuned_ms", "trials"}."""
    from edge_sdk.compiler.ops.common import WORKLOAD_ATTR, mark_scheduled

    applied = []
    out = tvm.IRModule({gv: f for gv, f in mod.functions_items()}, attrs=mod.attrs)
    for gv, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc) or func.attrs is None or WORKLOAD_ATTR not in func.attrs:
            continue
        workload = func.attrs[WORKLOAD_ATTR]
        rec = records.lookup(workload) if records is not None else None
        if rec is not None and rec.tuned:
            out[gv] = mark_scheduled(records.scheduled(workload, rec), gv.name_hint)
            applied.append({"kernel": gv.name_hint, **rec.summary()})
        else:
            out[gv] = func.without_attr(WORKLOAD_ATTR)
    return out, applied


@mutator
class _ConstLifter(PyExprMutator):
    """Replace each tensor constant in a function by a fresh parameter, in visiting (call) order;
    `only_transforms`: just the constant arguments of load-time transform calls (weight_transform)."""

    def __init__(self, mod, *, start: int = 0, only_transforms: bool = False):
        super().__init__(mod)
        self.lifted: list[tuple[relax.Var, np.ndarray]] = []
        self.start, self.only, self.active = start, only_transforms, not only_transforms

    def visit_call_(self, call):
        if not self.only or not _is_transform(call):
            return super().visit_call_(call)
        self.active = True
        try:
            return super().visit_call_(call)
        finally:
            self.active = False

    def visit_generic_const_(self, const):
        if len(const.value.shape) == 0 or not self.active:
            return const
        var = relax.Var(f"p{self.start + len(self.lifted):04d}", const.ty)
        self.lifted.append((var, const.value.numpy()))
        return var


def _is_transform(call) -> bool:
    return (getattr(call.op, "name", None) == "relax.call_tir"
            and call.args[0].name_hint.startswith(_LOAD_TRANSFORMS))


_LOAD_TRANSFORMS = (TRANSFORM_PREFIX, HALF_PREFIX)  # PrimFuncs the runtime runs once at load


def lift_params(mod: tvm.IRModule, *, only_transforms: bool = False) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """main(x) with constants inside -> main(x, p0000, p0001, ...) and the matching params dict.

    Parameters already lifted (main's "num_input" attribute counts its inputs) keep their names; the
    new ones continue the numbering. `only_transforms`: lift only the stored weights that a
    load-time transform reads (before FoldConstant, which would otherwise compute them now)."""
    func = mod["main"]
    attrs = dict(func.attrs) if func.attrs is not None else {}
    n_in = int(attrs.get("num_input", len(func.params)))
    lifter = _ConstLifter(mod, start=len(func.params) - n_in, only_transforms=only_transforms)
    body = lifter.visit_expr(func.body)
    new_params = [v for v, _ in lifter.lifted]
    attrs["num_input"] = n_in
    new = relax.Function(list(func.params) + new_params, body, func.ret_ty, func.is_pure,
                         tvm.ir.make_node("ir.DictAttrs", **attrs))
    out = tvm.IRModule({gv: f for gv, f in mod.functions_items()})
    out["main"] = new
    return out, {v.name: arr for v, arr in lifter.lifted}


def split_load_transforms(mod: tvm.IRModule) -> tvm.IRModule:
    """Add "infer" and "infer_transform_params" next to "main" when main transforms weights.

    infer_transform_params((p0000, ...)) runs the load-time transforms once and returns infer's
    parameters; infer(x, *those) is main without them. main(x, p0000, ...) is kept as it is."""
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(1) if (
        isinstance(e, relax.Call) and _is_transform(e)) else None)
    if not found:
        return mod
    rest = {gv: f for gv, f in mod.functions_items() if gv.name_hint != "main"}
    lifted = relax.transform.LiftTransformParams()(_with_infer(rest, mod["main"]))
    out = tvm.IRModule({gv: f for gv, f in mod.functions_items()}, attrs=mod.attrs)
    for gv, f in lifted.functions_items():
        if gv.name_hint in ("infer", "infer_transform_params"):
            out[gv.name_hint] = f
    return out


def _with_infer(rest: dict, main) -> tvm.IRModule:
    mod = tvm.IRModule(dict(rest))
    mod["infer"] = main.with_attr("global_symbol", "infer")
    return mod


def unscheduled_heavy_ops(mod: tvm.IRModule) -> list[str]:
    """High-level heavy ops still in "main" after rewriting: they would run TVM's plain loops."""
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in _HEAVY_OPS:
            found.append(expr.op.name)

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def _custom_legalize(tvm_target) -> dict:
    """Ops outside KernelRewriter's chains that still get a scheduled kernel: graph/ops/float_ops entries with a
    `legalize` (ops/resize.py: bilinear resize)."""
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.graph import ops as registry
    from edge_sdk.graph.ops import float_ops

    simd = simd_of(tvm_target)
    return {op: registry.resolve(name)(simd) for op, name in float_ops.with_legalize().items()}


def _pad_channels(mod, tvm_target):
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.compiler.ops.pad_channels import pad_channels

    return pad_channels(mod, simd_of(tvm_target))


def compile_relax(mod: tvm.IRModule, target, *, progress=None, kernel_sites: list | None = None,
                  tuning=None, tuned: list | None = None, chooser=None, half_weights: bool = False):
    """Compile a float Relax model with our kernels.

    mod: "main" takes one NHWC float32 input, weights bound as constants. target: an
    edge_sdk.targets.Target. Returns (executable, params) where the executable's "main" takes
    (input, p0000, p0001, ...) and params maps those names to numpy arrays. `kernel_sites`, when
    given, receives the PrimFunc calls of "main" in call order (compiler/kernel_map.py: call_sites),
    for the manifest's per-layer "kernels". `tuning`: a tune.store.RecordSet whose matching
    records replace our schedules (None: ours everywhere); `tuned`, when given, receives one entry
    per kernel that runs a tuned schedule (apply_tuning). `chooser`: compile/choice's Chooser (None:
    choice.active(): the compile's, or every kernel's own rule). `half_weights`: exact float16 params as float16.
    """
    say = progress or (lambda _msg: None)
    tvm_target = target.tvm_target()
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise CompileError("the Relax module has no 'main' function")
    t0 = time.perf_counter()
    try:
        with tvm_target:
            mod = prepare(mod)
            emitted: list = []
            mod, counts = rewrite_kernels(mod, tvm_target, emitted=emitted, chooser=chooser)
            mod = _pad_channels(mod, tvm_target)
            mod, stored = lift_params(mod, only_transforms=True)  # weights transformed at load
            left = unscheduled_heavy_ops(mod)
            mod, applied = apply_tuning(mod, tuning)
            if tuned is not None:
                tuned.extend(applied)
            if tuning is not None:
                say(f"tuning records: {len(applied)} kernel(s) use a tuned schedule ({len(tuning)} record(s) read)")
            say("scheduled kernels: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
                + (f"; left to default loops: {', '.join(sorted(set(left)))}" if left else ""))
            mod = tvm.transform.Sequential([
                relax.transform.RemoveRedundantReshape(),  # reshape(reshape(x)) would fuse into a copy
                relax.transform.LegalizeOps(customize_legalize_map=_custom_legalize(tvm_target)),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
                relax.transform.FuseOps(),
                relax.transform.FuseTIR(),
                relax.transform.DeadCodeElimination(["main"]),
            ])(mod)
            mod, params = lift_params(mod)
            params = {**stored, **params}
            mod, params = store_half(mod, params) if half_weights else (mod, params)  # cast at load
        if kernel_sites is not None:
            from edge_sdk.compiler.kernel_map import call_sites

            kernel_sites.extend(s for s in call_sites(mod, emitted) if not s["name"].startswith(_LOAD_TRANSFORMS))
        mod = split_load_transforms(mod)
        say(f"lifted {len(params)} parameters ({sum(a.nbytes for a in params.values()) / 1e6:.1f} MB)")
        from edge_sdk.compiler.stack_scratch import compile_vm

        ex = compile_vm(mod, tvm_target)
    except (RuntimeError, ValueError) as err:  # TVM raises RuntimeError subclasses
        raise CompileError(f"compiling for target '{target.name}' failed: {err}") from err
    say(f"compiled for {target.name} in {time.perf_counter() - t0:.1f} s")
    return ex, params
