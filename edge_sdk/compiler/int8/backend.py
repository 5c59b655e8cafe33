"""Full-int8 .tflite -> Relax VM executable of integer kernels, with the same export/runner path as float.

    compile_int8(path or Int8Graph, target) -> (executable, params, input_spec)
    lower_int8(model, variant, target, *, progress, seed) -> build.Lowered   (compile_model's int8 backend)

lower_int8 takes a full-int8 .tflite as it is, or quantizes a float model first (quant/ptq.py:
calibration from model.options["calibrate"], a folder of images, or seeded random frames).

Each op of the Int8Graph (edge_sdk.models.tflite_int8) is emitted by the kernel its graph/ops entry names:
one call_tir to a PrimFunc we scheduled (emit_scheduled.py: kernels.py for conv/depthwise/dense with the
requantize fused in, glue.py for add/pool/mean/pad/softmax/quantize; binary_unary_resize_move.py for the
broadcasting, table, resize ops); reshape/squeeze/concat and the movement ops stay Relax ops (TVM
legalizes them: pure data movement). Weights, biases and
requantization constants are relax constants, lifted into params p0000... by lower.lift_params.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from edge_sdk.compiler.lower import lift_params
from edge_sdk.errors import CompileError, ModelError, UsageError
from edge_sdk.graph import ops as registry
from edge_sdk.models.tflite_int8 import Int8Graph, read_int8_tflite


class _Recording(relax.BlockBuilder):
    """A BlockBuilder that notes (layer row, PrimFunc name) per add_func: structurally equal kernels (ops of
    one shape) share one PrimFunc, so the name is the one add_func returns, in emission order (call_sites)."""

    def __init__(self):
        super().__init__()
        self.layer, self.emitted = "", []

    def add_func(self, func, func_name):
        gv = super().add_func(func, func_name)
        self.emitted.append((self.layer, gv.name_hint))
        return gv


def build_relax(g: Int8Graph, target: tvm.target.Target, *, emitted: list | None = None
                ) -> tuple[tvm.IRModule, dict[str, int]]:
    """The Relax module: main(x) = each op's kernel (its graph/ops entry's emitter), in order; counts per kind.
    `emitted`, when given, receives (layer row name, PrimFunc name) per kernel added (kernel_map.call_sites)."""
    from edge_sdk.compiler.int8.layers import row_name

    t_in = g.tensors[g.inputs[0]]
    x = relax.Var("input", relax.TensorType(t_in.shape, t_in.dtype))
    bb = _Recording()
    counts: dict[str, int] = {}
    with target, bb.function("main", [x]):
        with bb.dataflow():
            env = {g.inputs[0]: x}
            for op in g.ops:
                counts[op.kind] = counts.get(op.kind, 0) + 1
                bb.layer = row_name(g, op)
                d = registry.of(op.kind)
                if d is None:  # pragma: no cover - read_int8_tflite validated the op list
                    raise ModelError(f"{g.path}: op {op.index} ({op.kind}) has no int8 kernel")
                vals = registry.resolve(d.kernel)(bb, g, op, env, name=f"{op.kind.lower()}_{op.index}")
                env.update(zip(op.outputs, vals))
            out = bb.emit_output(env[g.outputs[0]])
        bb.emit_func_output(out)
    if emitted is not None:
        emitted.extend(bb.emitted)
    return bb.get(), counts


def compile_int8(path: Path | Int8Graph, target, *, progress=None, kernel_sites: list | None = None):
    """Compile a full-int8 .tflite (or an Int8Graph already read or built by PTQ) for an edge_sdk Target.

    Returns (executable, params, input_spec): "main" takes (input, p0000, p0001, ...); input_spec is
    Int8Graph.input_spec() (shape, dtype and, for int8 inputs, scale/zero point for the manifest).
    `kernel_sites`, when given, receives the PrimFunc calls of "main" (kernel_map.call_sites), for the
    layer table's "kernels" (layers.int8_layer_table).
    """
    say = progress or (lambda _msg: None)
    g = path if isinstance(path, Int8Graph) else read_int8_tflite(Path(path))
    path = g.path
    tvm_target = target.tvm_target()
    t0 = time.perf_counter()
    try:
        with tvm_target:
            emitted: list = []
            mod, counts = build_relax(g, tvm_target, emitted=emitted)
            say("int8 kernels: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
            mod = tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                            relax.transform.DeadCodeElimination(["main"])])(mod)
            mod, params = lift_params(mod)
            if kernel_sites is not None:
                from edge_sdk.compiler.kernel_map import call_sites

                kernel_sites.extend(call_sites(mod, emitted))
        from edge_sdk.compiler.stack_scratch import compile_vm

        ex = compile_vm(mod, tvm_target)
    except (RuntimeError, ValueError) as err:  # TVM raises RuntimeError subclasses
        raise CompileError(f"{path}: compiling int8 for target '{target.name}' failed: {err}") from err
    say(f"compiled int8 for {target.name} in {time.perf_counter() - t0:.1f} s")
    return ex, params, g.input_spec()


def example_input(g: Int8Graph, *, seed: int = 0) -> np.ndarray:
    """A seeded input of the model's dtype: int8 over the full range, or float32 ~ N(0, 1)."""
    t = g.tensors[g.inputs[0]]
    rng = np.random.default_rng(seed)
    if t.dtype == "int8":
        return rng.integers(-128, 128, t.shape, dtype=np.int8)
    return rng.uniform(-1.0, 1.0, t.shape).astype(np.float32)


