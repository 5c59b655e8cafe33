"""The Int8Graph under construction while an ONNX QDQ file is read (models/onnx_qdq.py), and the layout
moves between ONNX's NCHW order and the NHWC the int8 ops compute in (models/onnx_qdq_ops.py maps the ops).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph.int8 import Int8Graph, Op, Tensor
from edge_sdk.quant import int8 as q8

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


@dataclass
class Value:
    """An int8 tensor of the graph being built: its index and whether a 4-D one is NHWC (else ONNX order)."""

    index: int
    nhwc: bool = False


@dataclass
class Builder:
    """The Int8Graph under construction, and what each ONNX value name maps to."""

    path: Path
    shapes: dict  # ONNX value name -> static shape
    consts: dict  # initializer name -> numpy array
    tensors: dict = field(default_factory=dict)
    ops: list = field(default_factory=list)
    values: dict = field(default_factory=dict)  # ONNX name -> Value (int8 activation) or ("float", index)
    qparams: dict = field(default_factory=dict)  # ONNX name of a QuantizeLinear input -> its QParams
    weights: dict = field(default_factory=dict)  # ONNX name of a DQ'd initializer -> (int data, QParams)
    node: object = None  # the ONNX node being mapped (named in errors)
    _layout_cache: dict = field(default_factory=dict)

    def fail(self, msg: str) -> ModelError:
        n = self.node
        where = f"node '{n.name}' ({n.op_type})" if n is not None else "graph"
        return ModelError(f"{self.path}: unsupported model content: {where}: {msg}")

    def tensor(self, name: str, shape, dtype: str = "int8", q: q8.QParams | None = None, data=None) -> int:
        i = len(self.tensors)
        self.tensors[i] = Tensor(i, name, tuple(int(s) for s in shape), dtype, q, data)
        return i

    def const(self, name: str, data: np.ndarray, q: q8.QParams | None = None) -> int:
        data = np.asarray(data)
        return self.tensor(name, data.shape, str(data.dtype), q, data)

    def op(self, kind: str, inputs: list[int], outputs: list[int], **opts) -> None:
        self.ops.append(Op(len(self.ops), kind, inputs, outputs, opts))

    def q_of(self, v: Value) -> q8.QParams:
        return self.tensors[v.index].q

    def shape_of(self, v: Value) -> tuple[int, ...]:
        return self.tensors[v.index].shape

    def new_like(self, name: str, v: Value, shape=None, q: q8.QParams | None = None) -> int:
        t = self.tensors[v.index]
        return self.tensor(name, t.shape if shape is None else shape, "int8", t.q if q is None else q)

    def layout(self, v: Value, nhwc: bool) -> Value:
        """v as an NHWC (nhwc=True) or ONNX-order 4-D tensor: a TRANSPOSE (a RESHAPE for 1x1 maps)."""
        shape = self.shape_of(v)
        if len(shape) != 4 or v.nhwc == nhwc:
            return v
        key = (v.index, nhwc)
        if key not in self._layout_cache:
            perm = TO_NHWC if nhwc else TO_NCHW
            new = tuple(shape[p] for p in perm)
            out = self.new_like(self.tensors[v.index].name + ("/nhwc" if nhwc else "/nchw"), v, new)
            if shape[1:3] == (1, 1) or new[1:3] == (1, 1):  # a 1x1 map is the same bytes in both orders
                self.op("RESHAPE", [v.index], [out])
            else:
                self.op("TRANSPOSE", [v.index, self.const("perm", np.asarray(perm, np.int32))], [out])
            self._layout_cache[key] = Value(out, nhwc)
        return self._layout_cache[key]

    def requantize(self, v: Value, q: q8.QParams) -> Value:
        """v at the quantization q (an int8 -> int8 QUANTIZE), or v when it already has it."""
        have = self.q_of(v)
        if (have.s, have.z) == (float(np.float32(q.s)), q.z):
            return v
        out = self.new_like(self.tensors[v.index].name + "/rq", v, q=q)
        self.op("QUANTIZE", [v.index], [out])
        return Value(out, v.nhwc)

    def graph(self, inputs: list[int], outputs: list[int]) -> Int8Graph:
        return Int8Graph(self.path, self.tensors, self.ops, inputs, outputs)


def qparams(scale, zero_point, axis: int = 0) -> q8.QParams:
    s = np.asarray(scale, np.float32)
    z = np.asarray(zero_point).astype(np.int64)
    return q8.QParams(s.reshape(-1) if s.size > 1 else s.reshape(()), z.reshape(-1) if z.size > 1 else z.reshape(()),
                      axis)
