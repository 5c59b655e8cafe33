"""Float32 latency: our TVM build vs LiteRT + XNNPACK on the same .tflite, side by side, one run.

    .venv/bin/python tools/bench_float.py [MODEL.tflite] [--threads 1] [--min-time 2] [--warmup 5]

Defaults to $EDGE_SDK_CACHE/models/mobilenet_v1_1.0_224_float.tflite. Both engines get the same
input and thread count; they are timed in alternating rounds so machine load hits both alike.
Prints warm-up/repeat counts, median and spread, the max difference of the outputs, the CPU model,
thread count and versions. Host only (our build runs in-process through the Relax VM).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _time(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _args(argv):
    cache = os.environ.get("EDGE_SDK_CACHE", os.path.expanduser("~/.cache/edge-sdk"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=os.path.join(cache, "models", "mobilenet_v1_1.0_224_float.tflite"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds of timed runs per engine")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (each engine per round)")
    return ap.parse_args(argv)


def _tvm_runner(path: str, target):
    """(run(x) -> output tensor, compile seconds): our build of the .tflite, loaded back as a Relax VM."""
    import tflite
    import tvm
    from tvm import relax
    from tvm.relax.frontend.tflite import from_tflite

    from edge_sdk.compiler.lower import compile_relax

    with open(path, "rb") as f:
        mod = from_tflite(tflite.Model.GetRootAsModel(f.read(), 0))
    t0 = time.perf_counter()
    ex, params = compile_relax(mod, target, progress=lambda s: print(f"  [tvm] {s}"))
    compile_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "model.so")
        ex.export_library(so)
        vm = relax.VirtualMachine(tvm.runtime.load_module(so), tvm.cpu())
    ps = [tvm.runtime.tensor(params[k]) for k in sorted(params)]
    main_fn = vm["main"]
    return (lambda xt: main_fn(xt, *ps)), compile_s


def _interleaved(fns: dict, args) -> dict[str, list[float]]:
    """Warm-up, then `rounds` alternating rounds of each engine, sized to fill --min-time."""
    for fn in fns.values():
        _time(fn, args.warmup)
    per_round = {name: max(3, int(args.min_time / args.rounds / max(statistics.median(_time(fn, 3)), 1e-6)))
                 for name, fn in fns.items()}
    times = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            times[name] += _time(fn, per_round[name])
    return times


def _report(args, target, times, *, compile_s: float, diff: float, status: str) -> None:
    import tvm
    from ai_edge_litert import __version__ as litert_version

    print(f"model     {args.model}")
    print(f"machine   {_cpu_model()} ({os.cpu_count()} logical CPUs), {platform.machine()}, threads={args.threads}")
    print(f"versions  tvm {tvm.__version__}, ai-edge-litert {litert_version}, numpy {np.__version__}, "
          f"python {platform.python_version()}")
    print(f"tvm build {compile_s:.1f} s for target host ({target.llvm.get('mcpu')})")
    print(f"outputs   max |tvm - litert| = {diff:.2e}  [{status}]")
    print(f"{'engine':<22}{'runs':>6}{'median ms':>12}{'min ms':>10}{'p90 ms':>10}")
    med = {}
    for name, label in (("tvm", "tvm (edge-sdk)"), ("litert", "litert + xnnpack")):
        t = sorted(times[name])
        med[name] = statistics.median(t) * 1e3
        print(f"{label:<22}{len(t):>6}{med[name]:>12.2f}{t[0] * 1e3:>10.2f}{t[int(0.9 * (len(t) - 1))] * 1e3:>10.2f}")
    print(f"ratio     tvm / litert = {med['tvm'] / med['litert']:.2f}x (median)")


def main(argv=None) -> int:
    args = _args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # read when the TVM thread pool starts

    import tvm
    from ai_edge_litert.interpreter import Interpreter

    from edge_sdk.targets import get_target

    if not os.path.exists(args.model):
        print(f"error: {args.model}: no such file (tools/make_test_models.py writes it)", file=sys.stderr)
        return 2
    target = get_target("host")
    tvm_run, compile_s = _tvm_runner(args.model, target)
    interp = Interpreter(model_path=args.model, num_threads=args.threads)
    interp.allocate_tensors()
    inp, outd = interp.get_input_details()[0], interp.get_output_details()[0]
    x = np.random.default_rng(0).uniform(-1, 1, inp["shape"]).astype("float32")
    xt = tvm.runtime.tensor(x)

    def run_tvm():
        return tvm_run(xt)

    def run_litert():
        interp.set_tensor(inp["index"], x)
        interp.invoke()

    out_tvm = run_tvm().numpy()
    run_litert()
    out_ref = interp.get_tensor(outd["index"])
    diff = float(np.abs(out_tvm - out_ref).max())
    status = "ok" if diff <= 1e-4 * max(1.0, float(np.abs(out_ref).max())) else "WRONG OUTPUT"
    times = _interleaved({"tvm": run_tvm, "litert": run_litert}, args)
    _report(args, target, times, compile_s=compile_s, diff=diff, status=status)
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
