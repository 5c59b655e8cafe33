"""Numpy reference of TFLite's int8 data-movement kernels of issue 14: STRIDED_SLICE, RESIZE_NEAREST_NEIGHBOR
and RESIZE_BILINEAR (reference/resize_nearest_neighbor.h, resize_bilinear.h's int8 overload), plus the
index arithmetic the compiled kernels share (it runs at compile time: shapes are static).

SPLIT/SPLIT_V/TRANSPOSE/GATHER/PACK are numpy's split/transpose/take/stack on the raw int8 values (one
quantization in and out); they need no code of their own.
"""
from __future__ import annotations

import numpy as np

from edge_sdk.quant import int8 as q8


def slices(shape, begin, end, strides, *, begin_mask: int = 0, end_mask: int = 0, shrink_mask: int = 0):
    """STRIDED_SLICE's begin/end/strides and masks as Python slices (clamped like TF), and the axes to drop."""
    out, drop = [], []
    for d, n in enumerate(shape):
        b, e, s = int(begin[d]), int(end[d]), int(strides[d])
        if shrink_mask >> d & 1:
            b = b + n if b < 0 else b
            out.append(slice(b, b + 1, 1))
            drop.append(d)
            continue
        out.append(slice(None if begin_mask >> d & 1 else b, None if end_mask >> d & 1 else e, s))
    return tuple(out), tuple(drop)


def strided_slice(x, sl, drop) -> np.ndarray:
    y = np.asarray(x)[sl]
    return y.reshape([n for d, n in enumerate(y.shape) if d not in drop])


def split_sizes(total: int, *, num_splits: int, size_splits=None) -> list[int]:
    """SPLIT (equal parts) or SPLIT_V (sizes, one of them may be -1: the rest)."""
    if size_splits is None:
        return [total // num_splits] * num_splits
    sizes = [int(v) for v in size_splits]
    if -1 in sizes:
        sizes[sizes.index(-1)] = total - sum(v for v in sizes if v != -1)
    return sizes


def nearest_index(out_size: int, in_size: int, *, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """GetNearestNeighbor for every output coordinate (float32 scale, floor or TfLiteRound)."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    offset = np.float32(0.5 if half_pixel_centers else 0.0)
    pos = (np.arange(out_size, dtype=np.float32) + offset) * scale
    idx = q8.tflite_round(pos) if align_corners else np.floor(pos)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half_pixel_centers else idx


def resize_nearest(x, out_hw, *, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    _, h, w, _ = x.shape
    iy = nearest_index(out_hw[0], h, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    ix = nearest_index(out_hw[1], w, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    return np.asarray(x)[:, iy][:, :, ix]


def bilinear_taps(out_size: int, in_size: int, *, align_corners: bool, half_pixel_centers: bool):
    """ComputeInterpolationValues with 10 fractional bits: (i0, i1, weight of i1 in 1/1024) per output."""
    scale = ((1 << 10) * in_size + out_size // 2) // out_size
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    v = np.arange(out_size, dtype=np.int64) * scale
    if half_pixel_centers:
        v = v + scale // 2 - (1 << 9)
    lo = np.maximum(_cdiv(v, 1 << 10), 0)
    hi = np.minimum(_cdiv(v + (1 << 10) - 1, 1 << 10), in_size - 1)
    return lo, hi, v - (1 << 10) * lo


def _cdiv(a, b: int):
    """C integer division (toward zero)."""
    a = np.asarray(a, np.int64)
    return np.where(a >= 0, a // b, -((-a) // b))


def resize_bilinear(x, out_hw, *, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """reference_ops::ResizeBilinear for int8: four raw values weighted in 20 fractional bits, rounded
    half away from zero by a C division."""
    _, h, w, _ = x.shape
    y0, y1, fy = bilinear_taps(out_hw[0], h, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    x0, x1, fx = bilinear_taps(out_hw[1], w, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    v = np.asarray(x, np.int64)
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    one = 1 << 10
    acc = (v[:, y0][:, :, x0] * (one - fy) * (one - fx) + v[:, y1][:, :, x0] * fy * (one - fx)
           + v[:, y0][:, :, x1] * (one - fy) * fx + v[:, y1][:, :, x1] * fy * fx)
    rnd = np.where(acc > 0, 1 << 19, -(1 << 19))
    return _cdiv(acc + rnd, 1 << 20).astype(np.int8)


def out_hw_of(size_data) -> tuple[int, int]:
    h, w = (int(v) for v in np.asarray(size_data).reshape(-1)[:2])
    return h, w
