"""run_package: open a verified package and run it with the runtime bundle.

A package whose target architecture is the host's runs natively; an aarch64 package on an x86 host runs
under qemu-aarch64 with the target's CPU model (real aarch64 code, emulated: the latency is not a Pi's)
and, beside that QEMU wall time, gets the modelled Pi time of one inference (edge_sdk/timing through
edge_sdk/timing/package_figures.py, cached per package). Every run also checks the package's golden pair. What it
returns (RunResult) and reads inputs with (load_input) are runtime/result.py's, shared with fleet/remote.py.
"""
from __future__ import annotations

import platform
import tempfile
from pathlib import Path

import numpy as np

from edge_sdk.errors import RuntimeFailure, UsageError
from edge_sdk.package import open_package
from edge_sdk.runtime.profile import layer_times
from edge_sdk.runtime.result import RunResult, golden_check, head_output, load_input, top_k


def _modelled(path: Path, threads: int) -> tuple[dict | None, str]:
    """(the timing model's figures of an emulated package, or None and why)."""
    from edge_sdk.errors import EdgeError
    from edge_sdk.timing.package_figures import modelled_package

    try:
        return modelled_package(path, threads=threads)[0], ""
    except EdgeError as e:
        return None, f"{type(e).__name__}: {str(e).strip()[:200]}"


def run_package(path: Path, *, input_path: Path | None = None, threads: int = 1, repeat: int = 10,
                warmup: int = 1, k: int = 5, profile: bool = False, model: bool = True) -> RunResult:
    """Run a package here; `profile` adds per-layer times (conv vs glue) from `repeat` more timed-hook runs;
    `model` (emulated runs): also the modelled Pi time of one inference."""
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    with tempfile.TemporaryDirectory(prefix="edgepkg-run-") as tmp:
        pkg = open_package(path, Path(tmp) / "pkg")
        m = pkg.manifest
        arch = m["target"]["arch"]
        host_arch = platform.machine()
        emulate = None
        if arch != host_arch:
            if arch != "aarch64":
                raise UsageError(f"{path}: a {arch} package cannot run on this {host_arch} machine")
            from edge_sdk.targets import get_target

            emulate = get_target(m["target"]["name"]).qemu_cpu()
        common = dict(lib=pkg.member("model.so"), params=pkg.member("params.bin"), arch=arch, emulate_cpu=emulate)
        golden_in = pkg.golden_input
        x = load_input(input_path, pkg) if input_path else golden_in
        res = run_compiled(input=x, how=LocalRun(threads=threads, warmup=warmup, repeat=repeat, profile=profile), **common)
        gold = res if input_path is None else run_compiled(input=golden_in, how=LocalRun(threads=threads, warmup=0,
                                                                                         repeat=1), **common)
        ok, err = golden_check(pkg, gold.output)
        if not np.isfinite(res.output).all():
            raise RuntimeFailure(f"{path}: the model produced non-finite outputs")
        modelled, note = _modelled(path, threads) if emulate and model else (None, "")
        t, cores = m["target"], m["target"].get("cores") or 1
        peak = t["peak_gflops"] * min(threads, cores) / cores if t.get("peak_gflops") else None  # the threads' cores
        return RunResult(package=str(path), model=m["model"]["name"], variant=m["variant"],
                         target=m["target"]["name"], emulated=emulate is not None, threads=threads,
                         latencies_ms=list(res.latencies_ms), load_ms=res.load_ms, golden_ok=ok,
                         golden_max_abs_err=err, top_k=top_k(head_output(res.output, m), m.get("labels"), k), output=res.output,
                         layer_profile=layer_times(m["layers"], res.profile) if profile else None,
                         peak_gflops=peak, modelled=modelled, model_note=note,
                         layer_flops={lyr["name"]: lyr.get("flops", 0) for lyr in m.get("layers") or []})
