"""What a run of a package reports, wherever it ran: RunResult (edge-sdk run here, run.py) and the pieces
fleet/remote.py's run on a device reports with too (load_input, top_k, golden_check, latency_stats).

Below run.py, fleet/ and bench/: plain data and numpy, no runner, no SSH, no timing model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import UsageError
from edge_sdk.labels import QEMU_WALL, modelled_label
from edge_sdk.package import Package
from edge_sdk.runtime.device.preprocess import MAX_IMAGE_PIXELS
from edge_sdk.runtime.profile import format_modelled_table, format_table


def latency_stats(lat) -> dict:
    """median, p10, p90, min and max of latencies in ms (every latency dict edge-sdk writes has these keys)."""
    a = np.asarray(lat, np.float64)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)),
            "min": float(a.min()), "max": float(a.max())}


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
    modelled: dict | None = None  # emulated runs: the A53 timing model's figures (modelled_ms, per_layer_modelled_ms, ...)
    layer_flops: dict | None = field(default=None, repr=False)  # layer name -> FLOPs (the modelled table's GFLOP/s)
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
                "latency_is": QEMU_WALL}),
            **({} if not self.modelled or self.layer_profile is None or "per_layer_modelled_ms" not in self.modelled
               else {"per_layer_modelled_ms": self.modelled["per_layer_modelled_ms"],
                     "per_layer_modelled_is": f"{modelled_label(self.target)}: the A53 timing model's price of "
                     "each layer's functions in model.so (edge_sdk/timing/per_layer.py), not a measurement"}),
            **({} if self.layer_profile is None else {
                "per_layer_ms": self.layer_profile.per_layer_ms(),
                **({"per_layer_ms_is": QEMU_WALL} if self.emulated else {}),
                "profile": {"median_run_ms": self.layer_profile.run_ms, "other_ms": self.layer_profile.other_ms,
                            "kernels": self.layer_profile.kernels}}),
        }

    def __str__(self) -> str:
        where = "under qemu (emulated: not a Pi's latency)" if self.emulated else "natively"
        top = ", ".join(f"{lbl or c}: {s:.3f}" for c, lbl, s in self.top_k)
        wall = f"{QEMU_WALL} " if self.emulated else ""
        pi = "" if not self.emulated else (
            f"{modelled_label(self.target)} {self.modelled['modelled_ms']:.2f} (A53 timing model, not a measurement); "
            if self.modelled else f"no modelled Pi time ({self.model_note}); " if self.model_note else "")
        return (f"{self.model} {self.variant} for {self.target}, run {where}, {self.threads} thread(s): {pi}"
                f"{wall}median {self.median_ms:.2f} ms over {len(self.latencies_ms)} runs; "
                f"golden check {'ok' if self.golden_ok else 'FAILED'} (max abs err {self.golden_max_abs_err:.2e}); "
                f"top-{len(self.top_k)}: {top}"
                + self._tables())

    def _tables(self) -> str:
        """The profile's tables: an emulated run's modelled Pi ms per layer first, its QEMU wall times after."""
        if self.layer_profile is None:
            return ""
        out = ""
        rows = (self.modelled or {}).get("per_layer_modelled_ms")
        if rows:
            out = (f"\nper layer, {modelled_label(self.target)} (A53 timing model, not a measurement):\n"
                   + format_modelled_table(rows, modelled_ms=self.modelled["modelled_ms"],
                                           label=modelled_label(self.target), flops=self.layer_flops,
                                           peak_gflops=self.peak_gflops))
        wall = f"\nper layer, {QEMU_WALL} (an extra: never a Pi's time):\n" if self.emulated else "\n"
        return out + wall + format_table(self.layer_profile, peak_gflops=self.peak_gflops, emulated=self.emulated)


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
    from edge_sdk.runtime.device.preprocess import ImageFileError, PreprocessError, model_input, read_image_file

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


def runner_segments(manifest: dict) -> list[str]:
    """edge-runner's per-output golden check: ["--segments", "N1:A1,N2:A2,..."] (each output's slice of the flat
    tensor with its own atol) for a package with several outputs; [] for one output."""
    parts = [o for o in manifest.get("outputs") or [] if "atol" in o]
    if not parts:
        return []
    return ["--segments", ",".join(f"{int(o['size'])}:{float(o['atol'])!r}" for o in parts)]


def golden_check(pkg: Package, out: np.ndarray) -> tuple[bool, float]:
    """(close, max abs error) against the golden output. Several outputs (manifest "outputs", one flat
    tensor): each output's slice with its own atol (its range's), so boxes in the hundreds do not loosen
    the check of scores in [0, 1]; the device runner does the same (runner_segments)."""
    want = pkg.golden_output
    g = pkg.manifest["golden"]
    if out.shape != want.shape:
        return False, float("inf")
    err = float(np.abs(out.astype(np.float64) - want).max()) if out.size else 0.0
    parts = [o for o in pkg.manifest.get("outputs") or [] if "atol" in o]
    if not parts:
        return bool(np.allclose(out, want, rtol=g["rtol"], atol=g["atol"])), err
    flat, ref = out.reshape(-1), want.reshape(-1)
    return all(bool(np.allclose(flat[o["offset"]:o["offset"] + o["size"]], ref[o["offset"]:o["offset"] + o["size"]],
                                rtol=g["rtol"], atol=o["atol"])) for o in parts), err


def head_output(out: np.ndarray, manifest: dict, name: str | None = None) -> np.ndarray:
    """The output a classifier's top-k reads: the one named (--output NAME), else the first; the whole
    tensor for a single-output package."""
    outputs = manifest.get("outputs") or []
    if not outputs:
        return out
    pick = next((o for o in outputs if o["name"] == name), None) if name else outputs[0]
    if pick is None:
        raise ValueError(f"no output named '{name}' (outputs: {', '.join(o['name'] for o in outputs)})")
    return np.asarray(out).reshape(-1)[pick["offset"]:pick["offset"] + pick["size"]]
