"""int8 image resizes: TE kernels over index / weight tables computed at compile time (quant/int8_layout.py),
the interpolation in int32 as the reference kernel's int8 overload. Reference: f(g, op, env)."""
from __future__ import annotations

from edge_sdk.graph.ops import OpDef, TfliteOptions, register

_REF = "edge_sdk.quant.tflite_int8_ref_ops:resize"
_KERNEL = "edge_sdk.compiler.int8.binary_unary_resize_move:emit_resize"
_FIELDS = (("align_corners", "AlignCorners", bool), ("half_pixel_centers", "HalfPixelCenters", bool))

register(OpDef("RESIZE_NEAREST_NEIGHBOR", "resize", _REF, _KERNEL,
               tflite=TfliteOptions("ResizeNearestNeighborOptions", _FIELDS), same_quant=True, const_operands=True,
               doc="index tables (reference/resize_nearest_neighbor.h)"))
register(OpDef("RESIZE_BILINEAR", "resize", _REF, _KERNEL, tflite=TfliteOptions("ResizeBilinearOptions", _FIELDS),
               same_quant=True, const_operands=True, doc="10-bit weights, int32 sum (resize_bilinear.h's int8 overload)"))