def _reference_golden(g: Int8Graph, src: Path, x: np.ndarray) -> tuple[np.ndarray, str]:
    """The golden output from LiteRT's reference kernels (XNNPACK off), run in a child process: LiteRT 2.3's
    BUILTIN_REF aborts the whole process on some converter-written files (seen: TF 2.16's MobileNetV1 int8
    in the peers folder, which XNNPACK runs). Then the numpy int8 reference, which equals BUILTIN_REF on
    every op we compile (tests/test_quant_int8.py), gives it."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edge-int8-ref-") as tmp:
        xi, yo = Path(tmp) / "x.npy", Path(tmp) / "y.npy"
        np.save(xi, x, allow_pickle=False)
        code = ("import sys, numpy as np; from edge_sdk.runtime.litert import run_tflite; "
                "np.save(sys.argv[3], run_tflite(sys.argv[1], np.load(sys.argv[2]), reference_kernels=True))")
        res = subprocess.run([sys.executable, "-c", code, str(src), str(xi), str(yo)], capture_output=True,
                             text=True, timeout=600, check=False)
        if res.returncode == 0 and yo.is_file():
            return np.load(yo), "litert-builtin-ref"
    from edge_sdk.quant.tflite_int8_ref import run_reference

    return run_reference(g, x), "numpy-int8-reference"


def lower_int8(model, variant, target, *, progress, seed: int):
    """compile_model's backend for variant family "int8": model.source must be a full-int8 .tflite."""
    from edge_sdk.compiler.build import Lowered

    calibrate = model.options.get("calibrate")
    if model.mod is not None:  # a float model: post-training quantization first
        return _lower_ptq(model, target, progress=progress, seed=seed,
                          images=Path(calibrate) if calibrate else None)
    src = Path(model.source)
    if calibrate:
        raise UsageError(f"{model.source} is already a full-integer model: --calibrate applies to float models")
    g = read_int8_tflite(src)
    x = example_input(g, seed=seed)
    golden, ref = _reference_golden(g, src, x)
    progress(f"golden output from {ref}; compiling integer kernels")
    sites: list = []
    ex, params, spec = compile_int8(g, target, progress=progress, kernel_sites=sites)
    from edge_sdk.compiler.int8.layers import int8_layer_table

    return Lowered(ex, params, x, golden, ref, input_quantization=spec["quantization"],
                   extra={"output_quantization": g.output_spec()["quantization"]}, rtol=0.0, atol=0.0,
                   layers=int8_layer_table(g, sites))


def _lower_ptq(model, target, *, progress, seed: int, images: Path | None):
    """Float model -> PTQ Int8Graph -> integer kernels; golden pair from the numpy int8 reference (exact)."""
    from edge_sdk.compiler.build import Lowered
    from edge_sdk.compiler.int8.layers import int8_layer_table
    from edge_sdk.quant.tflite_int8_ref import run_reference
    from edge_sdk.quant.calibration import format_report, quantize_model
    from edge_sdk.quant.int8 import quantize

    res = quantize_model(model, images=images, seed=seed, progress=progress)
    progress(format_report(res.report))
    g = res.graph
    t_in = g.tensors[g.inputs[0]]
    x = quantize(model.example_input(seed=seed), t_in.q.s, t_in.q.z)
    golden = run_reference(g, x)
    progress("golden output from the numpy int8 reference of the quantized graph; compiling integer kernels")
    sites: list = []
    ex, params, spec = compile_int8(g, target, progress=progress, kernel_sites=sites)
    return Lowered(ex, params, x, golden, "numpy-int8-ptq", input_quantization=spec["quantization"],
                   extra={"output_quantization": g.output_spec()["quantization"], "ptq": res.report},
                   rtol=0.0, atol=0.0, layers=int8_layer_table(g, sites))
