"""The int8 graph the int8 backend compiles and quant.tflite_int8_ref runs: tensors (with QParams and constant
data) and TFLite-shaped ops in order. models/tflite_int8.py reads it from a full-integer .tflite,
models/onnx_qdq.py from an ONNX QDQ file, quant/ptq.py builds it from a float model.

Below both models/ (the readers) and quant/ (the references, PTQ): it imports neither.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ACT_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}  # TFLite fused_activation_function


@dataclass(frozen=True)
class QParams:
    """Quantization of one tensor: scale per tensor (shape ()) or per channel (shape (C,)), zero point."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return np.asarray(self.scale).size > 1

    @property
    def s(self) -> float:
        return float(np.asarray(self.scale, dtype=np.float32).reshape(-1)[0])

    @property
    def z(self) -> int:
        return int(np.asarray(self.zero_point).reshape(-1)[0])


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    q: QParams | None = None
    data: np.ndarray | None = None  # constants (weights, bias, shapes, paddings)


@dataclass
class Op:
    index: int
    kind: str
    inputs: list[int]
    outputs: list[int]
    opts: dict = field(default_factory=dict)


@dataclass
class Int8Graph:
    path: Path
    tensors: dict[int, Tensor]
    ops: list[Op]
    inputs: list[int]
    outputs: list[int]

    def input_spec(self) -> dict:
        """The model input as the manifest records it: shape, dtype and (for int8 input) scale/zero point."""
        t = self.tensors[self.inputs[0]]
        spec = {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "quantization": None}
        if t.dtype == "int8" and t.q is not None:
            spec["quantization"] = {"scale": t.q.s, "zero_point": t.q.z}
        return spec

    def output_spec(self) -> dict:
        t = self.tensors[self.outputs[0]]
        spec = {"shape": list(t.shape), "dtype": t.dtype, "quantization": None}
        if t.dtype == "int8" and t.q is not None:
            spec["quantization"] = {"scale": t.q.s, "zero_point": t.q.z}
        return spec
