"""numpy references of the upsampling ops: relax.nn.conv2d_transpose (NCHW / IOHW, groups 1) and relax.image.resize2d: nearest and (bi)linear, the modes the ONNX and TFLite exporters
write, with every coordinate transformation the importers produce (half_pixel, pytorch_half_pixel,
align_corners, asymmetric, tf_half_pixel_for_nn) and nearest's rounding methods, in float64.

Index arithmetic follows the ONNX Resize spec (what ONNX Runtime computes): a source coordinate per output
pixel, nearest rounds it, linear interpolates between floor and floor + 1, both clamped to the input.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.errors import ModelError


def _coords(n_in: int, n_out: int, mode: str) -> np.ndarray:
    o = np.arange(n_out, dtype=np.float64)
    scale = n_in / n_out
    if mode == "half_pixel":
        return (o + 0.5) * scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) * scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        return o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return o * scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) * scale
    raise ModelError(f"reference: resize2d coordinate_transformation_mode '{mode}' is not supported")


def _nearest(c: np.ndarray, rounding: str) -> np.ndarray:
    if rounding in ("round_prefer_floor",):
        return np.ceil(c - 0.5)
    if rounding in ("round_prefer_ceil",):
        return np.floor(c + 0.5)
    if rounding == "floor":
        return np.floor(c)
    if rounding == "ceil":
        return np.ceil(c)
    if rounding in ("round", ""):
        return np.where(c >= 0, np.floor(c + 0.5), np.ceil(c - 0.5))  # half away from zero, as llvm.round
    raise ModelError(f"reference: resize2d rounding_method '{rounding}' is not supported")


def _axis(x: np.ndarray, axis: int, n_out: int, method: str, mode: str, rounding: str) -> np.ndarray:
    n_in = x.shape[axis]
    c = _coords(n_in, n_out, mode)
    if method == "nearest_neighbor":
        idx = np.clip(_nearest(c, rounding), 0, n_in - 1).astype(np.int64)
        return np.take(x, idx, axis=axis)
    lo = np.floor(c)
    frac = c - lo
    i0 = np.clip(lo, 0, n_in - 1).astype(np.int64)
    i1 = np.clip(lo + 1, 0, n_in - 1).astype(np.int64)
    shape = [1] * x.ndim
    shape[axis] = n_out
    frac = frac.reshape(shape)
    return np.take(x, i0, axis=axis) * (1 - frac) + np.take(x, i1, axis=axis) * frac


def resize2d(x: np.ndarray, size: list[int], attrs) -> np.ndarray:
    """relax.image.resize2d(x, size) with its attributes (layout NCHW or NHWC)."""
    method = str(attrs.method)
    if method not in ("nearest_neighbor", "linear"):
        raise ModelError(f"reference: resize2d method '{method}' is not supported (nearest and linear are)")
    layout = str(attrs.layout)
    if layout not in ("NCHW", "NHWC"):
        raise ModelError(f"reference: resize2d layout '{layout}' is not supported")
    h_ax, w_ax = (2, 3) if layout == "NCHW" else (1, 2)
    mode, rounding = str(attrs.coordinate_transformation_mode), str(attrs.rounding_method)
    y = _axis(np.asarray(x, np.float64), h_ax, int(size[0]), method, mode, rounding)
    return _axis(y, w_ax, int(size[1]), method, mode, rounding)


def conv2d_transpose(x: np.ndarray, w: np.ndarray, attrs, out_shape: list[int]) -> np.ndarray:
    """relax.nn.conv2d_transpose, NCHW data and IOHW kernel, groups 1, in float64: every input pixel scatters
    its kernel-weighted copy at stride s (dilation d), then the padding is cropped off (TFLite TRANSPOSE_CONV /
    ONNX ConvTranspose arithmetic)."""
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "IOHW" or int(attrs.groups) != 1:
        raise ModelError(f"reference: conv2d_transpose {attrs.data_layout}/{attrs.kernel_layout} groups "
                         f"{attrs.groups} is not supported (NCHW/IOHW, groups 1)")
    sh, sw = (int(v) for v in attrs.strides)
    dh, dw = (int(v) for v in attrs.dilation)
    pt, pl = int(attrs.padding[0]), int(attrs.padding[1])
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, _, h, wd = x.shape
    kh, kw = w.shape[2], w.shape[3]
    oh, ow = out_shape[2], out_shape[3]
    full = np.zeros((n, w.shape[1], max((h - 1) * sh + dh * (kh - 1) + 1, pt + oh),
                     max((wd - 1) * sw + dw * (kw - 1) + 1, pl + ow)))
    for ky in range(kh):
        for kx in range(kw):
            full[:, :, ky * dh:ky * dh + (h - 1) * sh + 1:sh, kx * dw:kx * dw + (wd - 1) * sw + 1:sw] += \
                np.einsum("nchw,co->nohw", x, w[:, :, ky, kx])
    return full[:, :, pt:pt + oh, pl:pl + ow]
