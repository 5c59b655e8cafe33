"""Larq Compute Engine (binary convolutions) as a bench peer, in its own venv ($EDGE_SDK_CACHE/venv-lce,
whose TensorFlow needs numpy<2 and protobuf<3.21; tools/setup_peers.sh makes it).

One module per engine (edge_sdk/bench/peers/; see litert.py). The top level imports only the standard library."""
from __future__ import annotations

from pathlib import Path

ENGINE = "lce"
PEERS = (("w1a1", "binary", "lce_w1a1.tflite", ("resnet18",)),)


def python() -> Path:
    """The interpreter that has the engine."""
    from edge_sdk.runtime.bundle import cache_root

    return cache_root() / "venv-lce" / "bin" / "python"


def missing(setup_hint: str) -> str | None:
    return None if python().exists() else f"no LCE environment ({setup_hint})"


def emulate_unavailable(threads: int) -> str | None:
    return "larq-compute-engine has no aarch64 wheel"


def load(path: str, threads: int):
    import larq_compute_engine as lce
    import numpy as np
    from larq_compute_engine.tflite.python.interpreter import Interpreter

    with open(path, "rb") as f:
        it = Interpreter(f.read(), num_threads=threads)
    shape, dtype = list(it.input_shapes[0]), np.dtype(it.input_types[0]).name

    def run(x):
        return it.predict(x)

    return run, shape, dtype, getattr(lce, "__version__", "?")
