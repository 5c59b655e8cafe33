"""int8 convolutions and the dense layer: int8 weights (per-channel scales, zero zero point), int32 bias,
the requantize and the fused activation in the kernel's epilogue. Reference: f(g, op, env) in
quant/tflite_int8_ref_ops.py (quant/int8.py: TFLite's reference_integer_ops); kernel: the scheduled GEMM /
depthwise / dense kernels of compiler/int8/kernels.py (and the choice among them), emitted by
compiler/int8/emit_scheduled.py."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register

PADDING = {0: "SAME", 1: "VALID"}  # tflite.Padding


def padding(code: int) -> str:
    return PADDING[code]


_REF = "edge_sdk.quant.tflite_int8_ref_ops:"
_KERNEL = "edge_sdk.compiler.int8.emit_scheduled:"
_WINDOW = (("padding", "Padding", padding), ("stride", ("StrideH", "StrideW"), int),
           ("dilation", ("DilationHFactor", "DilationWFactor"), int), ("act", "FusedActivationFunction", int))

register(OpDef("CONV_2D", "conv", _REF + "conv2d", _KERNEL + "conv2d", tflite=TfliteOptions("Conv2DOptions", _WINDOW),
               weights=True, doc="OHWI weights, the kernels.conv2d GEMM"))
register(OpDef("DEPTHWISE_CONV_2D", "conv", _REF + "depthwise_conv2d", _KERNEL + "depthwise",
               tflite=TfliteOptions("DepthwiseConv2DOptions", _WINDOW + (("depth_multiplier", "DepthMultiplier", int),)),
               weights=True, refuse=(("dilation", "dilated depthwise convolution is not supported", ((1, 1),)),),
               doc="(1, KH, KW, C*M) weights, any depth multiplier"))
register(OpDef("FULLY_CONNECTED", "conv", _REF + "fully_connected", _KERNEL + "dense",
               tflite=TfliteOptions("FullyConnectedOptions", (("act", "FusedActivationFunction", int),
                                                              ("keep_num_dims", "KeepNumDims", bool))),
               weights=True, doc="LiteRT's single-rounding requantize"))
