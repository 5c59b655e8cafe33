"""compile_model: Model -> .edgepkg for one variant and target.

Steps: check the toolchain, compute the layer table and the golden pair on the host with the
reference (LiteRT for .tflite inputs, else the numpy interpreter), lower and build with our schedules,
export the library (cross-linked for Pi targets) and parameters, write the package atomically.
"""
from __future__ import annotations

import datetime as _dt
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk import __version__
from edge_sdk.errors import CompileError
from edge_sdk.compiler.layers import layer_table
from edge_sdk.models.base import Model
from edge_sdk.package import npy_bytes, write_package
from edge_sdk.targets import Target
from edge_sdk.variants import LCE_VARIANTS, Variant

GOLDEN_RTOL = 1e-4
GOLDEN_ATOL = 1e-5
# Float paths: atol grows with the golden output's range (max - min), as bench's comparisons do, so an
# output in the hundreds is not failed at 1e-6 of its range. Bit-exact paths (atol 0) stay exact.
GOLDEN_RANGE_TOL = 1e-4


@dataclass
class CompileResult:
    package: Path
    manifest: dict
    seconds: dict  # stage -> seconds

    def __str__(self) -> str:
        size = self.package.stat().st_size
        return (f"{self.package} ({size / 1e6:.1f} MB): {self.manifest['model']['name']} "
                f"{self.manifest['variant']} for {self.manifest['target']['name']} in {sum(self.seconds.values()):.1f} s")


def versions() -> dict:
    import tvm
    import tvm_ffi

    return {"edge_sdk": __version__, "tvm": tvm.__version__, "tvm_ffi": tvm_ffi.__version__, "numpy": np.__version__}


@dataclass
class Lowered:
    """What a variant family's backend hands back: the executable, its params, and the golden pair."""

    executable: object  # tvm.runtime.Executable; "main" takes (input, p0000, p0001, ...)
    params: dict[str, np.ndarray]
    golden_input: np.ndarray
    golden_output: np.ndarray
    reference: str  # which independent engine computed golden_output
    input_quantization: dict | None = None  # {"scale": s, "zero_point": z} for integer inputs
    extra: dict | None = None  # family-specific manifest entries (bit widths, glue mode, ...)
    rtol: float = GOLDEN_RTOL  # how close a run must come to golden_output (0, 0 for bit-exact integer paths)
    atol: float = GOLDEN_ATOL
    layers: list[dict] | None = None  # the layer table of what was built, when it differs from the float graph's
    tuning: dict | None = None  # the manifest's "tuning": which kernels run a tuned schedule, from which records
    choice: dict | None = None  # the manifest's "choice": the per-layer schedule choice (compile/choice)


def reference_output(model: Model, x: np.ndarray) -> tuple[np.ndarray, str]:
    """The float golden output, from an engine independent of our compiler."""
    if model.source.endswith(".tflite") and not model.options.get("hybrid"):  # LiteRT's hybrid kernels
        from edge_sdk.runtime.litert import run_tflite, run_tflite_outputs

        if model.outputs:  # several outputs: the package's output is their flat concatenation
            from edge_sdk.models.outputs import concat_outputs

            return concat_outputs(run_tflite_outputs(Path(model.source), x)), "litert"
        return run_tflite(Path(model.source), x), "litert"
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.errors import ModelError

    try:
        return evaluate(model.mod, x), "numpy"
    except ModelError as e:
        raise ModelError(f"{model.source}: {e}") from e


def lower_float(model: Model, variant: Variant, target: Target, *, progress, seed: int,
                tuning=None) -> Lowered:
    """`tuning`: a tune.store.RecordSet (None: our schedules only)."""
    from edge_sdk.compiler.lower import compile_relax

    x = model.example_input(seed=seed)
    golden, ref = reference_output(model, x)
    progress(f"golden output from {ref}; lowering and building for {target.name}")
    sites: list = []
    tuned: list = []
    ex, params = compile_relax(model.mod, target, progress=progress, kernel_sites=sites, tuning=tuning,
                               tuned=tuned, half_weights=bool(model.options.get("float16_weights")))
    from edge_sdk.compiler.kernel_map import assign_kernels

    info = {"enabled": tuning is not None, "roots": [str(r) for r in tuning.roots] if tuning else [],
            "records_read": len(tuning) if tuning else 0, "kernels": tuned}
    return Lowered(ex, params, x, golden, ref, layers=assign_kernels(layer_table(model.mod), sites), tuning=info)


