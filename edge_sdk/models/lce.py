"""Intake of Larq Compute Engine models: .tflite files with LCE's custom binary ops.

    read_lce(path) -> LceGraph        the op list, constant tensors, options (flexbuffers) parsed
    (quant/lce_ref.run_reference(graph, x) -> y: the network in plain numpy, the golden output)
    load_lce(path) -> Model           what compile_model takes (variant w1a1; compiler/bitserial/lce.py lowers it)

LCE's semantics (read from larq/compute-engine, core/bconv2d/*.h, tflite/kernels/bconv2d.cc):
  packing     int32 words along channels, channel c at bit c % 32 of word c // 32 (LSB first); bit 1 means
              -1, bit 0 means +1. LceQuantize writes bit = (x < 0) (so 0.0 is +1); tail bits are 0.
  LceBconv2d  inputs: packed input, packed filter (O, KH, KW, ceil(C/32)), post_activation_multiplier,
              post_activation_bias (float, per O), thresholds (int32, per O). Options: channels_in,
              stride/dilation, padding (0 SAME, 1 VALID), pad_values (1: pad with +1; 0: with 0, which
              LCE corrects), fused_activation_function. With v = the true +-1 dot product (K - 2 * xor
              popcount, K = KH*KW*channels_in):
                float output:     clamp(v, activation range) * multiplier + bias
                bitpacked output: bit (-1) iff (K - v) / 2 > threshold  (the xor popcount > threshold)
  LceBMaxPool2d  max of +-1 values over the window (an AND of the bits), padded taps ignored.
  LceDequantize  bit 1 -> -1.0, bit 0 -> +1.0.
Our bipolar kernels use the opposite bit convention (bit 1 = +1); an XNOR dot product does not change when
both sides flip, so only weights (repacked here) and the quantize/dequantize ends see the difference.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.graph.lce import ACTIVATIONS, LceGraph, LceOp
from edge_sdk.graph.ops import lce as registry
from edge_sdk.graph.lce import bconv_geometry as bconv_geometry, pads as pads  # compiler/bitserial/lce.py
from edge_sdk.models.base import Model, Preprocess, model_name
from edge_sdk.models.tflite_int8_ops import read_options, refused

LCE_OPS = registry.kinds(custom=True)  # LceQuantize, LceDequantize, LceBconv2d, LceBMaxPool2d: graph/ops/lce.py
BUILTINS = registry.kinds(custom=False)  # the float builtins around them, registered there too
_TYPES = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8}


def is_lce_file(path: Path) -> bool:
    """True when the .tflite file uses any of LCE's custom ops."""
    import tflite

    buf = path.read_bytes()
    try:
        m = tflite.Model.GetRootAsModel(buf, 0)
        codes = [m.OperatorCodes(i).CustomCode() for i in range(m.OperatorCodesLength())]
    except Exception:  # noqa: BLE001 - not a flatbuffer at all: the normal importer reports it
        return False
    return any(c and c.decode().startswith("Lce") for c in codes)


def _activation(code: int, where: str):
    if code not in ACTIVATIONS:
        raise ModelError(f"{where}: fused activation {code} is not supported (NONE, RELU, RELU_N1_TO_1, RELU6)")
    return ACTIVATIONS[code]


def _builtin_options(op, kind: str, where: str) -> dict:
    """A builtin's options as its graph/ops/lce entry reads them, refusing what the entry refuses."""
    d = registry.of(kind)
    opts = read_options(op, d.tflite)
    for rule in d.refuse:
        refused(opts, where, rule)
    return opts


