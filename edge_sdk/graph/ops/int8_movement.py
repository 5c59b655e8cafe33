"""int8 ops that move values without computing them: they run on the raw int8 values (SPLIT ... PACK and
CONCATENATION need one quantization for inputs and outputs; RESHAPE, SQUEEZE, PAD and PADV2 keep the
input's). Reference: f(g, op, env) in quant/tflite_int8_ref_ops.py; kernel: Relax take / permute_dims / strided_slice / concat / reshape, legalized
by TVM, and glue.pad for PAD / PADV2."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register

_REF = "edge_sdk.quant.tflite_int8_ref_ops:"
_KERNEL = "edge_sdk.compiler.int8.binary_unary_resize_move:emit_movement"
_SPLITS = (("num_splits", "NumSplits", int),)
_SLICE = (("begin_mask", "BeginMask", int), ("end_mask", "EndMask", int), ("ellipsis_mask", "EllipsisMask", int),
          ("new_axis_mask", "NewAxisMask", int), ("shrink_axis_mask", "ShrinkAxisMask", int), ("offset", "Offset", bool))
_SLICE_REFUSED = "STRIDED_SLICE with ellipsis/new-axis masks or offset is not supported"

register(OpDef("SPLIT", "movement", _REF + "split", _KERNEL, tflite=TfliteOptions("SplitOptions", _SPLITS),
               data_inputs="second", same_quant=True, doc="inputs (axis, x): equal parts"))
register(OpDef("SPLIT_V", "movement", _REF + "split", _KERNEL, tflite=TfliteOptions("SplitVOptions", _SPLITS),
               same_quant=True, const_operands=True, doc="inputs (x, sizes, axis)"))
register(OpDef("STRIDED_SLICE", "movement", _REF + "strided_slice", _KERNEL, tflite=TfliteOptions("StridedSliceOptions",
               _SLICE), same_quant=True, const_operands=True,
               refuse=tuple((k, _SLICE_REFUSED) for k in ("ellipsis_mask", "new_axis_mask", "offset")),
               doc="any sign of stride, begin/end/shrink-axis masks"))
register(OpDef("TRANSPOSE", "movement", _REF + "transpose", _KERNEL, same_quant=True, const_operands=True,
               doc="any rank (ShuffleNetV2's 5-D channel shuffle)"))
register(OpDef("GATHER", "movement", _REF + "gather", _KERNEL, tflite=TfliteOptions("GatherOptions", (
               ("axis", "Axis", int), ("batch_dims", "BatchDims", int))), same_quant=True, const_operands=True,
               refuse=(("batch_dims", "GATHER with batch_dims {value} is not supported"),),
               doc="constant indices"))
register(OpDef("PACK", "movement", _REF + "pack", _KERNEL, tflite=TfliteOptions("PackOptions", (
               ("axis", "Axis", int), ("values_count", "ValuesCount", int))), data_inputs="all", same_quant=True,
               doc="stack along a new axis"))
register(OpDef("CONCATENATION", "movement", "edge_sdk.quant.tflite_int8_ref_ops:concatenation",
               "edge_sdk.compiler.int8.emit_scheduled:concatenation", tflite=TfliteOptions("ConcatenationOptions", (
               ("axis", "Axis", int), ("act", "FusedActivationFunction", int))), data_inputs="all", same_quant=True,
               doc="Relax concat, then the fused activation's clamp"))
register(OpDef("RESHAPE", "movement", "edge_sdk.quant.tflite_int8_ref_ops:reshape",
               "edge_sdk.compiler.int8.emit_scheduled:reshape", doc="to the output tensor's shape"))
register(OpDef("SQUEEZE", "movement", "edge_sdk.quant.tflite_int8_ref_ops:reshape",
               "edge_sdk.compiler.int8.emit_scheduled:reshape", doc="to the output tensor's shape"))
register(OpDef("PAD", "movement", "edge_sdk.quant.tflite_int8_ref_ops:pad", "edge_sdk.compiler.int8.emit_scheduled:pad",
               doc="constant paddings, the output zero point"))
register(OpDef("PADV2", "movement", "edge_sdk.quant.tflite_int8_ref_ops:pad", "edge_sdk.compiler.int8.emit_scheduled:pad",
               doc="constant paddings and value"))
