"""One registration per TFLite custom op the float path implements: the op's custom code, its reader (the
import's conversion to Relax ops), and the Relax ops it becomes, whose numpy reference (quant/relax_ref) and
kernels (our float kernels, else TOPI's legalization) are those ops'.

    CUSTOM["Convolution2DTransposeBias"] -> CustomDef(code, convert, relax_ops, doc)

The .tflite import (models/tflite_fold.converter_class) resolves `convert` ("module:function", as in graph/ops:
graph/ is below models/) and calls it as a method of the frontend's converter: convert(converter, op) -> Relax
expression. A custom op with no entry is refused at import, named with its count (tflite_fold.custom_ops);
`edge-sdk inspect FILE` says which are implemented.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CustomDef:
    code: str  # the operator code's custom_code in the .tflite
    convert: str  # "module:function" in edge_sdk.models: f(converter, op) -> relax.Expr
    relax_ops: tuple[str, ...]  # what it imports as (relax_ref evaluates them; compile lowers them)
    doc: str = ""


CUSTOM: dict[str, CustomDef] = {}
RESOLVED_BY = {"convert": "edge_sdk.models.tflite_fold"}


def register(d: CustomDef) -> CustomDef:
    if d.code in CUSTOM:
        raise ValueError(f"custom op {d.code} is registered twice")
    CUSTOM[d.code] = d
    return d


register(CustomDef(
    "Convolution2DTransposeBias", "edge_sdk.models.tflite_ops:convert_conv2d_transpose_bias",
    ("relax.nn.conv2d_transpose", "relax.add", "relax.nn.conv2d", "relax.permute_dims"),
    doc="mediapipe's segmentation decoder: TRANSPOSE_CONV (SAME / VALID, strides from the custom options) + bias; "
        "kernel = stride: a 1x1 conv and a depth-to-space move"))
