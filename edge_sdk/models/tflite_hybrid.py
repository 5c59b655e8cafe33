"""Dynamic-range ("hybrid") .tflite files: int8 weights, float activations.

TFLiteConverter with Optimize.DEFAULT and no representative data stores conv / fully-connected weights as
int8 with a per-channel scale (zero point 0) and keeps activations float32; LiteRT quantizes the
activations on the fly. The Relax frontend refuses such ops ("likely to have dynamic range quantization").
We compile them as the float model they stand for: every int8 constant with a scale that feeds an op
whose first input is float is dequantized here, (q - zero_point) * scale along its quantized dimension,
and handed to the frontend as a plain float32 constant. With --variant int8 the float graph is then
quantized with calibration frames, as for a float file.
"""
from __future__ import annotations

import numpy as np

_INT_TYPES = {9: np.int8, 3: np.uint8, 7: np.int16}  # TensorType INT8, UINT8, INT16


def _dequantize(tensor, buffer) -> np.ndarray | None:
    q = tensor.Quantization()
    dtype = _INT_TYPES.get(tensor.Type())
    if dtype is None or q is None or buffer is None or buffer.DataLength() == 0 or q.ScaleLength() == 0:
        return None
    shape = [int(s) for s in tensor.ShapeAsNumpy()] if tensor.ShapeLength() else []
    data = np.frombuffer(buffer.DataAsNumpy().tobytes(), dtype).reshape(shape).astype(np.float32)
    scale = q.ScaleAsNumpy().astype(np.float32)
    zp = q.ZeroPointAsNumpy().astype(np.float32) if q.ZeroPointLength() else np.zeros_like(scale)
    if scale.size > 1:
        axis = q.QuantizedDimension()
        bshape = [1] * data.ndim
        bshape[axis] = scale.size
        scale, zp = scale.reshape(bshape), zp.reshape(bshape)
    return ((data - zp) * scale).astype(np.float32)


def hybrid_weights(model, subgraph) -> dict[int, np.ndarray]:
    """{tensor index: float32 weights} for every quantized constant read by an op with a float32 first input."""
    found: dict[int, np.ndarray] = {}
    for i in range(subgraph.OperatorsLength()):
        op = subgraph.Operators(i)
        ins = [int(t) for t in op.InputsAsNumpy()] if op.InputsLength() else []
        if not ins or ins[0] < 0 or subgraph.Tensors(ins[0]).Type() != 0:  # first input not float32
            continue
        if subgraph.Tensors(ins[0]).Quantization() is not None and subgraph.Tensors(ins[0]).Quantization().ScaleLength():
            continue
        for idx in ins[1:]:
            if idx < 0 or idx in found:
                continue
            t = subgraph.Tensors(idx)
            w = _dequantize(t, model.Buffers(t.Buffer()))
            if w is not None:
                found[idx] = w
    return found


class FloatTensor:
    """A tflite Tensor seen as float32 and unquantized (everything else as the file has it)."""

    def __init__(self, tensor):
        self._t = tensor

    def Type(self):  # noqa: N802 - the flatbuffers API's name
        return 0

    def Quantization(self):  # noqa: N802
        return None

    def __getattr__(self, name):
        return getattr(self._t, name)


class FloatBuffer:
    """A buffer holding the dequantized float32 bytes."""

    def __init__(self, values: np.ndarray):
        self._b = np.frombuffer(np.ascontiguousarray(values, np.float32).tobytes(), np.uint8)

    def DataAsNumpy(self):  # noqa: N802
        return self._b

    def DataLength(self):  # noqa: N802
        return int(self._b.size)
