"""run_package: open a verified package and run it with the runtime bundle.

A package whose target architecture is the host's runs natively; an aarch64 package on an x86 host runs
under qemu-aarch64 with the target's CPU model (real aarch64 code, emulated: the latency is not a Pi's)
and, beside that QEMU wall time, gets the modelled Pi time of one inference (edge_sdk/timing through
edge_sdk/modelled.py, cached per package). Every run also checks the package's golden pair.
"""
from __future__ import annotations

import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.bench.rows import latency_stats
from edge_sdk.errors import RuntimeFailure, UsageError
from edge_sdk.package import Package, open_package
from edge_sdk.runtime.preprocess import MAX_IMAGE_PIXELS
from edge_sdk.runtime.profile import format_table, layer_times


@dataclass
class RunResult:
    package: str
    model: str
    variant: str
    target: str
    emulated: bool
    threads: int
    latencies_ms: list[float]
    load_ms: float
    golden_ok: bool
    golden_max_abs_err: float
    top_k: list[tuple[int, str | None, float]]
    output: np.ndarray = field(repr=False)
    layer_profile: object | None = field(default=None, repr=False)  # runtime.profile.LayerProfile (profile=True)
    peak_gflops: float | None = None  # of the cores the run's threads use, for the profile table
    modelled: dict | None = None  # emulated runs: the A53 timing model's figures (modelled_ms, ...)
    model_note: str = ""  # why an emulated run has no modelled figure

    @property
    def median_ms(self) -> float:
        return float(np.median(self.latencies_ms))

    def to_json(self) -> dict:
        return {
            "package": self.package, "model": self.model, "variant": self.variant, "target": self.target,
            "emulated": self.emulated, "threads": self.threads, "repeats": len(self.latencies_ms),
            "latency_ms": latency_stats(self.latencies_ms),
            "load_ms": self.load_ms,
            "golden": {"ok": self.golden_ok, "max_abs_err": self.golden_max_abs_err},
            "top_k": [{"class": c, "label": lbl, "score": s} for c, lbl, s in self.top_k],
            **({} if not self.modelled else {
                "modelled_ms": self.modelled["modelled_ms"], "modelled_cycles": self.modelled["modelled_cycles"],
                "model_version": self.modelled.get("model_version"),
                "modelled": {k: self.modelled[k] for k in ("target", "clock_ghz", "threads", "cycles_split")
                             if k in self.modelled} | {"what": "modelled Pi time (edge_sdk.timing), not a measurement"},
                "latency_is": "QEMU wall time (emulator speed, not a Pi)"}),
            **({} if self.layer_profile is None else {
                "per_layer_ms": self.layer_profile.per_layer_ms(),
                "profile": {"median_run_ms": self.layer_profile.run_ms, "other_ms": self.layer_profile.other_ms,
                            "kernels": self.layer_profile.kernels}}),
        }

    def __str__(self) -> str:
        where = "under qemu (emulated: not a Pi's latency)" if self.emulated else "natively"
        top = ", ".join(f"{lbl or c}: {s:.3f}" for c, lbl, s in self.top_k)
        wall = "QEMU wall time (emulator speed, not a Pi) " if self.emulated else ""
        from edge_sdk.modelled import modelled_label

        pi = "" if not self.emulated else (
            f"{modelled_label(self.target)} {self.modelled['modelled_ms']:.2f} (A53 timing model, not a measurement); "
            if self.modelled else f"no modelled Pi time ({self.model_note}); " if self.model_note else "")
        return (f"{self.model} {self.variant} for {self.target}, run {where}, {self.threads} thread(s): {pi}"
                f"{wall}median {self.median_ms:.2f} ms over {len(self.latencies_ms)} runs; "
                f"golden check {'ok' if self.golden_ok else 'FAILED'} (max abs err {self.golden_max_abs_err:.2e}); "
                f"top-{len(self.top_k)}: {top}"
                + ("" if self.layer_profile is None else "\n" + format_table(
                    self.layer_profile, peak_gflops=self.peak_gflops, emulated=self.emulated)))


MAX_INPUT_PIXELS = MAX_IMAGE_PIXELS  # 40 MP, as eval and the classify app read images


def load_input(path: Path, pkg: Package) -> np.ndarray:
    """A .npy (used as is, checked against the manifest) or an image (preprocessed as the manifest says)."""
    spec = pkg.manifest["input"]
    if not path.is_file():
        raise UsageError(f"{path}: no such input file")
    if path.suffix == ".npy":
        try:  # never unpickle: an object array is refused, as is anything that is not a .npy
            x = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise UsageError(f"{path}: not a plain numeric .npy array ({e})") from None
        if not isinstance(x, np.ndarray):
            raise UsageError(f"{path}: holds several arrays (.npz); give one .npy array")
        if list(x.shape) != spec["shape"] or str(x.dtype) != spec["dtype"]:
            raise UsageError(f"{path}: input has shape {list(x.shape)} {x.dtype}; the package wants "
                             f"{spec['shape']} {spec['dtype']}")
        return x
    from edge_sdk.runtime.preprocess import ImageFileError, PreprocessError, model_input, read_image_file

    try:  # the header's size is checked against MAX_INPUT_PIXELS before any pixel is decoded
        img = read_image_file(path, max_pixels=MAX_INPUT_PIXELS)
    except ImageFileError as e:
        raise UsageError(str(e)) from e
    try:  # crop, resize, normalise, layout and, for integer inputs, quantize: as the device does
        return model_input(img, spec)
    except PreprocessError as e:
        raise UsageError(f"{path}: {e}") from e


def top_k(scores: np.ndarray, labels: list[str] | None, k: int = 5) -> list[tuple[int, str | None, float]]:
    flat = np.asarray(scores, np.float64).reshape(-1)
    idx = np.argsort(-flat, kind="stable")[:k]
    return [(int(i), labels[i] if labels and i < len(labels) else None, float(flat[i])) for i in idx]


def golden_check(pkg: Package, out: np.ndarray) -> tuple[bool, float]:
    want = pkg.golden_output
    g = pkg.manifest["golden"]
    if out.shape != want.shape:
        return False, float("inf")
    err = float(np.abs(out.astype(np.float64) - want).max()) if out.size else 0.0
    return bool(np.allclose(out, want, rtol=g["rtol"], atol=g["atol"])), err


def _modelled(path: Path, threads: int) -> tuple[dict | None, str]:
    """(the timing model's figures of an emulated package, or None and why)."""
    from edge_sdk.errors import EdgeError
    from edge_sdk.modelled import modelled_package

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
                         golden_max_abs_err=err, top_k=top_k(res.output, m.get("labels"), k), output=res.output,
                         layer_profile=layer_times(m["layers"], res.profile) if profile else None,
                         peak_gflops=peak, modelled=modelled, model_note=note)
