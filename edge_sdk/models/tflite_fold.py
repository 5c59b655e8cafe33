"""Constant folding at .tflite import, before the Relax TFLite frontend sees an op.

Why: TFLiteConverter.from_keras_model keeps the batch dynamic (shape_signature -1) and writes every Keras
Reshape as SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE; the frontend turns that chain into Relax calls and
then fails building the reshape's ShapeExpr from a Call. With the batch fixed at 1 (the file's `shape`
field holds 1 where the signature holds -1) every such value is a constant: this converter computes it
in numpy and hands it to the frontend as a prefetched constant, so RESHAPE reads a plain int list.
Weights stored as float16 or sparse behind DEQUANTIZE / DENSIFY fold the same way (they are constants).

FoldingConverter is the frontend's OperatorConverter with one change: an op whose inputs are all known
constants and whose kind is in FOLD is evaluated here (its output becomes a prefetched numpy value),
every other op is converted as before.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.graph.ops.float_custom import CUSTOM
from edge_sdk.models.tflite_ops import convert_prelu


def _options(op, cls_name: str):
    import importlib

    cls = getattr(importlib.import_module(f"tflite.{cls_name}"), cls_name)
    opts = cls()
    raw = op.BuiltinOptions()
    if raw is None:
        return None
    opts.Init(raw.Bytes, raw.Pos)
    return opts


def _strided_slice(op, x, begin, end, strides):
    o = _options(op, "StridedSliceOptions")
    if o is None or o.EllipsisMask() or o.NewAxisMask() or (hasattr(o, "Offset") and o.Offset()):
        return None
    index = []
    for i in range(len(begin)):
        b = None if o.BeginMask() >> i & 1 else int(begin[i])
        e = None if o.EndMask() >> i & 1 else int(end[i])
        if o.ShrinkAxisMask() >> i & 1:
            index.append(int(begin[i]))
        else:
            index.append(slice(b, e, int(strides[i])))
    return np.asarray(x[tuple(index)])


def _pack(op, *xs):
    return np.stack(xs, axis=_options(op, "PackOptions").Axis())


def _concat(op, *xs):
    return np.concatenate(xs, axis=_options(op, "ConcatenationOptions").Axis())


def _gather(op, x, idx):
    return np.take(x, idx.astype(np.int64), axis=_options(op, "GatherOptions").Axis())


def _reshape(op, x, shape=None):
    if shape is None:
        shape = _options(op, "ReshapeOptions").NewShapeAsNumpy()
    return x.reshape([int(s) for s in np.asarray(shape).reshape(-1)])


def _cast(op, x):
    from tflite.TensorType import TensorType

    o = _options(op, "CastOptions")
    names = {TensorType.INT32: np.int32, TensorType.INT64: np.int64, TensorType.FLOAT32: np.float32}
    dt = names.get(o.OutDataType()) if o is not None else None
    return None if dt is None else x.astype(dt)


FOLD = {
    "STRIDED_SLICE": _strided_slice,
    "PACK": _pack,
    "CONCATENATION": _concat,
    "GATHER": _gather,
    "RESHAPE": _reshape,
    "CAST": _cast,
    "SQUEEZE": lambda op, x: np.squeeze(x, axis=tuple(_options(op, "SqueezeOptions").SqueezeDimsAsNumpy()) or None),
    "EXPAND_DIMS": lambda op, x, axis: np.expand_dims(x, int(np.asarray(axis).reshape(-1)[0])),
    "MUL": lambda op, a, b: None if _options(op, "MulOptions").FusedActivationFunction() else a * b,
    "ADD": lambda op, a, b: None if _options(op, "AddOptions").FusedActivationFunction() else a + b,
}


def _base():
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    return OperatorConverter


def _name(conv, idx: int) -> str:
    from tvm.relax.frontend.tflite.tflite_frontend import get_tensor_name

    return get_tensor_name(conv.subgraph, idx)


def _known(self, t):
    """A tensor's value when it is a constant: a buffer with data, or folded here; else None."""
    if t.tensor_idx < 0:
        return None
    if self.is_prefetched(t.tensor_idx):
        return self.get_prefetched_node(t.tensor_idx)
    if self.has_expr(t.tensor_idx) or t.buffer is None or t.buffer.DataLength() == 0:
        return None
    return _base().get_tensor_value(self, t)


def _get_tensor_value(self, tensor_wrapper, is_sparse=False):
    if self.is_prefetched(tensor_wrapper.tensor_idx):
        return self.get_prefetched_node(tensor_wrapper.tensor_idx)
    return _base().get_tensor_value(self, tensor_wrapper, is_sparse)


def _static_shape(self, t):
    """The tensor's shape as ints (the Relax value's, when converted; else the file's `shape`, which holds
    1 where shape_signature holds -1), or None when a dimension is symbolic."""
    if self.has_expr(t.tensor_idx):
        shape = getattr(getattr(self.get_expr(t.tensor_idx), "ty", None), "shape", None)
        vals = getattr(shape, "values", None)
        if vals is not None and all(isinstance(getattr(v, "value", None), int) for v in vals):
            return [int(v.value) for v in vals]
        return None
    return [int(s) for s in t.tensor.ShapeAsNumpy()] if t.tensor.ShapeLength() else []


