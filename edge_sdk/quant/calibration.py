"""Calibration for post-training quantization, and the per-layer error report against the float model.

    res = quantize_model(model, images=DIR or None, seed=0)   # PTQResult: Int8Graph + report
    print(format_report(res.report))

Calibration inputs are images from a folder (PIL, through the model's Preprocess) or, without a
folder, seeded random frames — with a CalibrationWarning, because ranges from noise are not the
ranges of real images. Ranges are the min/max of each op output over the set (or the mean over
inputs of a per-input percentile, which ignores rare outliers). The report runs the int8 numpy
reference of the quantized graph and the float reference side by side on the same inputs and
compares every quantized tensor, dequantized, with its float twin: max |error|, RMSE and SQNR
(10 log10 of signal over error power). Errors accumulate through the net: a row is the error of the
whole int8 prefix up to that layer, which is what a user sees; top-1 agreement closes the table.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError, UsageError
from edge_sdk.quant import int8 as q8
from edge_sdk.quant.ptq import KEEPS_INPUT_QPARAMS, build_int8_graph, extract_layers

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".gif", ".tif", ".tiff", ".webp")
DEFAULT_RANDOM_COUNT = 16
REPORT_COUNT = 8  # inputs the error report runs (the first of the calibration set)


class CalibrationWarning(UserWarning):
    """Calibration ran on something other than real images."""


@dataclass
class PTQResult:
    graph: object  # Int8Graph
    report: dict  # per-layer error rows, top-1 agreement, calibration facts (goes to the manifest)
    inputs: list[np.ndarray]  # the float calibration inputs


def load_images(folder: Path, model, *, limit: int = 256) -> list[np.ndarray]:
    """Every image in the folder (sorted by name, at most `limit`), preprocessed to the model input."""
    from edge_sdk.runtime.device.preprocess import ImageFileError, read_image_file

    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: --calibrate needs a folder of images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not files:
        raise UsageError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}) to calibrate with")
    out = []
    for p in files:
        try:  # as eval and run read images: the pixel cap, bombs refused, 16-bit scaled
            arr = read_image_file(p)
        except ImageFileError as e:
            raise UsageError(str(e)) from e
        out.append(model.preprocess.apply(arr, layout=model.layout))  # runtime/device/preprocess.py, as eval and the device
    return out


def random_inputs(model, *, count: int, seed: int) -> list[np.ndarray]:
    """Seeded random frames (uniform pixels through the Preprocess): a stand-in when there are no images."""
    return [model.example_input(seed=seed + i) for i in range(count)]


def calibration_inputs(model, images: Path | None, *, seed: int, count: int = DEFAULT_RANDOM_COUNT,
                       warn=None) -> tuple[list[np.ndarray], dict]:
    if images is not None:
        xs = load_images(Path(images), model)
        return xs, {"source": str(images), "count": len(xs)}
    msg = (f"no calibration images given (--calibrate DIR): activation ranges come from {count} seeded random "
           f"frames (seed {seed}); accuracy on real images may suffer")
    warnings.warn(msg, CalibrationWarning, stacklevel=3)
    if warn is not None:
        warn("warning: " + msg)
    return random_inputs(model, count=count, seed=seed), {"source": f"random(seed={seed})", "count": count}


def _float_run(model, x: np.ndarray) -> dict:
    from edge_sdk.quant.relax_ref import evaluate

    trace: dict = {}
    try:
        evaluate(model.mod, x, trace=trace)
    except ModelError as e:
        raise ModelError(f"{model.source}: {e}") from e
    return trace


def calibrate(model, inputs: list[np.ndarray], *, method: str = "minmax", percentile: float = 99.99):
    """(layers, ranges): ranges[var] = (lo, hi) for every op output that is quantized on its own."""
    if method not in ("minmax", "percentile"):
        raise UsageError(f"calibration method '{method}': expected 'minmax' or 'percentile'")
    layers = None
    stats: dict = {}
    for x in inputs:
        trace = _float_run(model, x)
        if layers is None:
            layers = extract_layers(model, trace)
            wanted = [ly.output for ly in layers if ly.kind not in KEEPS_INPUT_QPARAMS + ("SOFTMAX",)]
        for v in wanted:
            t = trace[v]
            lo, hi = (float(t.min()), float(t.max())) if method == "minmax" else \
                (float(np.percentile(t, 100 - percentile)), float(np.percentile(t, percentile)))
            stats.setdefault(v, []).append((lo, hi))
    ranges = {}
    for v, rs in stats.items():
        los, his = np.array([r[0] for r in rs]), np.array([r[1] for r in rs])
        ranges[v] = (los.min(), his.max()) if method == "minmax" else (los.mean(), his.mean())
    return layers, ranges


def layer_report(model, g, to_var: dict, inputs: list[np.ndarray]) -> dict:
    """Dequantized int8 reference vs float reference, per quantized tensor, over `inputs`."""
    from edge_sdk.quant.tflite_int8_ref import run_reference

    acc: dict[int, list[float]] = {}  # tensor -> [sum err^2, sum ref^2, max|err|, count]
    agree = 0
    for x in inputs:
        trace = _float_run(model, x)
        t_in = g.tensors[g.inputs[0]]
        _, env = run_reference(g, q8.quantize(x, t_in.q.s, t_in.q.z), keep=True)
        for ti, var in to_var.items():
            if isinstance(var, tuple):  # a PAD we inserted has no float twin
                continue
            t = g.tensors[ti]
            f = trace[var].reshape(-1) if ti != g.inputs[0] else np.asarray(x, np.float64).reshape(-1)
            d = q8.dequantize(env[ti], t.q.s, t.q.z).astype(np.float64).reshape(-1)
            a = acc.setdefault(ti, [0.0, 0.0, 0.0, 0])
            e = d - f
            a[0] += float(e @ e)
            a[1] += float(f @ f)
            a[2] = max(a[2], float(np.abs(e).max()))
            a[3] += e.size
        out_f, out_q = trace[to_var[g.outputs[0]]], env[g.outputs[0]]
        agree += int(np.argmax(out_f) == np.argmax(out_q))
    producer = {op.outputs[0]: op for op in g.ops}
    rows = []
    for ti, (se, sr, mx, n) in acc.items():
        t = g.tensors[ti]
        op = producer.get(ti)
        rows.append({"layer": t.name, "op": op.kind.lower() if op else "input", "scale": t.q.s, "zero_point": t.q.z,
                     "max_abs": mx, "rmse": math.sqrt(se / n),
                     "sqnr_db": None if se == 0 else 10 * math.log10(max(sr, 1e-300) / se)})
    return {"inputs": len(inputs), "top1_agreement": agree / len(inputs), "layers": rows}


def format_report(report: dict) -> str:
    """The report as a fixed-width text table (printed by `edge-sdk compile`)."""
    lines = [f"per-layer quantization error, int8 reference (dequantized) vs float, {report['inputs']} inputs "
             f"(calibration: {report['calibration']['source']}, {report['calibration']['count']} inputs, "
             f"{report['calibration']['method']})",
             f"{'layer':<28} {'op':<18} {'scale':>10} {'zp':>5} {'max|err|':>10} {'rmse':>10} {'SQNR dB':>8}"]
    for r in report["layers"]:
        sq = "exact" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f}"
        lines.append(f"{r['layer'][:28]:<28} {r['op'][:18]:<18} {r['scale']:>10.5f} {r['zero_point']:>5} "
                     f"{r['max_abs']:>10.5f} {r['rmse']:>10.5f} {sq:>8}")
    lines.append(f"top-1 agreement with float: {report['top1_agreement']:.0%} of {report['inputs']} inputs")
    return "\n".join(lines)


def quantize_model(model, *, images: Path | None = None, seed: int = 0, method: str = "minmax",
                   percentile: float = 99.99, count: int = DEFAULT_RANDOM_COUNT, progress=None) -> PTQResult:
    """Calibrate, quantize and measure: the whole post-training quantization of one float model."""
    say = progress or (lambda _m: None)
    inputs, calib = calibration_inputs(model, images, seed=seed, count=count, warn=say)
    say(f"calibrating activation ranges ({method}) on {len(inputs)} inputs from {calib['source']}")
    layers, ranges = calibrate(model, inputs, method=method, percentile=percentile)
    g, to_var = build_int8_graph(model, layers, ranges)
    report = layer_report(model, g, to_var, inputs[:REPORT_COUNT])
    report["calibration"] = dict(calib, method=method if method == "minmax" else f"percentile {percentile}")
    return PTQResult(g, report, inputs)
