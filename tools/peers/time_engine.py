"""Time one peer engine on one model file and print ONE JSON line (what edge_sdk.bench.peers reads).

Runs in whichever Python has the engine: the project venv (LiteRT, ONNX Runtime), the LCE venv
(tools/setup_peers.sh), or an aarch64 Python under qemu (edge_sdk.bench.emulate). It imports only
the engine it times, and numpy.

    python time_engine.py --engine litert|onnxruntime|lce|ncnn --model FILE [--threads N] [--warmup W]
                          [--repeat R] [--min-time-ms T] [--seed S] [--input X.npy]
    python time_engine.py --engine litert --model FILE --count K   # K inferences, no timing (qemu counts)

ncnn runs a .param the way Tencent/ncnn's benchmark/benchncnn.cpp does: its default options (light
mode, packing layout, Winograd and sgemm convolution, fp16 packed/storage/arithmetic and int8
storage/arithmetic on: ncnn uses each only where the CPU has it), a blob pool allocator (size compare
ratio 0) and a workspace pool allocator (0.5), OpenMP dynamic off, and weights from
DataReaderFromEmpty (zeros). Only the network definition matters; a FILE.bin beside it is loaded
instead when --ncnn-weights is given (tests check real weights against a reference that way).

Input: the .npy given (cast/transposed to the model's input when only the layout differs), else a
seeded random tensor of the model's input shape and dtype. --count prints no timings, so that the
printed bytes, and with them the instruction count, do not depend on the clock.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _litert(path: str, threads: int):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path, num_threads=threads)
    it.allocate_tensors()
    d, o = it.get_input_details()[0], it.get_output_details()[0]

    def run(x):
        it.set_tensor(d["index"], x)
        it.invoke()
        return it.get_tensor(o["index"])

    import ai_edge_litert

    return run, list(d["shape"]), np.dtype(d["dtype"]).name, getattr(ai_edge_litert, "__version__", "?")


def _onnxruntime(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    dtype = {"tensor(float)": "float32", "tensor(uint8)": "uint8", "tensor(int8)": "int8"}[inp.type]

    def run(x):
        return sess.run(None, {inp.name: x})[0]

    return run, [int(d) if isinstance(d, int) else 1 for d in inp.shape], dtype, ort.__version__


def _lce(path: str, threads: int):
    import larq_compute_engine as lce
    from larq_compute_engine.tflite.python.interpreter import Interpreter

    with open(path, "rb") as f:
        it = Interpreter(f.read(), num_threads=threads)
    shape, dtype = list(it.input_shapes[0]), np.dtype(it.input_types[0]).name

    def run(x):
        return it.predict(x)

    return run, shape, dtype, getattr(lce, "__version__", "?")


def ncnn_input_shape(path: str) -> list[int]:
    """[1, c, h, w] from the param's Input layer (0=w 1=h 2=c), as benchncnn's ncnn::Mat(w, h, c)."""
    with open(path) as f:
        for line in f:
            tok = line.split()
            if tok and tok[0] == "Input":
                kv = dict(t.split("=", 1) for t in tok[4:] if "=" in t and not t.startswith("-"))
                if not {"0", "1", "2"} <= set(kv):
                    break
                return [1, int(kv["2"]), int(kv["1"]), int(kv["0"])]
    raise SystemExit(f"{path}: no Input layer with 0=w 1=h 2=c (ncnn .param)")


def _ncnn(path: str, threads: int, weights: str | None = None):
    import ncnn

    blob_pool, work_pool = ncnn.UnlockedPoolAllocator(), ncnn.PoolAllocator()
    blob_pool.set_size_compare_ratio(0.0)
    work_pool.set_size_compare_ratio(0.5)
    opt = ncnn.Option()
    opt.lightmode, opt.num_threads = True, threads
    opt.blob_allocator, opt.workspace_allocator = blob_pool, work_pool
    for name in ("use_winograd_convolution", "use_sgemm_convolution", "use_int8_inference", "use_fp16_packed",
                 "use_fp16_storage", "use_fp16_arithmetic", "use_int8_storage", "use_int8_arithmetic",
                 "use_packing_layout"):
        setattr(opt, name, True)
    opt.use_vulkan_compute = False
    ncnn.set_cpu_powersave(0)
    ncnn.set_omp_dynamic(0)
    ncnn.set_omp_num_threads(threads)
    net = ncnn.Net()
    net.opt = opt
    if net.load_param(path) != 0:
        raise SystemExit(f"{path}: ncnn could not load this .param")
    if (net.load_model(weights) if weights else net.load_model(ncnn.DataReaderFromEmpty())) != 0:
        raise SystemExit(f"{weights or path}: ncnn could not load the weights")
    inp, out = net.input_names()[0], net.output_names()[0]
    keep = (blob_pool, work_pool, opt)  # the net's Option points at these allocators

    def run(x, _keep=keep):
        ex = net.create_extractor()
        chw = np.ascontiguousarray(x[0], np.float32)  # ncnn.Mat(array) borrows the buffer: keep it alive
        ex.input(inp, ncnn.Mat(chw))
        ret, y = ex.extract(out)
        if ret != 0:
            raise SystemExit(f"{path}: ncnn extract({out}) failed ({ret})")
        return np.array(y)[None]

    run.close = net.clear  # layers first: ncnn aborts if its pool allocators go before what they lent out
    return run, ncnn_input_shape(path), "float32", ncnn.__version__


ENGINES = {"litert": _litert, "onnxruntime": _onnxruntime, "lce": _lce, "ncnn": _ncnn}


def _input(shape, dtype, seed, path):
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
    ap.add_argument("--engine", required=True, choices=sorted(ENGINES))
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
    run, shape, dtype, version = ENGINES[args.engine](args.model, args.threads, **extra)
    x = _input(shape, dtype, args.seed, args.input)
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
    sys.exit(main())
