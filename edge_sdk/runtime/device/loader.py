"""Load and run an edge-sdk model in Python with only numpy, tvm_ffi and libtvm_runtime.so.

Why this exists: on a Pi, importing `tvm` would need the compiler (260 MB) and is not installed.
The runtime bundle ships this file as `edge_sdk_runtime/loader.py` next to `lib/libtvm_runtime.so`;
the device needs `numpy` and `apache-tvm-ffi` (the same version the bundle was built from).

    from edge_sdk_runtime.loader import load
    model = load("model.so", "params.bin")          # threads=K sets TVM_NUM_THREADS
    scores = model.run(frame)                       # numpy in, numpy out
    named = split_outputs(scores, manifest["outputs"])  # several outputs: {name: array of its shape}

This file imports nothing from edge_sdk and no compiler: it must run on its own.
"""
from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path

import numpy as np

_ALIGN = 64  # TVM kernels assume 64-byte aligned buffers (kAllocAlignment)
_LOADED_RUNTIME: dict[str, ctypes.CDLL] = {}


class LoaderError(RuntimeError):
    """A model or the runtime could not be loaded or run; the message names the file."""


def default_runtime_lib() -> Path:
    """lib/libtvm_runtime.so of the bundle this file sits in (bundle/edge_sdk_runtime/loader.py)."""
    return Path(__file__).resolve().parent.parent / "lib" / "libtvm_runtime.so"


def _import_tvm_ffi(runtime_lib: Path):
    """Import tvm_ffi first: its libtvm_ffi.so then satisfies libtvm_runtime's NEEDED by soname,
    so one FFI registry exists in the process (two copies would each hold half the functions)."""
    manifest = runtime_lib.parent.parent / "bundle.json"
    try:
        import tvm_ffi
    except ImportError as e:
        import sys

        pythons = json.loads(manifest.read_text()).get("device_pythons") if manifest.is_file() else None
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if pythons and here not in pythons:  # tvm_ffi's core is built per Python version
            raise LoaderError(f"{manifest}: this runtime carries tvm_ffi for Python {', '.join(pythons)}, but the "
                              f"device runs Python {here} (Raspberry Pi OS Bookworm has 3.11, Trixie 3.13)") from e
        raise LoaderError(f"the device runtime needs the 'apache-tvm-ffi' Python package: {e}") from e
    if manifest.is_file():
        want = json.loads(manifest.read_text()).get("tvm_ffi_version")
        have = getattr(tvm_ffi, "__version__", "unknown")
        if want and have != want:
            raise LoaderError(f"{manifest}: bundle built for apache-tvm-ffi=={want}, but {have} is installed "
                              f"(pip install apache-tvm-ffi=={want})")
    return tvm_ffi


