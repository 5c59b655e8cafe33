"""Unary int8 ops: each is a 256-entry table computed at compile time by its numpy reference (the op on
every int8 value), so the kernel is the one table lookup they share (compiler/int8/glue.logistic, lut.py):
exact by construction. Reference: f(*options, s_in, z_in, s_out, z_out) -> table."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register

_KERNEL = "edge_sdk.compiler.int8.binary_unary_resize_move:emit_unary"

register(OpDef("HARD_SWISH", "unary", "edge_sdk.quant.int8_pointwise:hard_swish_table", _KERNEL, onnx=("HardSwish",),
               doc="reference_ops::HardSwish<int8_t> in int16 fixed point"))
register(OpDef("LEAKY_RELU", "unary", "edge_sdk.quant.int8_pointwise:leaky_relu_table", _KERNEL,
               tflite=TfliteOptions("LeakyReluOptions", (("alpha", "Alpha", float),)), reference_opts=(("alpha", 0.2),),
               doc="two requantizations, chosen by the sign of q - z_in"))
register(OpDef("TANH", "unary", "edge_sdk.quant.int8_pointwise:tanh_table", _KERNEL, onnx=("Tanh",),
               doc="TFLite's int8 LUT (activations.cc)"))
register(OpDef("LOGISTIC", "unary", "edge_sdk.quant.int8_nonlinear:logistic_table", _KERNEL, onnx=("Sigmoid",),
               doc="gemmlowp's fixed-point exp and reciprocal"))
