#!/usr/bin/env python3
"""Classify camera frames with every installed variant of a model, side by side, on the device.

    python3 classify.py --model mobilenet_v1 --source picamera2 --max-frames 100 --out results.jsonl

Runs where deploy installed the model (~/.edge-sdk/models/<model>-<variant>/current) with the
runtime bundle's Python loader (~/.edge-sdk/runtime/current): python3 + numpy, no compiler, no
edge_sdk. Each variant's VM is loaded once. Per frame, preprocessing (the bundle's preprocess.py: crop,
resize, mean/std, channel order, layout and, for int8 inputs, quantization, all from each package's
manifest) runs once per distinct input spec and is shared; every variant classifies the same frame.
It prints top-k and latency per variant and writes one JSON line per (frame, variant): latency, top-k,
agreement with float32.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sources import SourceError, open_source  # noqa: E402

HOME = Path(os.environ.get("EDGE_SDK_DEVICE_HOME") or Path.home() / ".edge-sdk")


class AppError(RuntimeError):
    pass


class Variant:
    """One installed package: its manifest, loaded model and input spec."""

    def __init__(self, install: Path, load, threads: int, output: str | None = None):
        self.manifest = json.loads((install / "manifest.json").read_text())
        self.name = self.manifest["variant"]
        self.spec = self.manifest["input"]
        self.labels = self.manifest.get("labels")
        self.head = _head(self.manifest, output)  # (offset, size) of the classifier output in the flat tensor
        self.model = load(install / "model.so", install / "params.bin", threads=threads)

    def top_k(self, scores: np.ndarray, k: int) -> list[dict]:
        flat = np.asarray(scores, np.float64).reshape(-1)
        if self.head is not None:
            flat = flat[self.head[0]:self.head[0] + self.head[1]]
        idx = np.argsort(-flat, kind="stable")[:k]
        return [{"class": int(i), "label": self.labels[i] if self.labels and i < len(self.labels) else None,
                 "score": round(float(flat[i]), 6)} for i in idx]


def _head(manifest: dict, name: str | None) -> tuple[int, int] | None:
    """A package with several outputs (manifest "outputs", one flat tensor): the one `--output NAME` names,
    else the first; None for a single-output package (its whole tensor)."""
    outputs = manifest.get("outputs") or []
    if not outputs:
        if name:
            raise AppError(f"--output {name}: the model has one output")
        return None
    pick = next((o for o in outputs if o["name"] == name), None) if name else outputs[0]
    if pick is None:
        raise AppError(f"--output {name}: no such output (outputs: {', '.join(o['name'] for o in outputs)})")
    return int(pick["offset"]), int(pick["size"])


def installed(models_dir: Path, model: str) -> dict[str, Path]:
    """variant name -> install dir, for every <model>-<variant>/current with a manifest."""
    found = {}
    for d in sorted(models_dir.glob(f"{model}-*")):
        cur = d / "current"
        if (cur / "manifest.json").is_file():
            found[json.loads((cur / "manifest.json").read_text())["variant"]] = cur
    return found


def _pp():
    """The runtime bundle's preprocessing (edge_sdk_runtime/preprocess.py, the SDK's own module), so a frame
    becomes exactly the input the host computes for the same image: crop, resize, mean/std, channel order,
    layout, quantization, all from the package manifest."""
    try:
        from edge_sdk_runtime import preprocess as pp
    except ImportError as e:
        raise AppError(f"the runtime bundle has no edge_sdk_runtime/preprocess.py ({e}): deploy again to "
                       "install a current runtime (--runtime names the bundle folder)") from e
    return pp


def preprocess(rgb: np.ndarray, pre: dict, layout: str) -> np.ndarray:
    """The manifest's preprocessing of one RGB frame -> (1, H, W, 3) or (1, 3, H, W) float32."""
    pp = _pp()
    try:
        return pp.Preprocess.from_json(pre).apply(rgb, layout=layout)
    except pp.PreprocessError as e:
        raise AppError(str(e)) from e


def quantize(x: np.ndarray, q: dict | None, dtype: str) -> np.ndarray:
    """Integer inputs: TFLite's QUANTIZE (round half away from zero); float inputs pass through."""
    pp = _pp()
    try:
        return pp.quantize(x, q, dtype)
    except pp.PreprocessError as e:
        raise AppError(str(e)) from e