def _load_runtime(tvm_ffi, runtime_lib: Path) -> None:
    """Load libtvm_runtime.so globally, unless a TVM runtime is already in the process
    (e.g. `tvm` was imported on a host): a second copy would register every function twice."""
    if tvm_ffi.get_global_func("runtime.LoadParamsFromFile", allow_missing=True) is not None:
        return
    key = str(runtime_lib.resolve())
    if key in _LOADED_RUNTIME:
        return
    if not runtime_lib.is_file():
        raise LoaderError(f"{runtime_lib}: libtvm_runtime.so not found (pass runtime_lib= or use the bundle's loader)")
    try:
        _LOADED_RUNTIME[key] = ctypes.CDLL(key, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise LoaderError(f"{runtime_lib}: cannot load: {e}") from e


def _aligned_copy(x: np.ndarray) -> np.ndarray:
    raw = np.empty(x.nbytes + _ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    out = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


class Model:
    """A loaded Relax VM executable with its params; `run` calls main(x, p0000, p0001, ...)."""

    def __init__(self, *, lib: Path, params: Path, vm, main, param_values: list, load_ms: float):
        self.lib, self.params, self.load_ms = lib, params, load_ms
        self._vm, self._main, self._params = vm, main, param_values

    def __repr__(self) -> str:
        return f"Model({self.lib.name}, {len(self._params)} params, loaded in {self.load_ms:.1f} ms)"

    def run(self, x: np.ndarray) -> np.ndarray:
        """Scores for one input; the result is a fresh array (the VM reuses its buffers)."""
        import tvm_ffi

        x = np.asarray(x)
        if x.dtype not in (np.float32, np.int8, np.uint8):
            raise LoaderError(f"{self.lib}: input dtype {x.dtype} is not float32, int8 or uint8")
        arg = tvm_ffi.from_dlpack(_aligned_copy(x))
        try:
            out = self._main(arg, *self._params)
        except Exception as e:  # tvm_ffi raises its own error types (TVMError, ValueError, ...)
            raise LoaderError(f"{self.lib}: main failed: {e}") from e
        if isinstance(out, (list, tuple)) or type(out).__name__ == "Array":
            if len(out) != 1:
                raise LoaderError(f"{self.lib}: main returned {len(out)} outputs; expected one tensor")
            out = out[0]
        return np.array(np.from_dlpack(out), copy=True)


def split_outputs(flat: np.ndarray, outputs: list[dict] | None) -> dict[str, np.ndarray]:
    """A package's output -> {name: array of the file's shape and dtype}, by the manifest's "outputs" (a model
    with several outputs returns them as one flat float32 vector: offset and size of each); {"output": flat}
    when the manifest lists none (a single-output package)."""
    if not outputs:
        return {"output": flat}
    flat = np.asarray(flat).reshape(-1)
    total = sum(int(o["size"]) for o in outputs)
    if flat.size != total:
        raise LoaderError(f"the output has {flat.size} values, the manifest's outputs {total}")
    res = {}
    for o in outputs:
        part = flat[int(o["offset"]):int(o["offset"]) + int(o["size"])].reshape([int(s) for s in o["shape"]])
        res[o["name"]] = part.astype(o["dtype"]) if o["dtype"] != "float32" else part
    return res


def load(lib: str | os.PathLike, params: str | os.PathLike, *, runtime_lib: str | os.PathLike | None = None,
         threads: int | None = None) -> Model:
    """Load model.so + params.bin. `threads` sets TVM_NUM_THREADS, which only takes effect before
    the runtime's thread pool starts (the first model run in this process)."""
    lib, params = Path(lib), Path(params)
    runtime_lib = Path(runtime_lib) if runtime_lib else default_runtime_lib()
    for p in (lib, params):
        if not p.is_file():
            raise LoaderError(f"{p}: no such file")
    if threads is not None:
        os.environ["TVM_NUM_THREADS"] = str(int(threads))
    t0 = time.perf_counter()
    tvm_ffi = _import_tvm_ffi(runtime_lib)
    _load_runtime(tvm_ffi, runtime_lib)
    try:
        mod = tvm_ffi.load_module(str(lib))
        vm = mod["vm_load_executable"]()
        vm["vm_initialization"](1, 0, 2)  # CPU device 0, pooled allocator
        loaded = tvm_ffi.get_global_func("runtime.LoadParamsFromFile")(str(params))
        keys = sorted(str(k) for k in loaded.keys())  # noqa: SIM118 - a tvm_ffi Map, not a dict
        main, values = _ready(vm, [loaded[k] for k in keys])
    except Exception as e:  # tvm_ffi raises its own error types (TVMError, AttributeError, ...)
        raise LoaderError(f"{lib}: cannot load the model with {params}: {e}") from e
    load_ms = (time.perf_counter() - t0) * 1e3
    return Model(lib=lib, params=params, vm=vm, main=main, param_values=values, load_ms=load_ms)


def _ready(vm, stored: list) -> tuple:
    """(function to call per inference, its parameters): infer(x, *infer_transform_params(stored))
    when the package stores weights untransformed (Winograd's U is made here, once), else main."""
    try:
        transform, infer = vm["infer_transform_params"], vm["infer"]
    except AttributeError:  # tvm_ffi: a VM module without that function
        return vm["main"], stored
    return infer, list(transform(stored))
