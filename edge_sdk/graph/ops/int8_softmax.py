"""int8 softmax over the last axis (gemmlowp's fixed-point exp and reciprocal, TFLite's output
quantization 1/256, -128). Reference: f(g, op, env) in quant/tflite_int8_ref_ops.py (quant/int8_nonlinear.py);
kernel: compiler/int8/glue.softmax, emitted by compiler/int8/emit_scheduled.py."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register

register(OpDef("SOFTMAX", "softmax", "edge_sdk.quant.tflite_int8_ref_ops:softmax",
               "edge_sdk.compiler.int8.emit_scheduled:softmax",
               tflite=TfliteOptions("SoftmaxOptions", (("beta", "Beta", float),)),
               doc="fixed-point exp of the differences to the row max"))
