"""The .tflite reader's side of the registered int8 ops (graph/ops: one entry per op): their builtin options
as read from the flatbuffer, which inputs carry data, and their structural checks -- all read from the
entries, so a new op is a registration, not an edit here. models/tflite_int8.py reads them with these.
"""
from __future__ import annotations

from edge_sdk.errors import ModelError
from edge_sdk.graph import ops as registry

CORE_SAME_QUANT = ("CONCATENATION",)  # a core op (not registered) that moves values too
CORE_ALL_DATA = ("CONCATENATION",)


def data_inputs(op) -> list[int]:
    """Indices of the int8 data inputs of an op (SPLIT's first input is its axis; shape/index/size
    operands are int32 constants)."""
    d = registry.of(op.kind)
    mode = d.data_inputs if d is not None else "all" if op.kind in CORE_ALL_DATA else "first"
    if mode == "second":
        return op.inputs[1:2]
    if mode == "all":
        return [i for i in op.inputs if i >= 0]
    return op.inputs[:1]


def options(op, kind: str) -> dict:
    """The builtin options of a registered op as a plain dict (its entry's `tflite` fields)."""
    import tflite

    spec = registry.of(kind).tflite
    if spec is None or op.BuiltinOptions() is None:
        return {}
    o = getattr(tflite, spec.table)()
    o.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    return {key: cast(getattr(o, getter)()) for key, getter, cast in spec.fields}


def _same_quant(g, op, ins, where: str) -> None:
    for t in ins + [g.tensors[i] for i in op.outputs]:
        out = g.tensors[op.outputs[0]]
        if t.q is None or (t.q.s, t.q.z) != (out.q.s, out.q.z):
            raise ModelError(f"{where}: tensor '{t.name}' is quantized differently from the output "
                             f"'{out.name}'; {op.kind} needs one scale and zero point")


def validate(g, op, where: str) -> None:
    """Checks beyond dtypes: what these ops need to be computed exactly, or a ModelError naming the op."""
    d = registry.of(op.kind)
    ins = [g.tensors[i] for i in data_inputs(op)]
    if (d.same_quant if d is not None else op.kind in CORE_SAME_QUANT):
        _same_quant(g, op, ins, where)
    if d is None:
        return
    if d.family == "binary" and len(ins) == 2 and all(t.data is not None for t in ins):
        raise ModelError(f"{where}: both operands are constants (the converter folds these)")
    for key, message in d.refuse:
        if op.opts.get(key):
            raise ModelError(f"{where}: {message.format(value=op.opts[key])}")
    for i in op.inputs[1:]:
        t = g.tensors[i] if i >= 0 else None
        if d.const_operands and t is not None and t.data is None:
            raise ModelError(f"{where}: operand '{t.name}' is computed at run time; only constant "
                             "shapes, indices and sizes are supported")
