"""ONNX -> Relax with static shapes folded first, and errors that name the node, its op type and the file.

    mod = import_onnx(proto, path, shape_dict, dtype_dict)

torch.onnx.export writes shape arithmetic for chunk/split and view(x.size(0), ...) (Shape -> Gather ->
Div -> Slice / Reshape): with a static input shape every such value is a constant, but the Relax
frontend turns it into shape_of / dynamic_strided_slice and compilation then fails deep inside TVM
(a ShuffleNetV2 gave "TypeError: 'NoneType' object is not iterable"). fold_static_shapes replaces every
node computable without the image (Shape of a tensor of known shape, and nodes whose inputs are all
constants) by its value, computed with onnx's reference evaluator. An op the frontend has no converter
for, or one it fails on, is a ModelError naming the node and its op type.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError

_MAX_FOLD = 1 << 20  # elements: fold shape arithmetic and small constant subgraphs, not weight transforms
_DYNAMIC = ("relax.shape_of", "relax.dynamic_strided_slice", "relax.shape_to_tensor", "relax.tensor_to_shape")


def _static_shapes(proto) -> dict[str, list[int]]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto)
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[vi.name] = [d.dim_value for d in dims]
    return out


def _eval_node(node, consts: dict[str, np.ndarray], opset: int):
    import onnx
    from onnx.reference import ReferenceEvaluator

    ins = [i for i in node.input if i]
    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_tensor_value_info(i, onnx.helper.np_dtype_to_tensor_dtype(
            consts[i].dtype), consts[i].shape) for i in ins],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {i: consts[i] for i in ins})


def fold_static_shapes(proto, opset: int, keep: tuple[str, ...] = ()):
    """A copy of proto with every image-independent node replaced by an initializer (op types in keep
    stay nodes: a QDQ file's DequantizeLinear of int8 weights must not become float weights)."""
    import onnx
    from onnx import numpy_helper

    shapes = _static_shapes(proto)
    consts = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    kept, folded = [], []
    for node in proto.graph.node:
        ins = [i for i in node.input if i]
        value = None
        if node.op_type in keep:
            kept.append(node)
            continue
        if node.op_type == "Shape" and ins and ins[0] in shapes and not node.attribute:
            value = [np.asarray(shapes[ins[0]], np.int64)]
        elif node.op_type == "Constant" or (ins and all(i in consts for i in ins) and node.domain in ("", "ai.onnx")):
            try:
                value = _eval_node(node, consts, opset)
            except Exception:  # noqa: BLE001 - not foldable by the reference evaluator: keep the node
                value = None
        if value is None or any(np.asarray(v).size > _MAX_FOLD for v in value):
            kept.append(node)
            continue
        for name, v in zip(node.output, value):
            consts[name] = np.asarray(v)
            folded.append(numpy_helper.from_array(np.asarray(v), name))
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    out.graph.initializer.extend(folded)
    return out


def opset_of(proto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def _const_clip(inputs):
    """Clip with constant scalar bounds (ReLU6) as one relax.clip: the frontend writes isnan/where on the
    bounds and TOPI maximum/minimum kernels, which neither the numpy reference nor our conv epilogues read."""
    from tvm import relax
    from tvm.ir.expr import GenericConst

    if len(inputs) != 3 or not all(isinstance(v, GenericConst) for v in inputs[1:]):
        return None
    lo, hi = (v.value.numpy() for v in inputs[1:])
    if lo.size != 1 or hi.size != 1 or np.isnan(lo).any() or np.isnan(hi).any():
        return None
    return relax.op.clip(inputs[0], float(lo.reshape(-1)[0]), float(hi.reshape(-1)[0]))


def import_onnx(proto, path: Path, shape_dict: dict, dtype_dict: dict):
    """The Relax module of a (folded) ONNX model; ModelError naming the node for anything unsupported."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    opset = opset_of(proto)
    proto = fold_static_shapes(proto, opset)
    known = fe._get_convert_map()
    for node in proto.graph.node:
        if node.op_type not in known or node.domain not in ("", "ai.onnx"):
            raise ModelError(f"{path}: unsupported model content: node '{node.name}' "
                             f"({node.domain + '.' if node.domain else ''}{node.op_type}): not supported by the "
                             "ONNX importer")

    class Importer(fe.ONNXGraphImporter):
        current = ("", "")

        def _convert_operator(self, op_name, inputs, attrs, opset):
            Importer.current = (op_name, attrs.get("tvm_custom", {}).get("name", ""))
            if op_name == "Clip":
                clip = _const_clip(inputs)
                if clip is not None:
                    return self.bb.normalize(clip)
            return super()._convert_operator(op_name, inputs, attrs, opset)

    try:
        mod = Importer(shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True).from_onnx(proto.graph, opset)
    except Exception as e:  # noqa: BLE001 - the frontend raises anything; name the node it was converting
        op, name = Importer.current
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1][:200]
        raise ModelError(f"{path}: unsupported model content: node '{name}' ({op}): the ONNX importer failed "
                         f"on it ({type(e).__name__}: {first})") from e
    dyn = set()
    relax.analysis.post_order_visit(mod["main"], lambda e: dyn.add(e.op.name) if isinstance(e, relax.Call)
                                    and getattr(e.op, "name", "") in _DYNAMIC else None)
    if dyn:
        raise ModelError(f"{path}: unsupported model content: shapes computed at run time ({', '.join(sorted(dyn))}) remain after folding; "
                         "only static shapes are supported")
    return mod