def tuning_records(target: Target, *, use: bool = True, extra: list[Path] = ()):
    """The RecordSet compile applies: `extra` roots first, then the user's and the shipped records;
    None when `use` is False (compile --no-tuning)."""
    if not use:
        return None
    from edge_sdk.tune.store import RecordSet, default_roots

    return RecordSet([*extra, *default_roots()], target)


# Each variant family: a function (model, variant, target, *, progress, seed) -> Lowered.
# int8 and bitserial register theirs from their own modules (see _backend). In the families of CHOOSES,
# on a Pi target, each layer's kernel schedule is chosen by modelled A53 price (compile/choice: the
# backend's kernels ask choice.active(), which compile_model sets).
BACKENDS: dict[str, str] = {
    "float": "edge_sdk.compiler.build:lower_float",
    "int8": "edge_sdk.compiler.int8.backend:lower_int8",
    "bitserial": "edge_sdk.compiler.bitserial.backend:lower_bitserial",
}
CHOOSES = ("float", "int8")


def _backend(family: str):
    import importlib

    module, _, fn = BACKENDS[family].partition(":")
    return getattr(importlib.import_module(module), fn)


def compile_model(model: Model, *, variant: Variant, target: Target, out: Path,
                  progress: Callable[[str], None] | None = None, seed: int = 0,
                  use_tuning: bool = True, tuning_roots: list[Path] = (), choose: bool | None = None) -> CompileResult:
    """Build one package. Float kernels take tuned schedules from matching tuning records unless
    `use_tuning` is False; `tuning_roots` are searched before the user's and the shipped records.
    `choose`: on a Pi target, pick each layer's schedule among its candidates by modelled A53 price
    (compile/choice; True: every candidate priced under qemu, False: off, None: $EDGE_SDK_CHOICE, by default
    the shipped choice records, nothing priced; use_tuning False turns it off too)."""
    say = progress or (lambda _msg: None)
    fcompile = target.compiler()  # fails early, naming the Debian package, if the cross compiler is missing
    if model.options.get("format") == "lce" and not variant.lce:
        from edge_sdk.errors import UsageError

        raise UsageError(f"{model.source} is a Larq binary model: compile it with --variant "
                         f"{' or '.join(LCE_VARIANTS)}, not {variant.name}")
    seconds: dict[str, float] = {}

    layers = layer_table(model.mod) if model.mod is not None else []
    t0 = time.perf_counter()
    say(f"reference run and build for {target.name}")
    extra = {"tuning": tuning_records(target, use=use_tuning, extra=list(tuning_roots))} \
        if variant.tunable else {}
    from edge_sdk.compiler.choice import using
    from edge_sdk.compiler.choice.chooser import annotate, chooser_for

    chooser = chooser_for(target, choose=choose if use_tuning else False, progress=say) \
        if variant.family in CHOOSES else None
    with using(chooser):
        low = _backend(variant.family)(model, variant, target, progress=say, seed=seed, **extra)
    layers, low.choice = annotate(low.layers if low.layers is not None else layers, chooser)
    seconds["build"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edgepkg-") as tmp:
        files = _export(Path(tmp), target, low, fcompile=fcompile, say=say)
        write_package(out, manifest=_manifest(model, variant, target, low, layers=layers, seed=seed), files=files)
    seconds["package"] = time.perf_counter() - t0
    from edge_sdk.package import read_manifest

    return CompileResult(package=out, manifest=read_manifest(out), seconds=seconds)


def _export(tmpd: Path, target: Target, low: Lowered, *, fcompile, say) -> dict[str, Path]:
    """The package's files in tmpd: the library (cross-linked by fcompile), params, the golden pair."""
    import tvm

    say("exporting library" + (f" with {target.cross_cc}" if target.cross_cc else ""))
    lib = tmpd / "model.so"
    if fcompile is None:
        low.executable.export_library(str(lib))
    else:
        low.executable.export_library(str(lib), fcompile=fcompile)
    _strip_debug(lib, target)
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in low.params.items()},
                                        str(tmpd / "params.bin"))
    (tmpd / "golden_input.npy").write_bytes(npy_bytes(low.golden_input))
    (tmpd / "golden_output.npy").write_bytes(npy_bytes(low.golden_output))
    return {n: tmpd / n for n in ("model.so", "params.bin", "golden_input.npy", "golden_output.npy")}


