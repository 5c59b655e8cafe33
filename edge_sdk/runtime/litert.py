"""LiteRT (ai-edge-litert, tflite-runtime as a fallback): the TFLite reference on the host."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.errors import MissingDependency, ModelError


def interpreter_class():
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        try:
            from tflite_runtime.interpreter import Interpreter, OpResolverType
        except ImportError as e:
            raise MissingDependency("running .tflite files needs LiteRT: pip install ai-edge-litert==2.3.0") from e
    return Interpreter, OpResolverType


def make_interpreter(path: Path, *, threads: int = 1, reference_kernels: bool = False):
    Interpreter, OpResolverType = interpreter_class()
    kwargs = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference_kernels else {}
    try:
        it = Interpreter(model_path=str(path), num_threads=threads, **kwargs)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise ModelError(f"{path}: LiteRT cannot load it ({e})") from e
    return it


def run_tflite(path: Path, x: np.ndarray, *, threads: int = 1, reference_kernels: bool = False) -> np.ndarray:
    it = make_interpreter(path, threads=threads, reference_kernels=reference_kernels)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy()


def run_tflite_outputs(path: Path, x: np.ndarray, *, threads: int = 1, reference_kernels: bool = False) -> list[np.ndarray]:
    """Every output, in the file's output order (subgraph 0's outputs; LiteRT's details may list them otherwise)."""
    import tflite

    sub = tflite.Model.GetRootAsModel(path.read_bytes(), 0).Subgraphs(0)
    it = make_interpreter(path, threads=threads, reference_kernels=reference_kernels)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(int(sub.Outputs(i))).copy() for i in range(sub.OutputsLength())]
