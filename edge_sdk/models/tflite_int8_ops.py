"""The int8 ops of today's edge classifiers beyond the MobileNetV1/V2/ResNet set (issue 14): their names,
their builtin options as read from the flatbuffer, and their structural checks.

MobileNetV3 (HARD_SWISH, squeeze-excite's broadcast MUL, hard-sigmoid's ADD/MUL with constants),
EfficientNet (swish = LOGISTIC + MUL, input Rescaling/Normalization as MUL/SUB), ShuffleNetV2 (SPLIT,
channel shuffle RESHAPE + TRANSPOSE), DenseNet (per-channel BN as MUL + ADD), plus the elementwise,
resize and gather/slice/pack ops classifiers contain. models/tflite_int8.py reads them with these.
"""
from __future__ import annotations

from edge_sdk.errors import ModelError

MORE = ("MUL", "SUB", "MAXIMUM", "MINIMUM", "HARD_SWISH", "LEAKY_RELU", "PRELU", "TANH", "SPLIT", "SPLIT_V",
        "STRIDED_SLICE", "TRANSPOSE", "GATHER", "PACK", "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR")
BINARY = ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "PRELU")
# ops whose output is a rearrangement of input values: TFLite requires (and the converter writes) one
# quantization for the data inputs and outputs, so they run on the raw int8 values
SAME_QUANT = ("MAXIMUM", "MINIMUM", "SPLIT", "SPLIT_V", "STRIDED_SLICE", "TRANSPOSE", "GATHER", "PACK",
              "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR", "CONCATENATION")


def data_inputs(op) -> list[int]:
    """Indices of the int8 data inputs of an op (SPLIT's first input is its axis; shape/index/size
    operands are int32 constants)."""
    if op.kind == "SPLIT":
        return op.inputs[1:2]
    if op.kind in BINARY or op.kind in ("CONCATENATION", "PACK"):
        return [i for i in op.inputs if i >= 0]
    return op.inputs[:1]


def _table(tflite) -> dict:
    return {"MUL": tflite.MulOptions, "SUB": tflite.SubOptions, "SPLIT": tflite.SplitOptions,
            "SPLIT_V": tflite.SplitVOptions, "STRIDED_SLICE": tflite.StridedSliceOptions,
            "LEAKY_RELU": tflite.LeakyReluOptions, "GATHER": tflite.GatherOptions, "PACK": tflite.PackOptions,
            "RESIZE_BILINEAR": tflite.ResizeBilinearOptions,
            "RESIZE_NEAREST_NEIGHBOR": tflite.ResizeNearestNeighborOptions}


def options(op, kind: str) -> dict:
    """The builtin options of one of MORE as a plain dict."""
    import tflite

    cls = _table(tflite).get(kind)
    if cls is None or op.BuiltinOptions() is None:
        return {}
    o = cls()
    o.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    if kind in ("MUL", "SUB"):
        return {"act": o.FusedActivationFunction()}
    if kind in ("SPLIT", "SPLIT_V"):
        return {"num_splits": o.NumSplits()}
    if kind == "STRIDED_SLICE":
        return {"begin_mask": o.BeginMask(), "end_mask": o.EndMask(), "ellipsis_mask": o.EllipsisMask(),
                "new_axis_mask": o.NewAxisMask(), "shrink_axis_mask": o.ShrinkAxisMask(),
                "offset": bool(o.Offset())}
    if kind == "LEAKY_RELU":
        return {"alpha": float(o.Alpha())}
    if kind == "GATHER":
        return {"axis": o.Axis(), "batch_dims": o.BatchDims()}
    if kind == "PACK":
        return {"axis": o.Axis(), "values_count": o.ValuesCount()}
    return {"align_corners": bool(o.AlignCorners()), "half_pixel_centers": bool(o.HalfPixelCenters())}


def validate(g, op, where: str) -> None:
    """Checks beyond dtypes: what these ops need to be computed exactly, or a ModelError naming the op."""
    ins = [g.tensors[i] for i in data_inputs(op)]
    if op.kind in SAME_QUANT:
        for t in ins + [g.tensors[i] for i in op.outputs]:
            out = g.tensors[op.outputs[0]]
            if t.q is None or (t.q.s, t.q.z) != (out.q.s, out.q.z):
                raise ModelError(f"{where}: tensor '{t.name}' is quantized differently from the output "
                                 f"'{out.name}'; {op.kind} needs one scale and zero point")
    if op.kind in BINARY and len(ins) == 2 and all(t.data is not None for t in ins):
        raise ModelError(f"{where}: both operands are constants (the converter folds these)")
    if op.kind == "STRIDED_SLICE" and (op.opts["ellipsis_mask"] or op.opts["new_axis_mask"] or op.opts["offset"]):
        raise ModelError(f"{where}: STRIDED_SLICE with ellipsis/new-axis masks or offset is not supported")
    if op.kind == "GATHER" and op.opts["batch_dims"] != 0:
        raise ModelError(f"{where}: GATHER with batch_dims {op.opts['batch_dims']} is not supported")
    for i in op.inputs[1:]:
        t = g.tensors[i] if i >= 0 else None
        if op.kind in ("SPLIT_V", "STRIDED_SLICE", "TRANSPOSE", "GATHER", "RESIZE_BILINEAR",
                       "RESIZE_NEAREST_NEIGHBOR") and t is not None and t.data is None:
            raise ModelError(f"{where}: operand '{t.name}' is computed at run time; only constant "
                             "shapes, indices and sizes are supported")
