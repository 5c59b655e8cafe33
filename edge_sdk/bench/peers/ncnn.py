"""Tencent ncnn as a bench peer, run the way benchncnn runs a network definition (zero weights).

For a full-size zoo model (alpha 1.0, 224, 1000 classes) benchncnn's own file by name (--ncnn-models DIR,
else the copies in edge_sdk/bench/ncnn_models/), for any other size our zoo model written as an ncnn .param
(bench/ncnn_convert.py); the int8 row without a benchncnn file (MobileNetV2) is its float .param by
ncnn2int8's rule. The chosen file is copied to peers/<key>/ncnn_<variant>.param, which the row runs and names.

`load` runs a .param as Tencent/ncnn's benchmark/benchncnn.cpp does: its default options (light mode,
packing layout, Winograd and sgemm convolution, fp16 packed/storage/arithmetic and int8 storage/arithmetic
on: ncnn uses each only where the CPU has it), a blob pool allocator (size compare ratio 0) and a workspace
pool allocator (0.5), OpenMP dynamic off, and weights from DataReaderFromEmpty (zeros). Only the network
definition matters; a FILE.bin is loaded instead when `weights` is given (tests check real weights that way).

One module per engine (edge_sdk/bench/peers/; see litert.py). The top level imports only the standard library.
"""
from __future__ import annotations

from pathlib import Path

ENGINE = "ncnn"
_NETS = ("mobilenet_v1", "mobilenet_v2", "resnet18")
PEERS = (("float32", "float", "ncnn_float32.param", _NETS), ("int8", "int8", "ncnn_int8.param", _NETS))
MODULE, INSTALL = "ncnn", "pip install -e '.[test]' (ncnn)"
GUEST_FILE = "model.param"
# benchncnn's network definition for (zoo model, variant), by the name benchncnn runs it under.
NCNN_NAMES = {("mobilenet_v1", "float32"): "mobilenet", ("mobilenet_v1", "int8"): "mobilenet_int8",
              ("mobilenet_v2", "float32"): "mobilenet_v2", ("resnet18", "float32"): "resnet18",
              ("resnet18", "int8"): "resnet18_int8"}
SHIPPED = Path(__file__).resolve().parent.parent / "ncnn_models"
_FULL_SIZE = (1.0, 224, 1000)


def emulate_unavailable(threads: int) -> str | None:
    return None


def count(model, *, threads: int, cpu: str):
    from edge_sdk.qemu.runner import count_ncnn

    return count_ncnn(model, threads, cpu=cpu)


def text(spec: tuple[str, float, int, int] | None, variant: str, ncnn_models: Path | None) -> tuple[str, str] | None:
    """The .param text the row of (peer key spec, variant) runs and where it came from (None: no definition)."""
    from edge_sdk.bench.ncnn_convert import int8_param, param_text

    if spec is None or (spec[0], "float32") not in NCNN_NAMES:
        return None
    name = NCNN_NAMES.get((spec[0], variant))
    if tuple(spec[1:]) == _FULL_SIZE:
        for folder in (ncnn_models, SHIPPED):
            where = "edge_sdk/bench/ncnn_models" if folder == SHIPPED else str(folder)
            if folder is None:
                continue
            if name and (folder / f"{name}.param").is_file():
                return (folder / f"{name}.param").read_text(), f"benchncnn's {name}.param ({where})"
            base = folder / f"{NCNN_NAMES[(spec[0], 'float32')]}.param"
            if variant == "int8" and base.is_file():
                return int8_param(base.read_text()), f"benchncnn's {base.name} ({where}), int8 by ncnn2int8's rule"
    from edge_sdk.bench.ncnn_convert import from_relax
    from edge_sdk.models.zoo import build_zoo_model

    model = build_zoo_model(spec[0], alpha=spec[1], resolution=spec[2], classes=spec[3])
    out = param_text(from_relax(model.mod))
    return (int8_param(out) if variant == "int8" else out), "our zoo model written as an ncnn .param" + (
        ", int8 by ncnn2int8's rule" if variant == "int8" else "")


def prepare(spec, variant: str, path: Path, ncnn_models: Path | None) -> str | None:
    """Write `path`, the network definition the row runs; returns its origin (None: there is none)."""
    from edge_sdk.bench.ncnn_convert import write_atomic

    got = text(spec, variant, ncnn_models)
    if got is None:
        return None
    if not path.is_file() or path.read_text() != got[0]:
        write_atomic(path, got[0])
    return got[1]


def input_shape(path: str) -> list[int]:
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


def _options(ncnn, threads: int):
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
    return opt, (blob_pool, work_pool, opt)  # the net's Option points at these allocators: keep them


def load(path: str, threads: int, weights: str | None = None):
    import ncnn
    import numpy as np

    opt, keep = _options(ncnn, threads)
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

    def run(x, _keep=keep):
        ex = net.create_extractor()
        chw = np.ascontiguousarray(x[0], np.float32)  # ncnn.Mat(array) borrows the buffer: keep it alive
        ex.input(inp, ncnn.Mat(chw))
        ret, y = ex.extract(out)
        if ret != 0:
            raise SystemExit(f"{path}: ncnn extract({out}) failed ({ret})")
        return np.array(y)[None]

    run.close = net.clear  # layers first: ncnn aborts if its pool allocators go before what they lent out
    return run, input_shape(path), "float32", ncnn.__version__
