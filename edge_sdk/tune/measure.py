"""Builders and runners for `edge-sdk tune`, and the fair ours-vs-tuned measurement.

Host: candidates are built by PooledBuilder (worker processes kept for the whole tune, a timeout
per candidate) instead of MetaSchedule's LocalBuilder, which starts a fresh process pool per batch
(one TVM import per worker). They are timed by MetaSchedule's LocalRunner (a separate process
with a timeout, so a slow or crashing candidate cannot take the tuner down).
Device: the same builder with the device's f_export (cross-linked .so); candidates are timed on
the device by device_runner.make_device_runner.

"Ours" and the best tuned schedule are then timed by the same runner, interleaved (ours, tuned,
ours, tuned, ...), and compared by the median: on a machine shared with other work, a single
timing of each would mostly measure the neighbours.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder

from edge_sdk.errors import RuntimeFailure, UsageError


def cpu_tensor_intrinsics() -> None:
    """Register only the CPU tensor intrinsics before MetaSchedule imports tvm.s_tir.tensor_intrin.

    That package's __init__ also parses the CUDA, ROCm and Hexagon intrinsics (hundreds of TVMScript
    functions): measured here 100-150 s of a tune's start, spent in inspect.stack(). LLVM targets'
    schedule rules use x86 and arm_cpu intrinsics only (~1 s and ~6 s). The package module goes into
    sys.modules unexecuted, so later `import tvm.s_tir.tensor_intrin` finds it and skips the rest.
    """
    import importlib
    import importlib.util
    import sys

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[name] = pkg
    tvm.s_tir.tensor_intrin = pkg
    for sub in ("x86", "arm_cpu"):
        importlib.import_module(f"{name}.{sub}")


def _host_export(mod) -> str:
    path = os.path.join(tempfile.mkdtemp(prefix="edge-tune-"), "candidate.so")
    mod.export_library(path)
    return path


def _build_one(mod, target, export) -> str:
    """MetaSchedule's default_build, through tvm.tirx.build (tvm.build is deprecated), then export."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return export(tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target))


@derived_object
class PooledBuilder(PyBuilder):
    """Build candidates in worker processes that live as long as the tune, each with a timeout.

    Why not LocalBuilder: it starts a fresh pool per batch, and each worker imports TVM again
    (measured: 8 small candidates took 63 s to build that way, 4 s in one process). Why not in
    this process: a candidate can take LLVM minutes (seen: a max pool with everything unrolled),
    and only a separate process can be stopped; a worker that times out is replaced."""

    def __init__(self, export=None, *, timeout_sec: float = 60.0, workers: int | None = None):
        super().__init__()
        from tvm.support.popen_pool import PopenPoolExecutor

        self.export = export or _host_export
        self.timeout_sec = timeout_sec
        self.pool = PopenPoolExecutor(max_workers=workers or max(1, min(2, os.cpu_count() or 1)),
                                      timeout=timeout_sec)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        from tvm.support.popen_pool import StatusKind

        results = []
        jobs = [(bi.mod, bi.target, self.export) for bi in build_inputs]
        for res in self.pool.map_with_error_catching(lambda job: _build_one(*job), jobs):
            if res.status == StatusKind.COMPLETE:
                results.append(BuilderResult(res.value, None))
            elif res.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"build timed out after {self.timeout_sec:.0f} s"))
            else:
                results.append(BuilderResult(None, f"build failed: {res.value}"))
        return results

    def close(self) -> None:
        self.pool.shutdown()


@dataclass(frozen=True)
class Remote:
    """A fleet device to time candidates on: its name, the fleet file, the known_hosts to check it with."""

    device: str
    fleet: Path
    known_hosts: Path | None = None


