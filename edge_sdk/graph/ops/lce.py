"""One registration per op of a Larq Compute Engine .tflite (the bitserial path's LCE importer): Larq's
custom binary ops and the float builtins around them, each tying its reader options, numpy reference and
emitter in one entry.

    OPS["LceBconv2d"] -> LceDef(kind, reference, kernel, custom=True, required=(...))
    of(kind) -> LceDef | None

The reader (models/lce.py) reads a builtin's options as its `tflite` fields say (a custom op's from its
flexbuffer, checking `required`), refuses what `refuse` names, and checks the fused activation in `act`;
the numpy reference (quant/lce_ref.run_reference) calls `reference` f(g, op, env) -> array; the Relax
emitter (compiler/bitserial/lce.emit_lce) calls `kernel` f(em, k, op) -> relax value. Names are
"module:function" strings as in graph/ops (graph/ is below quant/ and compiler/).
"""
from __future__ import annotations

from dataclasses import dataclass

from edge_sdk.graph.ops import TfliteOptions, resolve as resolve  # noqa: F401 - the resolvers call registry.resolve


@dataclass(frozen=True)
class LceDef:
    kind: str  # LCE's custom code ("LceBconv2d") or the TFLite builtin name
    reference: str  # "module:function" in edge_sdk.quant: f(g, op, env) -> array
    kernel: str  # "module:function" in edge_sdk.compiler: f(em, k, op) -> relax value
    custom: bool = False  # a Larq custom op: options from its flexbuffer
    tflite: TfliteOptions | None = None  # a builtin's options (padding kept as TFLite's code: 0 SAME, 1 VALID)
    required: tuple[str, ...] = ()  # custom options the op must carry
    refuse: tuple[tuple, ...] = ()  # (option, message, accepted values): a ModelError for any other value
    act: str | None = None  # the option holding a fused activation (TFLite code) the reader checks
    doc: str = ""


OPS: dict[str, LceDef] = {}
RESOLVED_BY = {"reference": ("edge_sdk.quant.lce_ref",), "kernel": ("edge_sdk.compiler.bitserial.lce",)}


def register(d: LceDef) -> LceDef:
    if d.kind in OPS:
        raise ValueError(f"LCE op {d.kind} is registered twice")
    OPS[d.kind] = d
    return d


def of(kind: str) -> LceDef | None:
    return OPS.get(kind)


def kinds(*, custom: bool | None = None) -> tuple[str, ...]:
    return tuple(k for k, d in OPS.items() if custom is None or d.custom == custom)


def links() -> list[tuple[str, str]]:
    return [(r, getattr(d, f)) for d in OPS.values() for f, rs in RESOLVED_BY.items() for r in rs]


_REF = "edge_sdk.quant.lce_ref:"
_KERNEL = "edge_sdk.compiler.bitserial.lce:"
_BCONV = ("channels_in", "stride_height", "stride_width", "padding", "pad_values", "dilation_height_factor",
          "dilation_width_factor", "fused_activation_function")
_WINDOW = (("padding", "Padding", int), ("stride", ("StrideH", "StrideW"), int),
           ("dilation", ("DilationHFactor", "DilationWFactor"), int), ("act", "FusedActivationFunction", int))
_ACT = (("act", "FusedActivationFunction", int),)

register(LceDef("LceQuantize", _REF + "quantize", _KERNEL + "quantize", custom=True,
                doc="sign-pack: code (x >= 0), bitpacked to uint32 words along channels"))
register(LceDef("LceDequantize", _REF + "dequantize", _KERNEL + "dequantize", custom=True,
                doc="unpack, 2 * code - 1 in float32"))
register(LceDef("LceBconv2d", _REF + "bconv2d", _KERNEL + "bconv2d", custom=True, required=_BCONV,
                act="fused_activation_function",
                doc="our bipolar 1-bit conv; float output (clamp, * multiplier + bias) or bitpacked (thresholds)"))
register(LceDef("LceBMaxPool2d", _REF + "bmaxpool", _KERNEL + "bmaxpool", custom=True,
                doc="OR of the codes over the window (max of +-1), padded taps ignored"))
register(LceDef("CONV_2D", _REF + "conv2d", _KERNEL + "conv2d", tflite=TfliteOptions("Conv2DOptions", _WINDOW),
                refuse=(("dilation", "dilated CONV_2D is not supported", ((1, 1),)),), act="act",
                doc="float Relax conv2d (NHWC, HWIO)"))
register(LceDef("DEPTHWISE_CONV_2D", _REF + "conv2d", _KERNEL + "conv2d", tflite=TfliteOptions(
                "DepthwiseConv2DOptions", _WINDOW + (("depth_multiplier", "DepthMultiplier", int),)),
                refuse=(("dilation", "dilated or multiplier > 1 DEPTHWISE_CONV_2D is not supported", ((1, 1),)),
                        ("depth_multiplier", "dilated or multiplier > 1 DEPTHWISE_CONV_2D is not supported", (0, 1))),
                act="act", doc="float Relax conv2d, groups = channels"))
register(LceDef("ADD", _REF + "add", _KERNEL + "add", tflite=TfliteOptions("AddOptions", _ACT), act="act",
                doc="float add"))
_POOL = TfliteOptions("Pool2DOptions", (("padding", "Padding", int), ("stride", ("StrideH", "StrideW"), int),
                                        ("filter", ("FilterHeight", "FilterWidth"), int),
                                        ("act", "FusedActivationFunction", int)))
register(LceDef("MAX_POOL_2D", _REF + "pool", _KERNEL + "pool", tflite=_POOL, act="act", doc="float max pool"))
register(LceDef("AVERAGE_POOL_2D", _REF + "pool", _KERNEL + "pool", tflite=_POOL, act="act",
                doc="float average pool, padded taps not counted"))
register(LceDef("MEAN", _REF + "mean", _KERNEL + "mean",
                tflite=TfliteOptions("ReducerOptions", (("keep_dims", "KeepDims", bool),)), doc="float mean"))
register(LceDef("FULLY_CONNECTED", _REF + "fully_connected", _KERNEL + "dense", tflite=TfliteOptions(
                "FullyConnectedOptions", (("act", "FusedActivationFunction", int), ("keep_dims", "KeepNumDims", bool))),
                act="act", doc="float matmul with the transposed weights"))
register(LceDef("SOFTMAX", _REF + "softmax", _KERNEL + "softmax",
                tflite=TfliteOptions("SoftmaxOptions", (("beta", "Beta", float),)), doc="float softmax"))
register(LceDef("RESHAPE", _REF + "reshape", _KERNEL + "reshape", doc="to the output tensor's shape"))
register(LceDef("RELU", _REF + "relu", _KERNEL + "relu", doc="max(x, 0)"))
register(LceDef("RELU6", _REF + "relu", _KERNEL + "relu", doc="clip(x, 0, 6)"))
register(LceDef("PAD", _REF + "pad", _KERNEL + "pad", doc="constant paddings, zeros"))
