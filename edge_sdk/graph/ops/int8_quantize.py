"""The int8 graph's edges: QUANTIZE (float -> int8 for a float-input model, or int8 -> int8 rescale) and
DEQUANTIZE (int8 -> float for a float-output model); their inputs or outputs are not int8 (int8_io=False).
Reference: f(g, op, env) in quant/tflite_int8_ref_ops.py; kernel: compiler/int8/glue.py's quantize /
requantize / dequantize, emitted by compiler/int8/emit_scheduled.py."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, register

_REF = "edge_sdk.quant.tflite_int8_ref_ops:"
_KERNEL = "edge_sdk.compiler.int8.emit_scheduled:"

register(OpDef("QUANTIZE", "quantize", _REF + "quantize", _KERNEL + "quantize", int8_io=False,
               doc="float32 -> int8 (round half away from zero), or int8 -> int8 with one multiplier"))
register(OpDef("DEQUANTIZE", "quantize", _REF + "dequantize", _KERNEL + "dequantize", int8_io=False,
               doc="int8 -> float32: scale * (q - zero point)"))
