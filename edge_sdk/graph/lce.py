"""The graph of a Larq Compute Engine .tflite (models/lce.py reads it; quant/lce_ref.py runs it in numpy;
compiler/bitserial/lce.py lowers it) and its geometry: the op list, constant tensors, options, padding.

Below both models/ and quant/: it imports neither. LCE's semantics: models/lce.py's docstring.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError

ACTIVATIONS = {0: None, 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}  # TFLite ActivationFunctionType


@dataclass
class LceOp:
    kind: str  # "LceBconv2d", "CONV_2D", ...
    inputs: list[int]  # tensor indices, -1 for an absent optional input
    outputs: list[int]
    options: dict = field(default_factory=dict)


@dataclass
class LceGraph:
    path: Path
    shapes: dict[int, tuple[int, ...]]
    dtypes: dict[int, str]
    consts: dict[int, np.ndarray]
    channels: dict[int, int]  # true channel count of every bitpacked tensor
    ops: list[LceOp]
    input: int
    output: int
    input_name: str

    def const(self, i: int, op: LceOp, what: str) -> np.ndarray:
        if i not in self.consts:
            raise ModelError(f"{self.path}: {op.kind}: {what} must be a constant tensor")
        return self.consts[i]


def unpack_lce(words: np.ndarray, channels: int) -> np.ndarray:
    """LCE int32 words (..., ceil(C/32)) -> +-1 int64 values (..., C): bit 1 is -1."""
    w = words.astype(np.int64) & 0xFFFFFFFF
    bits = (w[..., :, None] >> np.arange(32)) & 1
    bits = bits.reshape(*w.shape[:-1], -1)[..., :channels]
    return 1 - 2 * bits


def tf_padding(size: int, k: int, stride: int, same: bool) -> tuple[int, int, int]:
    """(out, before, after) of TFLite SAME (padding 0) / VALID (1) along one axis."""
    if not same:
        return (size - k) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return out, total // 2, total - total // 2


def pads(op: LceOp, in_shape, k: tuple[int, int], stride: tuple[int, int], padding: int):
    """(top, left, bottom, right) for an NHWC op."""
    _, t, b = tf_padding(in_shape[1], k[0], stride[0], padding == 0)
    _, l, r = tf_padding(in_shape[2], k[1], stride[1], padding == 0)
    return (t, l, b, r)


def bconv_geometry(g: LceGraph, op: LceOp):
    """(HWIO +-1 weights, stride, (t, l, b, r), K) of an LceBconv2d."""
    o = op.options
    c = o["channels_in"]
    w = unpack_lce(g.const(op.inputs[1], op, "the filter"), c).transpose(1, 2, 3, 0)  # OHWI -> HWIO
    stride = (o["stride_height"], o["stride_width"])
    pad = pads(op, g.shapes[op.inputs[0]], w.shape[:2], stride, o["padding"])
    return w, stride, pad, w.shape[0] * w.shape[1] * c