def prepare_inputs(rgb: np.ndarray, variants: list[Variant]) -> dict[str, np.ndarray]:
    """Each variant's input for this frame; equal specs share one computation."""
    floats, inputs, out = {}, {}, {}
    for v in variants:
        s = v.spec
        fkey = json.dumps([s["preprocess"], s["layout"]], sort_keys=True)
        if fkey not in floats:
            floats[fkey] = preprocess(rgb, s["preprocess"], s["layout"])
        key = json.dumps([fkey, s["dtype"], s.get("quantization")], sort_keys=True)
        if key not in inputs:
            inputs[key] = quantize(floats[fkey], s.get("quantization"), s["dtype"])
        out[v.name] = inputs[key]
    return out


def rss_kb() -> int | None:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError):
        return None


def run(args, out) -> dict[str, deque]:
    sys.path[:0] = [str(args.runtime), str(args.runtime / "python")]
    from edge_sdk_runtime.loader import LoaderError, load

    try:
        return _classify(args, out, load)
    except LoaderError as e:
        raise AppError(str(e)) from e


def _classify(args, out, load) -> dict[str, deque]:
    found = installed(args.models, args.model)
    if not found:
        raise AppError(f"{args.models}: no installed variants of '{args.model}' ({args.model}-<variant>/current)")
    names = args.variants.split(",") if args.variants else list(found)
    missing = [n for n in names if n not in found]
    if missing:
        raise AppError(f"variant(s) {', '.join(missing)} of '{args.model}' are not installed; installed: "
                       f"{', '.join(found)}")
    variants = [Variant(found[n], load, args.threads, getattr(args, "output", None)) for n in names]
    sizes = [v.spec["preprocess"]["resize"] for v in variants]
    size = (max(s[1] for s in sizes), max(s[0] for s in sizes))  # (width, height) asked of the camera
    lat = {v.name: deque(maxlen=1000) for v in variants}  # bounded: the app may run for days
    with open_source(args.source, size=size) as src:
        for i, (frame, rgb) in enumerate(src):
            if args.max_frames is not None and i >= args.max_frames:
                break
            inputs = prepare_inputs(rgb, variants)
            rows, float_top1 = [], None
            for v in variants:
                t0 = time.perf_counter()
                scores = v.model.run(inputs[v.name])
                ms = (time.perf_counter() - t0) * 1e3
                top = v.top_k(scores, args.top_k)
                if v.name == args.baseline:
                    float_top1 = top[0]["class"]
                rows.append({"frame": i, "source": frame, "variant": v.name, "latency_ms": round(ms, 3),
                             "top_k": top})
                lat[v.name].append(ms)
            mem = rss_kb()
            for r in rows:
                r["agrees_with_float"] = None if float_top1 is None else r["top_k"][0]["class"] == float_top1
                r["rss_kb"] = mem
                out.write(json.dumps(r) + "\n")
            out.flush()
            if not args.quiet:
                print(f"frame {i} ({frame}): " + " | ".join(
                    f"{r['variant']} {r['latency_ms']:.1f} ms " + ", ".join(
                        f"{t['label'] or t['class']} {t['score']:.3g}" for t in r["top_k"][:3]) for r in rows),
                    flush=True)
    return lat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model name, as installed: <model>-<variant>")
    ap.add_argument("--variants", help="comma-separated (default: every installed variant)")
    ap.add_argument("--source", default="picamera2", help="picamera2, picamera2-standin, camera:N, /dev/videoN, "
                                                            "synthetic[:seed], a folder or a video file")
    ap.add_argument("--max-frames", type=int, help="stop after N frames (default: until the source ends)")
    ap.add_argument("--threads", type=int, default=1, help="TVM threads per variant (default 1)")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--output", help="a model with several outputs: the classifier output to rank (default: the first)")
    ap.add_argument("--baseline", default="float32", help="the variant agrees_with_float compares with "
                    "(edge_sdk.variants.BASELINE; edge-sdk demo passes it)")
    ap.add_argument("--out", help="JSON lines file (one line per frame and variant); '-' for stdout")
    ap.add_argument("--quiet", action="store_true", help="no per-frame text")
    ap.add_argument("--models", type=Path, default=HOME / "models")
    ap.add_argument("--runtime", type=Path, default=HOME / "runtime" / "current")
    args = ap.parse_args(argv)
    try:  # written line by line, flushed per frame: a run cut short keeps every finished frame
        out = sys.stdout if args.out == "-" else open(args.out or os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as e:
        print(f"classify: error: --out {args.out}: {e}", file=sys.stderr)
        return 2
    args.quiet = args.quiet or args.out == "-"
    try:
        lat = run(args, out)
    except (AppError, SourceError) as e:
        print(f"classify: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if out is not sys.stdout:
            out.close()
    for name, values in lat.items():
        if values:
            print(f"{name}: median {float(np.median(values)):.2f} ms over the last {len(values)} frames",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