def read_lce(path: Path) -> LceGraph:
    """Parse an LCE-converted .tflite into an LceGraph (ModelError naming the file and op otherwise)."""
    import tflite
    from flatbuffers import flexbuffers

    buf = path.read_bytes()
    try:
        m = tflite.Model.GetRootAsModel(buf, 0)
        if m.SubgraphsLength() != 1:
            raise ModelError(f"{path}: {m.SubgraphsLength()} subgraphs; expected one")
        sg = m.Subgraphs(0)
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything on garbage
        raise ModelError(f"{path}: not a valid .tflite file ({type(e).__name__}: {e})") from e
    names = {v: k for k, v in tflite.BuiltinOperator.__dict__.items() if not k.startswith("_")}
    shapes, dtypes, consts = {}, {}, {}
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        if t.Type() not in _TYPES:
            raise ModelError(f"{path}: tensor '{t.Name().decode()}' has TFLite type {t.Type()}; this importer "
                             "reads float32 LCE models (int8 LCE models are not supported)")
        shapes[i] = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        dtypes[i] = np.dtype(_TYPES[t.Type()]).name
        if t.Type() == 9 and t.Quantization() is not None and t.Quantization().ScaleLength():
            raise ModelError(f"{path}: tensor '{t.Name().decode()}' is int8-quantized; only float LCE models import")
        data = m.Buffers(t.Buffer()).DataAsNumpy() if t.Buffer() else 0
        if not isinstance(data, int) and data.size:
            consts[i] = np.frombuffer(data.tobytes(), dtype=_TYPES[t.Type()]).reshape(shapes[i])
    ops, channels = [], {}
    for k in range(sg.OperatorsLength()):
        op = sg.Operators(k)
        oc = m.OperatorCodes(op.OpcodeIndex())
        custom = oc.CustomCode()
        kind = custom.decode() if custom else names.get(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()), "?")
        where = f"{path}: op {k} ({kind})"
        d = registry.of(kind)
        if d is None or d.custom != bool(custom):
            raise ModelError(f"{where} is not supported by the LCE importer (supported: {', '.join(registry.kinds())})")
        opts = (flexbuffers.Loads(op.CustomOptionsAsNumpy().tobytes()) if custom and op.CustomOptionsLength()
                else _builtin_options(op, kind, where) if not custom else {})
        o = LceOp(kind, [int(i) for i in op.InputsAsNumpy()], [int(i) for i in op.OutputsAsNumpy()], dict(opts))
        _check_op(o, where, shapes, channels)
        ops.append(o)
    if sg.InputsLength() != 1 or sg.OutputsLength() != 1:
        raise ModelError(f"{path}: expected one input and one output")
    inp, out = int(sg.Inputs(0)), int(sg.Outputs(0))
    if dtypes[inp] != "float32" or len(shapes[inp]) != 4 or shapes[inp][0] != 1:
        raise ModelError(f"{path}: input must be float32 NHWC (1, H, W, C), got {dtypes[inp]} {list(shapes[inp])}")
    return LceGraph(path=path, shapes=shapes, dtypes=dtypes, consts=consts, channels=channels, ops=ops,
                    input=inp, output=out, input_name=sg.Tensors(inp).Name().decode())


def _check_op(o: LceOp, where: str, shapes: dict, channels: dict) -> None:
    """Refuse what the importer cannot map, and track the true channels of packed tensors."""
    if o.kind == "LceQuantize":
        channels[o.outputs[0]] = shapes[o.inputs[0]][-1]
    elif o.kind == "LceBMaxPool2d":
        channels[o.outputs[0]] = channels[o.inputs[0]]
    elif o.kind == "LceDequantize" and shapes[o.outputs[0]][-1] != channels.get(o.inputs[0]):
        raise ModelError(f"{where}: output channels do not match its packed input")
    for key in registry.of(o.kind).required:
        if key not in o.options:
            raise ModelError(f"{where}: option '{key}' missing from its flexbuffer options")
    if o.kind == "LceBconv2d":
        opts = o.options
        if opts["dilation_height_factor"] != 1 or opts["dilation_width_factor"] != 1:
            raise ModelError(f"{where}: dilated binary convolutions are not supported")
        fo, kh, kw, cw = shapes[o.inputs[1]]
        if cw != -(-opts["channels_in"] // 32):
            raise ModelError(f"{where}: grouped binary convolutions are not supported")
        if opts["pad_values"] not in (0, 1):
            raise ModelError(f"{where}: pad_values {opts['pad_values']} is not 0 or 1")
        channels[o.outputs[0]] = fo
    act = registry.of(o.kind).act  # the option holding the op's fused activation, if it has one
    if act is not None:
        _activation(o.options.get(act, 0), where)


# ---- the Model --------------------------------------------------------------------------------

def load_lce(path: Path) -> Model:
    """A Model for the bitserial backend: like a full-integer .tflite, it carries no float Relax graph
    (`mod` is None); compiler/bitserial/lce.py reads the file, emits the module and its layer table."""
    g = read_lce(path)
    shape = g.shapes[g.input]
    if shape[3] not in (1, 3):
        raise ModelError(f"{path}: input has {shape[3]} channels; expected an image (1 or 3)")
    return Model(name=model_name(path), mod=None, input_name=g.input_name, input_shape=shape, input_dtype="float32",
                 preprocess=Preprocess(shape[1], shape[2]), source=str(path),
                 options={"format": "lce", "binary_convs": sum(op.kind == "LceBconv2d" for op in g.ops)})
