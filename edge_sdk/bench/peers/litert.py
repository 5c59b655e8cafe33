"""LiteRT (ai-edge-litert: XNNPACK on float32, its int8 kernels on full-integer files) as a bench peer.

One module per engine (edge_sdk/bench/peers/): the rows it gives, how to tell it is installed, how it is
counted under qemu, and `load`, which time_engine.py calls in the engine's own Python. The top level
imports only the standard library: this file is copied beside time_engine.py into the aarch64 guest.
"""
from __future__ import annotations

ENGINE = "litert"
# (variant, family, file under peers/<key>/, zoo models it applies to or None: all)
PEERS = (("float32", "float", "litert_float32.tflite", None), ("int8", "int8", "litert_int8.tflite", None))
MODULE, INSTALL = "ai_edge_litert", "pip install ai-edge-litert==2.3.0"
GUEST_FILE = "model.tflite"  # its name in the qemu work folder


def emulate_unavailable(threads: int) -> str | None:
    """Why it is not counted under qemu with `threads` threads (None: it is)."""
    if threads > 1:
        return "counted with 1 thread only (XNNPACK's pthreadpool spin-waits are not told apart from work)"
    return None


def count(model, *, threads: int, cpu: str):
    from edge_sdk.qemu.runner import count_litert

    return count_litert(model, cpu=cpu)


def load(path: str, threads: int):
    """(run(x) -> y, input shape, input dtype, version) for time_engine.py."""
    import numpy as np
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