def _fold(self, op):
    """The op's output as a numpy value, or None when it is not a constant computation."""
    from tflite.TensorType import TensorType

    kind = self.get_op_code_str(op)
    ins, outs = self.get_input_tensors(op), self.get_output_tensors(op)
    if len(outs) != 1:
        return None
    if kind == "SHAPE":
        shape = self.static_shape(ins[0])
        if shape is None:
            return None
        o = _options(op, "ShapeOptions")
        return np.asarray(shape, np.int64 if o is not None and o.OutType() == TensorType.INT64 else np.int32)
    fn = FOLD.get(kind)
    if fn is None:
        return None
    vals = [self.known(t) for t in ins]
    if any(v is None for v in vals):
        return None
    out = fn(op, *vals)
    if out is None:
        return None
    return np.array(out, dtype=self.get_tensor_type_as_numpy(outs[0]), order="C")  # (ascontiguousarray: 0-d -> 1-D)


def _convert_op_to_relax(self):
    """The frontend's loop, with every foldable op evaluated here instead (its output prefetched)."""
    self.folded = []
    for i in range(self.subgraph.OperatorsLength()):
        op = self.subgraph.Operators(i)
        value = self.fold(op)
        if value is not None:
            out = self.get_output_tensors(op)[0]
            self.set_prefetched_node(out.tensor_idx, value)
            self.folded.append(f"{self.get_op_code_str(op)}->{_name(self, out.tensor_idx)}")
            continue
        outs = self.get_output_tensors(op)
        ret = self.convert_map[self.get_op_code_str(op)](op=op)
        if ret is None:
            continue
        ret = self.bb.normalize(ret)
        if len(outs) == 1:
            self.exp_tab.set_expr(_name(self, outs[0].tensor_idx), ret)
            continue
        for k, t in enumerate(outs):
            self.exp_tab.set_expr(_name(self, t.tensor_idx), ret[k])


def _get_op_code_str(self, op) -> str:
    """The frontend's op name; a custom op we implement (graph/ops/float_custom) by its custom code."""
    from tflite.BuiltinOperator import BuiltinOperator

    code = self.model.OperatorCodes(op.OpcodeIndex())
    if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) == BuiltinOperator.CUSTOM:
        name = (code.CustomCode() or b"?").decode(errors="replace")
        if name in CUSTOM:
            return name
    return _base().get_op_code_str(self, op)


def _init(self, *args, **kwargs):
    _base().__init__(self, *args, **kwargs)
    from functools import partial

    from edge_sdk.graph.ops import resolve

    self.convert_map.update({code: partial(resolve(d.convert), self) for code, d in CUSTOM.items()})


def custom_ops(model, subgraph) -> dict[str, int]:
    """{custom op name: how many} of a subgraph (BuiltinOperator CUSTOM, named by its custom_code) that nothing
    implements: not TFLite_Detection_PostProcess (the frontend reads it), not those of graph/ops/float_custom."""
    from tflite.BuiltinOperator import BuiltinOperator

    found: dict[str, int] = {}
    for i in range(subgraph.OperatorsLength()):
        code = model.OperatorCodes(subgraph.Operators(i).OpcodeIndex())
        if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) != BuiltinOperator.CUSTOM:
            continue
        name = (code.CustomCode() or b"?").decode(errors="replace")
        if name != "TFLite_Detection_PostProcess" and name not in CUSTOM:
            found[name] = found.get(name, 0) + 1
    return found


def _get_tensors(self, tensors_idx_list):
    """The frontend's tensor wrappers, with a dynamic-range file's int8 weights as float32 constants."""
    from tvm.relax.frontend.tflite.tflite_frontend import TensorWrapper

    from edge_sdk.models.tflite_hybrid import FloatBuffer, FloatTensor, hybrid_weights

    if not hasattr(self, "hybrid"):
        self.hybrid = hybrid_weights(self.model, self.subgraph)
    out = _base().get_tensors(self, tensors_idx_list)
    return [TensorWrapper(w.tensor_idx, FloatTensor(w.tensor), FloatBuffer(self.hybrid[w.tensor_idx]), None)
            if w.tensor_idx in self.hybrid else w for w in out]


def _check_unsupported_ops(self):
    """Custom ops by name first (the frontend says only 'Custom operators are currently not supported')."""
    found = custom_ops(self.model, self.subgraph)
    if found:
        names = ", ".join(f"{n} (x{c})" if c > 1 else n for n, c in found.items())
        raise NotImplementedError(f"custom operators are not supported: {names}")
    return _base().check_unsupported_ops(self)


def converter_class():
    """The frontend's OperatorConverter with the folding above and models/tflite_ops' conversions (built
    lazily: tvm is a heavy import)."""

    return type("FoldingConverter", (_base(),), {
        "known": _known, "get_tensor_value": _get_tensor_value, "static_shape": _static_shape, "fold": _fold,
        "convert_op_to_relax": _convert_op_to_relax, "check_unsupported_ops": _check_unsupported_ops,
        "get_tensors": _get_tensors, "convert_prelu": convert_prelu, "get_op_code_str": _get_op_code_str,
        "__init__": _init})
