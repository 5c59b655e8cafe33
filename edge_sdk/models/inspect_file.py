"""`edge-sdk inspect FILE` on a model file, before any compile: its ops (supported or not, and why), its
inputs and outputs, and how it stores its weights (the first thing to run on a downloaded file).

    report = inspect_model_file(Path("face_detector.tflite"))   # a dict (--json prints it)

Nothing is compiled or converted: the .tflite flatbuffer / ONNX graph is read, each op is looked up in
the importer's tables (the Relax frontends' converters, our import-time folding, dynamic-range weights,
custom ops by name), and a full import is attempted so the report ends with what compile would say.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from edge_sdk.errors import EdgeError, ModelError

_TFL_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}


def _custom_why(code: str) -> str:
    from edge_sdk.graph.ops import lce
    from edge_sdk.graph.ops.float_custom import CUSTOM

    if code in lce.kinds(custom=True):  # graph/ops/lce.py: the bitserial path reads the whole file
        return "supported with --variant w1a1 (a Larq Compute Engine op: the bitserial path)"
    if code == "TFLite_Detection_PostProcess":
        return "supported (detection post-processing)"
    if code in CUSTOM:
        return f"supported; a custom op, imported as {' + '.join(CUSTOM[code].relax_ops)}"
    return "a custom op (the file's own kernel): no implementation"


def _tflite_ops(tfl, sub) -> list[dict]:
    import tflite
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import ExprTable, OperatorConverter

    from edge_sdk.models.tflite_fold import FOLD
    from edge_sdk.models.tflite_hybrid import hybrid_weights

    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    conv_map = OperatorConverter(tfl, sub, ExprTable(), relax.BlockBuilder()).convert_map
    hybrid = hybrid_weights(tfl, sub)
    counts: Counter = Counter()
    why: dict[str, str] = {}
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = tfl.OperatorCodes(op.OpcodeIndex())
        kind = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
        if kind == "CUSTOM":
            kind = f"CUSTOM:{(code.CustomCode() or b'?').decode(errors='replace')}"
            why[kind] = _custom_why(kind.split(":", 1)[1])
        elif kind not in conv_map:
            why[kind] = "not in the TFLite importer"
        elif any(int(t) in hybrid for t in op.InputsAsNumpy()):
            why.setdefault(kind, "supported; int8 weights dequantized to float32 (dynamic-range file)")
        elif kind in FOLD or kind in ("SHAPE", "DENSIFY", "DEQUANTIZE"):
            why.setdefault(kind, "supported; folded at import when its inputs are constants")
        else:
            why.setdefault(kind, "supported")
        counts[kind] += 1
    return [{"op": k, "count": n, "supported": why[k].startswith("supported"), "why": why[k]} for k, n in counts.items()]


def _tflite(path: Path) -> dict:
    import tflite

    from edge_sdk.models.importers import _signature_names

    tfl = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sub = tfl.Subgraphs(0)
    names = _signature_names(tfl)

    def tensor(idx):
        t = sub.Tensors(idx)
        sig = [int(v) for v in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else None
        return {"name": names.get(idx, t.Name().decode()), "shape": [int(v) for v in t.ShapeAsNumpy()], "dtype": _TFL_TYPES.get(t.Type(), str(t.Type())),
                **({"shape_signature": sig} if sig and sig != [int(v) for v in t.ShapeAsNumpy()] else {})}

    storage: Counter = Counter()
    sparse = 0
    produced = {int(o) for i in range(sub.OperatorsLength()) for o in sub.Operators(i).OutputsAsNumpy()}
    for i in range(sub.TensorsLength()):
        t = sub.Tensors(i)
        b = tfl.Buffers(t.Buffer())
        if i in produced or b is None or b.DataLength() == 0:
            continue
        storage[_TFL_TYPES.get(t.Type(), str(t.Type()))] += b.DataLength()
        sparse += t.Sparsity() is not None
    return {"format": "tflite", "inputs": [tensor(int(sub.Inputs(i))) for i in range(sub.InputsLength())],
            "outputs": [tensor(int(sub.Outputs(i))) for i in range(sub.OutputsLength())],
            "ops": _tflite_ops(tfl, sub), "weights": {"bytes_by_dtype": dict(storage), "sparse_tensors": sparse}}


def _onnx(path: Path) -> dict:
    import onnx
    from onnx import helper
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    proto = onnx.load(str(path))
    conv_map = _get_convert_map()
    inits = {i.name for i in proto.graph.initializer}

    def value(v):
        dims = [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        return {"name": v.name, "shape": dims, "dtype": str(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))}

    counts = Counter(n.op_type for n in proto.graph.node)
    ops = [{"op": k, "count": c, "supported": k in conv_map,
            "why": "supported" if k in conv_map else "not in the ONNX importer"} for k, c in counts.items()]
    storage: Counter = Counter()
    for t in proto.graph.initializer:
        arr = onnx.numpy_helper.to_array(t)
        storage[str(arr.dtype)] += arr.nbytes
    return {"format": "onnx", "opset": max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None),
            "inputs": [value(i) for i in proto.graph.input if i.name not in inits],
            "outputs": [value(o) for o in proto.graph.output], "ops": ops,
            "weights": {"bytes_by_dtype": dict(storage), "sparse_tensors": len(proto.graph.sparse_initializer)}}


def inspect_model_file(path: Path) -> dict:
    """The report on a .tflite / .onnx file; "compile" says whether the float import succeeds, and if not why."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        report = _tflite(path) if suffix == ".tflite" else _onnx(path) if suffix == ".onnx" else None
    except Exception as e:  # noqa: BLE001 - flatbuffers / protobuf raise anything on garbage
        raise ModelError(f"{path}: not a valid {suffix} file ({type(e).__name__}: {e})") from e
    if report is None:
        raise ModelError(f"{path}: unknown model format '{suffix}' (expected .tflite or .onnx)")
    from edge_sdk.models.importers import load_model_file

    try:
        load_model_file(path, family="auto")
        report["import"] = {"ok": True}
    except EdgeError as e:
        report["import"] = {"ok": False, "error": str(e)}
    return {"file": str(path), **report}