def _strip_debug(lib: Path, target: Target) -> None:
    """Drop the DWARF sections LLVM writes (half of model.so: 1.07 -> 0.54 MB for EfficientNet-B0 on pi3).
    The symbol table stays: the runner's per-kernel profile and the timing model name functions by it."""
    tool = target.strip_tool()
    if tool is None:
        return  # debug info is harmless, only bytes on the device
    r = subprocess.run([tool, "--strip-debug", str(lib)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise CompileError(f"{tool} --strip-debug {lib.name} failed: {r.stderr.strip()[-500:]}")


def _range(out: np.ndarray) -> float:
    out = np.asarray(out, np.float64)
    return float(out.max() - out.min()) if out.size and np.isfinite(out).all() else 0.0


def golden_tolerance(low: Lowered, seed: int, outputs: list[dict] | None = None) -> dict:
    """The manifest's "golden": rtol, and atol = max(the backend's atol, GOLDEN_RANGE_TOL x the golden
    output's range) unless the backend is bit-exact (atol 0); range and range_tol are recorded. With
    several outputs (`outputs` rows, which gain their own "range" and "atol"), the one flat tensor the
    runner checks gets the loosest output's atol; run and bench check each output with its own."""
    parts = [low.golden_output.reshape(-1)[o["offset"]:o["offset"] + o["size"]] for o in outputs or []]
    rng = max(map(_range, parts)) if parts else _range(low.golden_output)
    for o, part in zip(outputs or [], parts):
        o["range"] = _range(part)
        o["atol"] = max(low.atol, GOLDEN_RANGE_TOL * o["range"]) if low.atol > 0 else 0.0
    atol = max(low.atol, GOLDEN_RANGE_TOL * rng) if low.atol > 0 else 0.0
    return {"reference": low.reference, "seed": seed, "rtol": low.rtol, "atol": atol, "range": rng,
            "range_tol": GOLDEN_RANGE_TOL if low.atol > 0 else 0.0}


def _manifest(model: Model, variant: Variant, target: Target, low: Lowered, *, layers: list[dict],
              seed: int) -> dict:
    x, golden, params = low.golden_input, low.golden_output, low.params
    outputs = [dict(o) for o in model.outputs] if model.outputs else None
    return {
        "model": {"name": model.name, "source": model.source, "options": model.options},
        "variant": variant.name,
        "target": {"name": target.name, "arch": target.arch, "llvm": target.llvm,
                   "cores": target.cores, "clock_ghz": target.clock_ghz,
                   "peak_gflops": target.peak_gflops, "mem_gbps": target.mem_gbps},
        "versions": versions(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "input": {"name": model.input_name, "shape": list(x.shape), "dtype": str(x.dtype),
                  "layout": model.layout, "preprocess": model.preprocess.to_json(),
                  "quantization": low.input_quantization},
        "output": {"shape": list(golden.shape), "dtype": str(golden.dtype)},
        "labels": model.labels,
        "params": {"count": len(params), "bytes": int(sum(v.nbytes for v in params.values()))},
        "layers": layers,
        "totals": {"flops": int(sum(r["flops"] for r in layers)),
                   "bytes": int(sum(r["bytes_read"] + r["bytes_written"] for r in layers))},
        "outputs": outputs,
        "golden": golden_tolerance(low, seed, outputs),
        "tuning": low.tuning,
        "choice": low.choice or {"enabled": False},
        "variant_info": {"family": variant.family, "weight_bits": variant.weight_bits,
                         "activation_bits": variant.activation_bits, **(low.extra or {})},
    }
