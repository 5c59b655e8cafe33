"""ONNX QDQ files (QuantizeLinear / DequantizeLinear around float ops, as onnxruntime.quantization's
quantize_static writes with QuantFormat.QDQ) -> the Int8Graph the int8 backend compiles.

    g = read_qdq_onnx(path)        # graph/int8.Int8Graph: TFLite-shaped int8 ops, NHWC inside
    is_qdq_onnx(path)              # does the file hold DequantizeLinear nodes on its activations?

QDQ semantics: each float op between DequantizeLinear (its inputs' int8 values and scale/zero point) and
QuantizeLinear (its output's) is one int8 op: Conv -> CONV_2D / DEPTHWISE_CONV_2D (per-channel int8
weights, int32 bias at s_in * s_w), Gemm/MatMul -> FULLY_CONNECTED, Add/Mul -> ADD/MUL (broadcast),
GlobalAveragePool/ReduceMean -> MEAN, MaxPool/AveragePool, Concat, Split/Slice, Sigmoid -> LOGISTIC,
HardSigmoid -> ADD on the input re-labelled at alpha * s_in (the output range [0, <= 1] does the clip),
HardSwish, and the layout ops Reshape/Flatten/Transpose. Integer arithmetic is then TFLite's (fixed-point
requantization), which differs from ONNX Runtime's float requantization by rounding: the output is compared
with ONNX Runtime in LSB of the output scale (tests/test_onnx_qdq.py). Inside, 4-D tensors are NHWC;
Reshape/Flatten/Transpose run on ONNX's NCHW order, with a TRANSPOSE where the layout changes.
QLinearConv-style (operator-oriented) files are not read: the error names the node and its op type.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph.int8 import Int8Graph
from edge_sdk.models import tflite_int8_ops as registered
from edge_sdk.models.onnx_qdq_build import Builder, qparams
from edge_sdk.models.onnx_qdq_ops import MAP, finish_output, quantize_input
from edge_sdk.quant import int8 as q8


def is_qdq_onnx(proto) -> bool:
    """A QDQ model: a DequantizeLinear reads a value that is not an initializer (an activation)."""
    inits = {i.name for i in proto.graph.initializer}
    return any(n.op_type == "DequantizeLinear" and n.input[0] not in inits for n in proto.graph.node)


def _shapes(proto) -> dict:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto)
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    return out


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _q_node(b: Builder, node) -> q8.QParams:
    s, z = (b.consts.get(n) for n in (node.input[1], node.input[2] if len(node.input) > 2 else ""))
    if s is None or s.size != 1:
        raise b.fail("per-channel or non-constant activation quantization is not supported")
    z = np.zeros((), np.int8) if z is None else z
    if z.dtype != np.int8:
        raise b.fail(f"activations are {z.dtype}; only int8 (QuantType.QInt8) QDQ files are supported")
    return qparams(s, z)


def _read_q(b: Builder, node) -> None:
    """QuantizeLinear(x, s, z): of the float input a QUANTIZE; of an op's output its quantization (taken by
    the op, before); of another int8 value a requantization."""
    q = _q_node(b, node)
    src = b.values.get(node.input[0])
    if src is None:
        raise b.fail(f"input '{node.input[0]}' is not computed by an op this importer maps")
    if isinstance(src, tuple):  # the float graph input
        b.values[node.output[0]] = quantize_input(b, src[1], q)
        return
    b.values[node.output[0]] = b.requantize(src, q)


def _read_dq(b: Builder, node) -> None:
    x = node.input[0]
    if x in b.consts:  # weights or bias: kept with their quantization for the op that reads them
        s = b.consts[node.input[1]]
        z = b.consts[node.input[2]] if len(node.input) > 2 and node.input[2] else np.zeros_like(s, np.int8)
        b.weights[node.output[0]] = (b.consts[x], qparams(s, z, int(_attrs(node).get("axis", 1))))
        return
    if x not in b.values:
        raise b.fail(f"input '{x}' is not an int8 value of this graph")
    b.values[node.output[0]] = b.values[x]  # the int8 value is read as it is by the next op


def read_qdq_onnx(path: Path, proto=None) -> Int8Graph:
    """The Int8Graph of a QDQ ONNX file; a ModelError names the node, its op type and the file."""
    import onnx
    from onnx import numpy_helper

    from edge_sdk.models.onnx_import import fold_static_shapes, opset_of

    path = Path(path)
    proto = onnx.load(str(path)) if proto is None else proto
    proto = fold_static_shapes(proto, opset_of(proto), keep=("QuantizeLinear", "DequantizeLinear"))
    b = Builder(path, _shapes(proto), {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer})
    inputs = [i for i in proto.graph.input if i.name not in b.consts]
    if len(inputs) != 1 or len(proto.graph.output) != 1:
        raise ModelError(f"{path}: expected one image input and one output")
    name = inputs[0].name
    x = b.tensor(name, b.shapes[name], "float32")
    b.values[name] = ("float", x)
    for node in proto.graph.node:  # an op we do not map is named first
        b.node = node
        if node.domain not in ("", "ai.onnx") or node.op_type not in (*MAP, "QuantizeLinear", "DequantizeLinear"):
            raise b.fail("not supported by the ONNX QDQ (int8) importer (supported: "
                         f"{', '.join(sorted(MAP))})")
    for node in proto.graph.node:  # each op's output quantization, from the QuantizeLinear after it
        b.node = node
        if node.op_type == "QuantizeLinear":
            b.qparams.setdefault(node.input[0], _q_node(b, node))
    for node in proto.graph.node:
        b.node = node
        if node.op_type == "QuantizeLinear":
            _read_q(b, node)
        elif node.op_type == "DequantizeLinear":
            _read_dq(b, node)
        else:
            MAP[node.op_type](b, node, _attrs(node))
    b.node = None
    out = finish_output(b, proto.graph.output[0].name)
    g = b.graph([x], [out])
    _check(g)
    return g


def _check(g: Int8Graph) -> None:
    """What the int8 kernels assume beyond what the mapping guarantees (as tflite_int8 checks its files)."""
    for op in g.ops:
        where = f"{g.path}: op {op.index} ({op.kind}, of '{g.tensors[op.outputs[0]].name}')"
        registered.validate(g, op, where)
