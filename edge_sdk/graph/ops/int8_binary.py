"""Binary int8 ops with numpy broadcasting (squeeze-excite's (1,H,W,C) x (1,1,1,C), a (1,H,W,1) gate, a
constant vector or scalar). Reference: f(g, op, a, b) in quant/tflite_int8_ref_ops.py (TFLite's
reference kernels: quant/int8.py, quant/int8_pointwise.py); kernel: the broadcasting elementwise kernel,
or a (constant position, value) table when one operand is a small constant (ADD of two same-shape
computed tensors: glue.add where the 32-bit fast path does not apply, compiler/int8/emit_scheduled.add)."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register

_REF = "edge_sdk.quant.tflite_int8_ref_ops:"
_KERNEL = "edge_sdk.compiler.int8.binary_unary_resize_move:emit_binary"
_ACT = (("act", "FusedActivationFunction", int),)

register(OpDef("ADD", "binary", _REF + "add", "edge_sdk.compiler.int8.emit_scheduled:add",
               tflite=TfliteOptions("AddOptions", _ACT), onnx=("Add",),
               data_inputs="all", doc="rescale to 2*max(S1, S2) with 20 bits of headroom; same-shape adds: glue.add"))
register(OpDef("SUB", "binary", _REF + "sub", _KERNEL, tflite=TfliteOptions("SubOptions", _ACT), onnx=("Sub",),
               data_inputs="all", doc="as ADD, the second operand negated"))
register(OpDef("MUL", "binary", _REF + "mul", _KERNEL, tflite=TfliteOptions("MulOptions", _ACT), onnx=("Mul",),
               data_inputs="all", doc="one requantization of the product; MUL(x, LOGISTIC(x)) is swish's table"))
register(OpDef("MAXIMUM", "binary", _REF + "maximum", _KERNEL, data_inputs="all", same_quant=True,
               doc="on raw values (one quantization)"))
register(OpDef("MINIMUM", "binary", _REF + "minimum", _KERNEL, data_inputs="all", same_quant=True,
               doc="on raw values (one quantization)"))
register(OpDef("PRELU", "binary", _REF + "prelu", _KERNEL, data_inputs="all",
               doc="two requantizations, chosen by the sign of x - z"))
