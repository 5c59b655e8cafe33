"""The int8 readers' side of the registered ops (graph/ops: one entry per op): their builtin options as
read from the flatbuffer, which inputs carry data, and their structural checks -- all read from the
entries, so a new op is a registration, not an edit here. models/tflite_int8.py reads them with these;
models/onnx_qdq.py checks its graphs with validate() too.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry

def data_inputs(op) -> list[int]:
    """Indices of the int8 data inputs of an op (SPLIT's first input is its axis; shape/index/size
    operands are int32 constants)."""
    mode = registry.of(op.kind).data_inputs
    if mode == "second":
        return op.inputs[1:2]
    if mode == "all":
        return [i for i in op.inputs if i >= 0]
    return op.inputs[:1]


def options(op, kind: str) -> dict:
    """The builtin options of a registered op as a plain dict (its entry's `tflite` fields)."""
    return read_options(op, registry.of(kind).tflite)


def read_options(op, spec) -> dict:
    """A flatbuffer operator's builtin options as the TfliteOptions `spec` names them ({} without either)."""
    import tflite

    if spec is None or op.BuiltinOptions() is None:
        return {}
    o = getattr(tflite, spec.table)()
    o.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    return {key: tuple(cast(getattr(o, g)()) for g in getter) if isinstance(getter, tuple) else
            cast(getattr(o, getter)()) for key, getter, cast in spec.fields}


def _same_quant(g, op, ins, where: str) -> None:
    for t in ins + [g.tensors[i] for i in op.outputs]:
        out = g.tensors[op.outputs[0]]
        if t.q is None or (t.q.s, t.q.z) != (out.q.s, out.q.z):
            raise ModelError(f"{where}: tensor '{t.name}' is quantized differently from the output "
                             f"'{out.name}'; {op.kind} needs one scale and zero point")


def _weights(g, op, where: str) -> None:
    w = g.tensors[op.inputs[1]]
    if w.data is None or w.dtype != "int8":
        raise ModelError(f"{where}: weights '{w.name}' are not constant int8")
    if w.q is None:
        raise ModelError(f"{where}: weights '{w.name}' have no quantization parameters")
    if np.any(np.asarray(w.q.zero_point) != 0):
        raise ModelError(f"{where}: weights '{w.name}' have a non-zero zero point")


def refused(opts: dict, where: str, rule: tuple) -> None:
    """A ModelError when an option breaks the rule: (option, message) refuses it when set, (option, message,
    accepted values) any other value (lists compare as tuples)."""
    key, message, *accepted = rule
    value = opts.get(key)
    if accepted:
        bad = value is not None and (tuple(value) if isinstance(value, list | tuple) else value) not in accepted[0]
    else:
        bad = bool(value)
    if bad:
        raise ModelError(f"{where}: {message.format(value=value)}")


def validate(g, op, where: str) -> None:
    """Checks beyond dtypes: what these ops need to be computed exactly, or a ModelError naming the op."""
    d = registry.of(op.kind)
    if not d.int8_io:  # QUANTIZE / DEQUANTIZE: float or rescaled edges
        return
    ins = [g.tensors[i] for i in data_inputs(op)]
    if d.same_quant:
        _same_quant(g, op, ins, where)
    if d.family == "binary" and len(ins) == 2 and all(t.data is not None for t in ins):
        raise ModelError(f"{where}: both operands are constants (the converter folds these)")
    if d.weights:
        _weights(g, op, where)
    for rule in d.refuse:
        refused(op.opts, where, rule)
    for i in op.inputs[1:]:
        t = g.tensors[i] if i >= 0 else None
        if d.const_operands and t is not None and t.data is None:
            raise ModelError(f"{where}: operand '{t.name}' is computed at run time; only constant "
                             "shapes, indices and sizes are supported")
