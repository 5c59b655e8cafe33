"""Time one peer engine on one model file and print ONE JSON line (what edge_sdk.bench.peers reads).

Runs as a script in whichever Python has the engine: the project venv (LiteRT, ONNX Runtime), the LCE venv
(tools/setup_peers.sh), or an aarch64 Python under qemu (edge_sdk.qemu.runner copies it and the engine's module).
It imports only the engine it times (its module beside this file: litert.py, onnxruntime.py, lce.py,
ncnn.py, each of which imports only the standard library at its top), and numpy; never edge_sdk.

    python time_engine.py --engine litert|onnxruntime|lce|ncnn --model FILE [--threads N] [--warmup W]
                          [--repeat R] [--min-time-ms T] [--seed S] [--input X.npy]
    python time_engine.py --engine litert --model FILE --count K   # K inferences, no timing (qemu counts)

ncnn runs a .param the way benchncnn does (ncnn.py). Input: the .npy given (cast/transposed to the model's
input when only the layout differs), else a seeded random tensor of the model's input shape and dtype. --count prints no timings, so that the
printed bytes, and with them the instruction count, do not depend on the clock.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ENGINES = sorted(p.stem for p in HERE.glob("*.py") if p.stem not in ("__init__", "time_engine"))  # litert.py ...


def engine_module(engine: str):
    """The engine's module (litert.py, ...) loaded from this file's folder by path, not through sys.path, so
    that `import onnxruntime` / `import ncnn` inside it is the installed package, never the sibling file."""
    spec = importlib.util.spec_from_file_location(f"edge_sdk_peer_{engine}", HERE / f"{engine}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_input(shape, dtype, seed, path):
    if path:
        x = np.load(path)
        if list(x.shape) != list(shape) and x.ndim == 4 and list(x.transpose(0, 3, 1, 2).shape) == list(shape):
            x = x.transpose(0, 3, 1, 2)  # NHWC input for an NCHW (ONNX) model
        return np.ascontiguousarray(x.astype(dtype))
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        return rng.uniform(-1, 1, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, choices=ENGINES)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time-ms", type=float, default=1000.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", help="a .npy input (default: seeded random)")
    ap.add_argument("--count", type=int, help="run exactly this many inferences, untimed")
    ap.add_argument("--ncnn-weights", help="ncnn only: load this .bin instead of DataReaderFromEmpty's zeros")
    args = ap.parse_args(argv)
    extra = {"weights": args.ncnn_weights} if args.engine == "ncnn" else {}
    run, shape, dtype, version = engine_module(args.engine).load(args.model, args.threads, **extra)
    x = make_input(shape, dtype, args.seed, args.input)
    if args.count is not None:
        for _ in range(args.count):
            y = run(x)
        getattr(run, "close", lambda: None)()
        print(json.dumps({"engine": args.engine, "inferences": args.count, "output_shape": list(y.shape)}))
        return 0
    t0 = time.perf_counter()
    y = run(x)
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(args.warmup):
        run(x)
    lat = []
    start = time.perf_counter()
    while len(lat) < args.repeat or ((time.perf_counter() - start) * 1e3 < args.min_time_ms and len(lat) < 100000):
        t = time.perf_counter()
        run(x)
        lat.append((time.perf_counter() - t) * 1e3)
    getattr(run, "close", lambda: None)()
    print(json.dumps({"engine": args.engine, "version": version, "threads": args.threads, "first_ms": first_ms,
                      "latencies_ms": lat, "input_shape": list(x.shape), "input_dtype": str(x.dtype),
                      "output_shape": list(y.shape), "output_dtype": str(y.dtype)}))
    return 0


if __name__ == "__main__":
    # run as a script, this folder is sys.path[0]: drop it, or `import ncnn` in ncnn.py would find ncnn.py
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.exit(main())
