"""One layer's kernel with one candidate schedule, built alone for a Pi and priced by the A53 clock.

    priced = price(site, schedule, target, acts)   # -> Priced(cycles, ok, error, ...)

Steps: site.build(schedule) gives the scheduled PrimFunc and all its inputs; a Relax module whose
main(x, p0000, ...) is one call_tir of it is compiled for the target and cross-linked
(aarch64-linux-gnu-g++), its other inputs saved as params.bin; our aarch64 runner runs it under
qemu-aarch64 with libtiming.so (qemu/runner.count_runner inside timing_session: K=1 and K=3 calls,
one call's profile is the difference), and the A53 timing model prices one call in modelled cycles
at the target's clock. The runner's output is checked against site.reference (choice.check). The
price is the whole call (kernel, its workspace allocations, the VM's call): what the layer costs in
a package. A build or run that fails is a candidate that cannot be kept (Priced.ok False, reason).
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk.compiler.choice import Built, Site, check
from edge_sdk.errors import EdgeError

KERNEL = "edge_choice_kernel"


@dataclass
class Priced:
    schedule: str
    ok: bool  # built, ran, and matched the reference
    cycles: float | None = None  # modelled A53 cycles of one call (None when it did not run)
    max_error: float | None = None
    reason: str = ""  # why not ok
    seconds: float = 0.0  # what pricing it took here (build + qemu), wall time of this machine

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


def relax_module(built: Built):
    """main(x, p0000, ...) = call_tir(kernel, [x, p0000, ...]); params {p0000: array, ...}."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    args = [relax.Var("x" if i == 0 else f"p{i - 1:04d}", relax.TensorType(a.shape, str(a.dtype)))
            for i, a in enumerate(built.args)]
    with bb.function("main", args, attrs={"num_input": 1}):
        gv = bb.add_func(built.func, KERNEL)
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.call_tir(gv, args, relax.TensorType(built.out.shape, built.out.dtype))))
        bb.emit_func_output(out)
    params = {f"p{i:04d}": tvm.runtime.tensor(np.ascontiguousarray(a)) for i, a in enumerate(built.args[1:])}
    return bb.get(), params


def build_library(built: Built, target, out_dir: Path) -> tuple[Path, Path]:
    """Compile and cross-link the standalone kernel: (model.so, params.bin) in out_dir."""
    import tvm

    from edge_sdk.compiler.ops.common import WORKLOAD_ATTR
    from edge_sdk.compiler.stack_scratch import compile_vm

    if built.func.attrs is not None and WORKLOAD_ATTR in built.func.attrs:
        built = Built(built.func.without_attr(WORKLOAD_ATTR), built.args, built.out)
    mod, params = relax_module(built)
    tt = target.tvm_target()
    with tt:
        ex = compile_vm(mod, tt)
    lib, pbin = out_dir / "model.so", out_dir / "params.bin"
    fcompile = target.compiler()
    if fcompile is None:
        ex.export_library(str(lib))
    else:
        ex.export_library(str(lib), fcompile=fcompile)
    tvm.runtime.save_param_dict_to_file(params, str(pbin))
    return lib, pbin


def run_priced(lib: Path, params: Path, x: np.ndarray, target) -> tuple[float, np.ndarray]:
    """(modelled cycles of one call, the runner's output) under qemu with the timing plugin."""
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing.session import timing_session

    with timing_session(target=target, layers=0):
        count = E.count_runner(lib=lib, params=params, input=x, cpu=target.qemu_cpu())
    if count.modelled is None:
        raise EdgeError(f"{lib.name}: the timing plugin produced no profile")
    return float(count.modelled["modelled_cycles"]), count.output


def price(site: Site, schedule: str, target, acts: list[np.ndarray], *, ref: np.ndarray | None = None) -> Priced:
    """Build, run, price and check one candidate (see the module docstring); never raises for a bad candidate."""
    t0 = time.perf_counter()
    ref = site.reference(acts) if ref is None else ref
    try:
        built = site.build(schedule, KERNEL, acts)
        with tempfile.TemporaryDirectory(prefix="edge-choice-") as tmp:
            lib, pbin = build_library(built, target, Path(tmp))
            cycles, out = run_priced(lib, pbin, built.args[0], target)
    except (EdgeError, RuntimeError, ValueError, KeyError, AssertionError) as err:  # TVM raises RuntimeError subclasses
        msg = str(err).strip().splitlines()
        return Priced(schedule, False, reason=f"{type(err).__name__}: {msg[-1][:300] if msg else ''}",
                      seconds=time.perf_counter() - t0)
    ok, worst = check(out, ref, rtol=site.rtol, atol=site.atol)
    return Priced(schedule, ok, cycles, worst, "" if ok else f"output differs from the numpy reference (max |err| {worst:.3g})",
                  seconds=time.perf_counter() - t0)


def check_plain(site: Site, schedule: str, target, acts: list[np.ndarray] | None = None) -> Priced:
    """One candidate built alone and run once under plain qemu (no timing plugin), checked against the
    numpy reference: how compile confirms a recorded winner whose code differs from the one recorded
    (compile/choice/chooser.RecordChooser). Priced.cycles stays None; never raises for a bad candidate."""
    from edge_sdk.qemu import runner as E

    t0 = time.perf_counter()
    acts = site.random_acts(seed=0) if acts is None else acts
    try:
        ref = site.reference(acts)
        built = site.build(schedule, KERNEL, acts)
        with tempfile.TemporaryDirectory(prefix="edge-choice-") as tmp:
            lib, pbin = build_library(built, target, Path(tmp))
            out = E.count_runner(lib=lib, params=pbin, input=built.args[0], cpu=target.qemu_cpu(), ks=(1,)).output
    except (EdgeError, RuntimeError, ValueError, KeyError, AssertionError) as err:
        msg = str(err).strip().splitlines()
        return Priced(schedule, False, reason=f"{type(err).__name__}: {msg[-1][:300] if msg else ''}",
                      seconds=time.perf_counter() - t0)
    ok, worst = check(out, ref, rtol=site.rtol, atol=site.atol)
    return Priced(schedule, ok, None, worst, "" if ok else f"output differs from the numpy reference (max |err| {worst:.3g})",
                  seconds=time.perf_counter() - t0)
