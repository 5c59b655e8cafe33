"""int8 pooling and the spatial mean (one quantization in and out for the pools, a rescale for MEAN).
Reference: f(g, op, env) in quant/tflite_int8_ref_ops.py; kernel: compiler/int8/glue.py's pool / mean,
emitted by compiler/int8/emit_scheduled.py."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register
from edge_sdk.graph.ops.int8_conv import padding

_REF = "edge_sdk.quant.tflite_int8_ref_ops:"
_KERNEL = "edge_sdk.compiler.int8.emit_scheduled:"
_POOL = TfliteOptions("Pool2DOptions", (("padding", "Padding", padding), ("stride", ("StrideH", "StrideW"), int),
                                        ("filter", ("FilterHeight", "FilterWidth"), int),
                                        ("act", "FusedActivationFunction", int)))

register(OpDef("AVERAGE_POOL_2D", "pool", _REF + "pool", _KERNEL + "pool", tflite=_POOL,
               doc="sum over the taps inside the input, C-style rounded division by their count"))
register(OpDef("MAX_POOL_2D", "pool", _REF + "pool", _KERNEL + "pool", tflite=_POOL, doc="max over the taps inside the input (padding never wins)"))
register(OpDef("MEAN", "pool", _REF + "mean", _KERNEL + "mean",
               tflite=TfliteOptions("ReducerOptions", (("keep_dims", "KeepDims", bool),)), const_operands=True,
               doc="constant axes; sum - zp * n, one requantize (LiteRT QuantizedMeanOrSum)"))
