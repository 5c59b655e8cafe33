"""relax.image.resize2d (NHWC, bilinear) as a scheduled kernel: the upsampling of mediapipe's detectors and
segmentation decoders (palm_detection_lite, pose_detection, selfie_segmentation: 2x, half_pixel).

Why: TVM's default legalization (topi.image.resize2d) computes the source coordinate, its floor, the clamps
and the weights per output element in scalar float code, channels innermost and not vectorized. The sizes
are static, so the per-row and per-column source indices and weights are computed here at compile time
(numpy, float32 as TOPI rounds them) and passed as small tables: the kernel is four vector loads and three
vector lerps per 4 channels, the table entries loop-invariant over the channels.

    resize_bilinear_nhwc(shape, (oh, ow), mode, simd) -> PrimFunc(X, IY, WY, IX, WX) -> out
    tables(n_in, n_out, mode) -> (indices (n_out, 2) int32, weights (n_out, 2) float32: 1 - t, t)

Coordinate modes: half_pixel, pytorch_half_pixel, align_corners, asymmetric (what the TFLite and ONNX
importers write for bilinear); anything else keeps TOPI's loops (lower.resize_legalize returns None).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te

from edge_sdk.compiler.ops.common import Simd, finish, vector_width

MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _source(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """The source coordinate of every output index, in float32 as topi.image.get_inx computes it."""
    o = np.arange(n_out, dtype=np.float32)
    scale = np.float32(n_in) / np.float32(n_out)
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and n_out > 1):
        return (o + np.float32(0.5)) * scale - np.float32(0.5)
    if mode == "pytorch_half_pixel":
        return np.zeros(n_out, np.float32)
    if mode == "align_corners":
        return np.float32(n_in - 1) / np.float32(max(n_out - 1, 1)) * o
    return scale * o  # asymmetric


def tables(n_in: int, n_out: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(floor and floor + 1 clamped to the input, (n_out, 2) int32; (1 - t, t), (n_out, 2) float32)."""
    c = _source(n_in, n_out, mode)
    lo = np.floor(c)
    t = (c - lo).astype(np.float32)
    idx = np.stack([np.clip(lo, 0, n_in - 1), np.clip(lo + 1, 0, n_in - 1)], axis=1).astype(np.int32)
    return idx, np.stack([np.float32(1.0) - t, t], axis=1).astype(np.float32)


def applies(shape, size, layout: str, method: str, mode: str) -> bool:
    return (layout == "NHWC" and method == "linear" and mode in MODES and len(shape) == 4
            and all(int(s) > 0 for s in (*shape, *size)))


def resize_bilinear_nhwc(shape, size, simd: Simd, *, name: str = "edge_resize") -> tvm.tirx.PrimFunc:
    """X (N, H, W, C) -> (N, OH, OW, C): lerp over columns, then rows (topi's _lerp order)."""
    n, h, w, c = (int(d) for d in shape)
    oh, ow = (int(d) for d in size)
    x = te.placeholder((n, h, w, c), "float32", name="X")
    iy = te.placeholder((oh, 2), "int32", name="IY")
    wy = te.placeholder((oh, 2), "float32", name="WY")
    ix = te.placeholder((ow, 2), "int32", name="IX")
    wx = te.placeholder((ow, 2), "float32", name="WX")

    def value(a, y, z, k):
        def row(r):
            return x[a, iy[y, r], ix[z, 0], k] * wx[z, 0] + x[a, iy[y, r], ix[z, 1], k] * wx[z, 1]
        return row(0) * wy[y, 0] + row(1) * wy[y, 1]

    out = te.compute((n, oh, ow, c), value, name="out")
    sch = s_tir.Schedule(workload := te.create_prim_func([x, iy, wy, ix, wx, out]))
    la, ly, lz, lk = sch.get_loops(sch.get_sblock("out"))
    vw = vector_width(c, 4 * simd.lanes)  # up to four vectors of channels per step
    if vw > 1:
        _, ki = sch.split(lk, [None, vw])
        sch.vectorize(ki)
    sch.parallel(sch.fuse(la, ly))
    return finish(sch, name, workload=workload)


def legalize(simd: Simd):
    """A LegalizeOps customize_legalize_map entry for relax.image.resize2d: our kernel where `applies`,
    else TVM's default legalization."""
    from tvm import relax

    default = tvm.ir.Op.get("relax.image.resize2d").get_attr("FLegalize")

    def fn(bb, call):
        a, ty = call.attrs, call.args[0].ty
        size = getattr(call.args[1], "values", None)
        try:
            shape = [int(d) for d in ty.shape.values]
            size = [int(d) for d in size]
        except (AttributeError, TypeError):
            return default(bb, call)
        if str(ty.dtype) != "float32" or not applies(shape, size, str(a.layout), str(a.method),
                                                     str(a.coordinate_transformation_mode)):
            return default(bb, call)
        mode = str(a.coordinate_transformation_mode)
        name = "edge_resize_{}x{}x{}_to_{}x{}".format(*shape[1:], *size)
        gv = bb.add_func(resize_bilinear_nhwc(shape, size, simd, name=name), name)
        (iy, wy), (ix, wx) = tables(shape[1], size[0], mode), tables(shape[2], size[1], mode)
        args = [call.args[0]] + [relax.const(t) for t in (iy, wy, ix, wx)]
        return relax.call_tir(gv, args, relax.TensorType((shape[0], *size, shape[3]), "float32"))

    return fn
