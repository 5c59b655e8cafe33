"""Read a full-integer int8 .tflite into a small graph of integer ops.

    g = read_int8_tflite(path)        # Int8Graph: tensors (with QParams and constant data) + ops in order
    (quant/tflite_int8_ref.run_reference(g, x) runs it in numpy, bit-exact with TFLite BUILTIN_REF)

Why our own reader: TVM's TFLite frontend turns every quantized op into dequantize -> float op ->
quantize, which throws away the integer arithmetic we want to compile. Here each op keeps its int8
tensors, zero points, per-channel scales and fused activation, which is what edge_sdk.compiler.int8
lowers into integer kernels. Models with float input/output (QUANTIZE first, DEQUANTIZE last) are
accepted; anything else we cannot compute exactly is a ModelError naming the op, its index and the file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.errors import MissingDependency, ModelError
from edge_sdk.graph import ops as registry
from edge_sdk.graph.int8 import ACT_NAMES as ACT_NAMES, Int8Graph, Op, Tensor  # shared with onnx_qdq, quant/
from edge_sdk.models import tflite_int8_ops as registered
from edge_sdk.quant import int8 as q8

SUPPORTED = registry.kinds()  # every op the int8 path takes has its entry in graph/ops
_DTYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 7: "int16", 9: "int8"}


def _op_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


def _tensor(model, sub, i: int) -> Tensor:
    t = sub.Tensors(i)
    dtype = _DTYPES.get(t.Type(), f"type{t.Type()}")
    qp = t.Quantization()
    q = None
    if qp is not None and qp.ScaleLength() > 0:
        q = q8.QParams(qp.ScaleAsNumpy().astype(np.float32), qp.ZeroPointAsNumpy().astype(np.int64),
                       qp.QuantizedDimension())
    data = None
    buf = model.Buffers(t.Buffer())
    if buf is not None and buf.DataLength() > 0:
        np_dtype = {"float32": np.float32, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
                    "int64": np.int64, "int16": np.int16}.get(dtype)
        if np_dtype is not None:
            data = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=np_dtype).reshape(tuple(t.ShapeAsNumpy()))
    shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    return Tensor(i, t.Name().decode(errors="replace"), shape, dtype, q, data)


def read_int8_tflite(path: Path) -> Int8Graph:
    """Parse and validate; every unsupported op, dtype or quantization is a ModelError naming op, index, file."""
    path = Path(path)
    if path.suffix.lower() == ".onnx":  # an ONNX QDQ file maps onto the same graph (models/onnx_qdq.py)
        from edge_sdk.models.onnx_qdq import read_qdq_onnx

        return read_qdq_onnx(path)
    try:
        import tflite
    except ImportError as e:  # pragma: no cover - pinned dependency
        raise MissingDependency("reading int8 .tflite files needs 'tflite': pip install tflite==2.18.0") from e
    buf = path.read_bytes()
    try:
        if len(buf) < 8 or buf[4:8] != b"TFL3":
            raise ValueError("no TFL3 flatbuffer identifier")
        model = tflite.Model.GetRootAsModel(buf, 0)
        sub = model.Subgraphs(0)
        names = _op_names()
        tensors = {i: _tensor(model, sub, i) for i in range(sub.TensorsLength())}
        ops = []
        for k in range(sub.OperatorsLength()):
            op = sub.Operators(k)
            code = model.OperatorCodes(op.OpcodeIndex())
            kind = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), f"CUSTOM({code.CustomCode()})")
            opts = registered.options(op, kind) if registry.of(kind) else {}  # read as its graph/ops entry says
            ops.append(Op(k, kind, [int(v) for v in op.InputsAsNumpy()] if op.InputsLength() else [],
                          [int(v) for v in op.OutputsAsNumpy()], opts))
        inputs = [int(v) for v in sub.InputsAsNumpy()]
        outputs = [int(v) for v in sub.OutputsAsNumpy()]
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything on garbage; re-raised with the file
        raise ModelError(f"{path}: not a valid .tflite file ({type(e).__name__}: {e})") from e
    g = Int8Graph(path, tensors, _drop_shape_arithmetic(ops, tensors), inputs, outputs)
    _validate(g)
    return g


_SHAPE_OPS = ("SHAPE", "STRIDED_SLICE", "PACK")


def _drop_shape_arithmetic(ops: list, tensors: dict) -> list:
    """Drop SHAPE -> STRIDED_SLICE -> PACK chains that only compute a RESHAPE's target shape (Keras'
    Flatten/Reshape as TF 2.16's converter writes it): shapes are static, and RESHAPE takes its output
    tensor's shape. Anything else those ops feed keeps them, and validation names them."""
    users: dict[int, list] = {}
    for op in ops:
        for pos, i in enumerate(op.inputs):
            users.setdefault(i, []).append((op, pos))
    dropped: set[int] = set()
    changed = True
    while changed:
        changed = False
        for op in ops:
            if op.index in dropped or op.kind not in _SHAPE_OPS:
                continue
            if all(tensors[o].dtype == "int32" and all(
                    u.index in dropped or (u.kind == "RESHAPE" and pos == 1) for u, pos in users.get(o, []))
                    and users.get(o) for o in op.outputs):
                dropped.add(op.index)
                changed = True
    return [op for op in ops if op.index not in dropped]


def _validate(g: Int8Graph) -> None:
    where = lambda op: f"{g.path}: op {op.index} ({op.kind})"  # noqa: E731
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise ModelError(f"{g.path}: expected one input and one output, found {len(g.inputs)} and {len(g.outputs)}")
    for op in g.ops:
        if registry.of(op.kind) is None:
            raise ModelError(f"{where(op)}: not supported by the int8 compiler "
                             f"(supported: {', '.join(sorted(registry.kinds()))})")
        for i in op.inputs + op.outputs:
            if i < 0:  # an omitted optional input (FULLY_CONNECTED / CONV_2D without a bias)
                continue
            t = g.tensors[i]
            if t.dtype == "uint8":
                raise ModelError(f"{where(op)}: tensor '{t.name}' is uint8 (legacy asymmetric quantization); "
                                 "only int8 models from the current TFLite converter are supported")
            if t.dtype == "int16":
                raise ModelError(f"{where(op)}: tensor '{t.name}' is int16 (16x8 quantization); not supported")
        if not registry.of(op.kind).int8_io:  # QUANTIZE / DEQUANTIZE
            continue
        for i in registered.data_inputs(op) + op.outputs:
            t = g.tensors[i]
            if t.dtype != "int8" or t.q is None:
                raise ModelError(f"{where(op)}: tensor '{t.name}' is {t.dtype} without int8 quantization; "
                                 "the int8 variant needs a full-integer model")
        registered.validate(g, op, where(op))
