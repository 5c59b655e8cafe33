#!/usr/bin/env python3
"""Run a compiled model on a stack of prepared inputs in one process; the device half of `edge-sdk eval`.

    python3 eval_batch.py --runtime RUNTIME_DIR --lib model.so --params params.bin \
        --inputs inputs.npy --out scores.npz [--threads K] [--warmup W]

inputs.npy holds N model inputs stacked on a new first axis (each exactly the model's input tensor, as
edge_sdk/runtime/device/preprocess.py made it); scores.npz gets `scores` (N, ...) and `latency_ms` (N,), the
time of each model.run on this machine. The model is loaded once with the runtime bundle's Python loader
(RUNTIME_DIR/edge_sdk_runtime/loader.py): python3 + numpy, no compiler, no edge_sdk. Prints one JSON
line (count, load_ms, median_ms, tvm_ffi version) on success; exit 2 with a message on bad input,
3 when the model cannot be loaded or run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def run(args) -> dict:
    try:
        inputs = np.load(args.inputs, allow_pickle=False, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise SystemExit(f"eval_batch: error: {args.inputs}: {e}") from None
    sys.path[:0] = [str(args.runtime), str(args.runtime / "python")]
    from edge_sdk_runtime.loader import LoaderError, load

    scores, lat = [], []
    try:
        model = load(args.lib, args.params, threads=args.threads)
        for _ in range(args.warmup):
            if len(inputs):
                model.run(np.ascontiguousarray(inputs[0]))
        for i in range(len(inputs)):
            x = np.ascontiguousarray(inputs[i])
            t0 = time.perf_counter()
            out = model.run(x)
            lat.append((time.perf_counter() - t0) * 1e3)
            scores.append(out)
    except LoaderError as e:
        print(f"eval_batch: error: {e}", file=sys.stderr)
        sys.exit(3)
    tmp = f"{args.out}.tmp{os.getpid()}.npz"
    np.savez(tmp, scores=np.stack(scores) if scores else np.zeros((0,), np.float32),
             latency_ms=np.asarray(lat, np.float64))
    os.replace(tmp, args.out)
    import tvm_ffi

    return {"count": len(scores), "load_ms": model.load_ms, "median_ms": float(np.median(lat)) if lat else None,
            "threads": args.threads, "tvm_ffi_version": getattr(tvm_ffi, "__version__", None)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", type=Path, required=True, help="the runtime bundle folder")
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--params", type=Path, required=True)
    ap.add_argument("--inputs", type=Path, required=True, help=".npy of N stacked model inputs")
    ap.add_argument("--out", type=Path, required=True, help=".npz to write (scores, latency_ms)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args(argv)
    for p in (args.lib, args.params, args.inputs):
        if not p.is_file():
            print(f"eval_batch: error: {p}: no such file", file=sys.stderr)
            return 2
    if not (args.runtime / "edge_sdk_runtime" / "loader.py").is_file():
        print(f"eval_batch: error: {args.runtime}: not a runtime bundle (no edge_sdk_runtime/loader.py)",
              file=sys.stderr)
        return 2
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