class Measurer:
    """The builder and runner of one tune session, for a target and an optional fleet device."""

    def __init__(self, target, *, remote: Remote | None = None, timeout_sec: float = 30.0):
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, LocalRunner

        cpu_tensor_intrinsics()
        self.target = target
        self.where = f"device {remote.device}" if remote else "host"
        self.deterministic = False  # True: the runner's times repeat exactly, so one round is the median
        self.closer = None
        if remote:
            from edge_sdk.tune.device_runner import export_for, make_device_runner

            self.builder = PooledBuilder(export_for(target))
            self.runner = make_device_runner(device=remote.device, fleet=remote.fleet, target=target,
                                             known_hosts=remote.known_hosts)
            self.closer = getattr(self.runner, "close", None)
        elif modelled(target):
            from edge_sdk.tune.device_runner import export_for
            from edge_sdk.tune.modelled_runner import ModelledRunner

            self.where = "the modelled A53 clock (qemu)"
            self.deterministic = True
            self.builder = PooledBuilder(export_for(target))
            self.runner = ModelledRunner(target)
        else:
            check_local(target)
            self.builder = PooledBuilder()
            self.runner = LocalRunner(timeout_sec=timeout_sec, evaluator_config=EvaluatorConfig(
                number=1, repeat=5, min_repeat_ms=40, enable_cpu_cache_flush=False))

    def close(self) -> None:
        self.builder.close()
        if self.closer is not None:
            self.closer()
            self.closer = None

    @property
    def timing(self) -> str:
        """How time() times, for the records."""
        if self.deterministic:
            return "modelled A53 seconds of one call (deterministic: one run each) x 1e3"
        return "median of interleaved repeats, seconds per call x 1e3"

    @contextmanager
    def cutting(self):
        """While searching: the modelled runner cuts candidates against the kernel time() priced last (ours;
        tune/modelled_runner.py); the other runners time every candidate in full."""
        last = getattr(self.runner, "last", None) if self.deterministic else None
        if not last or last[0] is None:
            yield
            return
        self.runner.ours = last[0]
        try:
            yield
        finally:
            self.runner.ours = None

    def time(self, funcs: list, *, rounds: int = 3) -> list[float]:
        """Median seconds per call of each PrimFunc, timed interleaved `rounds` times (once when the runner is
        deterministic: the modelled clock gives the same price every round)."""
        import tvm
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        tvm_target = self.target.tvm_target()
        built = self.builder.build([BuilderInput(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}),
                                                 tvm_target) for f in funcs])
        try:
            for b in built:
                if b.error_msg:
                    raise RuntimeFailure(f"building a kernel to time on {self.where} failed: {b.error_msg}")
            samples: list[list[float]] = [[] for _ in funcs]
            for _ in range(1 if self.deterministic else rounds):
                inputs = [RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(f)) for b, f in zip(built, funcs)]
                for i, fut in enumerate(self.runner.run(inputs)):
                    res = fut.result()
                    if res.error_msg:
                        raise RuntimeFailure(f"timing a kernel on {self.where} failed: {res.error_msg}")
                    samples[i].extend(float(s) for s in res.run_secs)
            return [statistics.median(s) for s in samples]
        finally:
            for b in built:
                if b.artifact_path:
                    shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)


def modelled(target) -> bool:
    """A Pi target with no device: candidates are priced by the modelled A53 clock (tune/modelled_runner.py)."""
    from edge_sdk.compiler.choice.chooser import applies

    return target.arch != _host_arch() and applies(target)


def check_local(target) -> None:
    """Refuse to tune a target this machine cannot run (or model): its times would be no times at all."""
    if target.arch != _host_arch() and not modelled(target):
        raise UsageError(
            f"--target {target.name}: this {_host_arch()} host cannot time {target.arch} code (only the "
            f"Cortex-A53 Pis have a modelled clock); tune on a device with --device NAME --fleet FLEET (a real Pi, or the emulated Pi of the "
            f"fleet stand-ins, whose times are qemu's, not an A53's)")


def _host_arch() -> str:
    import platform

    m = platform.machine()
    return {"arm64": "aarch64", "AMD64": "x86_64"}.get(m, m)
