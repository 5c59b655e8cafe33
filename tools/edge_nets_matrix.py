"""The models x variants table of tests/data/edge_nets (issue 14): does each file compile,
does it match its peer, how fast vs LiteRT/ORT.

    .venv/bin/python tools/edge_nets_matrix.py [--only SUBSTRING ...] [--json OUT.json]

For every file in tests/data/edge_nets (float .tflite -> float32, full-int8 .tflite -> int8, ONNX opset 17 ->
float32; --opsets 13,17 for both) it runs the library's bench (edge_sdk.bench.run_bench: compile for the
host, golden check, timing side by side with the peers in one run, 1 thread) and prints one row each:
compiles / matches (int8: bit-exact with LiteRT BUILTIN_REF; float: within 1e-4 of LiteRT / ONNX Runtime)
/ our median ms / the peer's median ms. Figures are host wall-clock medians (process on this machine,
shared with other work), never device time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "edge_nets"


def _files(opsets: list[str], only: list[str]) -> list[tuple[Path, str]]:
    rows = [(p, "int8" if p.stem.endswith("_int8") else "float32") for p in sorted(DATA.glob("*.tflite"))]
    rows += [(p, "float32") for p in sorted((DATA / "onnx").glob("*.onnx")) if p.stem.rsplit("opset", 1)[1] in opsets]
    return [(p, v) for p, v in rows if not only or any(s in p.name for s in only)]


def _time(fn, min_time_ms: float) -> float:
    """Median ms of fn() after 3 warm-up calls, over >= 5 calls and >= min_time_ms."""
    import statistics

    for _ in range(3):
        fn()
    times, t_end = [], time.perf_counter() + min_time_ms / 1000
    while len(times) < 5 or time.perf_counter() < t_end:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def peer_ms(path: Path, x, *, min_time_ms: float) -> tuple[str, float]:
    """LiteRT (XNNPACK, its default) or ONNX Runtime, 1 thread, on the same file and input, in this process."""
    if path.suffix == ".onnx":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        return "onnxruntime", _time(lambda: sess.run(None, {name: x}), min_time_ms)
    from edge_sdk.runtime.litert import interpreter_class

    interp = interpreter_class()[0](model_path=str(path), num_threads=1)
    interp.allocate_tensors()
    idx = interp.get_input_details()[0]["index"]

    def run():
        interp.set_tensor(idx, x)
        interp.invoke()

    return "litert", _time(run, min_time_ms)


def row(path: Path, variant: str, *, min_time_ms: float) -> dict:
    from edge_sdk.bench.bench import run_bench
    from edge_sdk.models.importers import load_model_file

    t0 = time.perf_counter()
    try:
        model = load_model_file(path, family="int8" if variant == "int8" else "float")
        res = run_bench(model, variants=[variant], peers=True, threads=[1], rounds=2, min_time_ms=min_time_ms)
    except Exception as e:  # noqa: BLE001 - a row of the table, whatever failed
        return {"file": path.name, "variant": variant, "compiles": f"no: {type(e).__name__}: {str(e)[:160]}"}
    ours = next((r for r in res.rows if r.ours), None)
    import numpy as np

    x = np.load(path.with_suffix(".npz"))["x"] if path.suffix == ".onnx" else model.example_input(seed=0)
    if variant == "int8":
        from edge_sdk.compiler.int8.backend import example_input
        from edge_sdk.models.tflite_int8 import read_int8_tflite

        x = example_input(read_int8_tflite(path), seed=0)
    engine, peer = peer_ms(path, x, min_time_ms=min_time_ms)
    out = {"file": path.name, "variant": variant, "compiles": "yes" if ours and ours.status != "failed" else "no",
           "status": ours.status if ours else "", "detail": ours.detail if ours else "",
           "ours_ms": ours.metric() if ours else None, "seconds": round(time.perf_counter() - t0)}
    out[f"{engine}_ms"] = round(peer, 4)
    if ours and ours.run_json and ours.golden:
        out["golden"] = ours.golden
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], help="file name substring (repeatable)")
    ap.add_argument("--opsets", default="17", help="ONNX opsets to include, comma-separated (default 17)")
    ap.add_argument("--min-time-ms", type=float, default=300.0)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    rows = []
    for path, variant in _files(args.opsets.split(","), args.only):
        r = row(path, variant, min_time_ms=args.min_time_ms)
        rows.append(r)
        peer = {k: v for k, v in r.items() if k.endswith("_ms") and k != "ours_ms"}
        print(json.dumps({k: r.get(k) for k in ("file", "variant", "compiles", "status", "ours_ms")} | peer),
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
