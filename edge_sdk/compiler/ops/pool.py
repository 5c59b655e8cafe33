"""2-D pooling (NHWC): max, average (TF: padding not counted), and the global mean.

Same shape as the depthwise kernel without weights: channels innermost and vectorized, the window
reduction in registers, rows in parallel. Windows wider than 3x3 stay rolled. On NEON the 3x3 stride-2
max pool (ResNet's, after the stem) is ops/maxpool_rows_a53's forward pass instead. A global pool
(squeeze-excite's mean) walks the map once in memory order instead: the pixels outside, all channels
accumulated inside.
"""
from __future__ import annotations

import tvm
from tvm import s_tir, te

from edge_sdk.compiler.ops import maxpool_rows_a53
from edge_sdk.compiler.ops.common import ACC_SCOPE, Simd, finish, pad_nhwc, tile_inner, vector_width


def pool2d(shape, kind: str, kernel, strides, padding, simd: Simd, *, count_include_pad=False,
           name="edge_pool2d") -> tvm.tirx.PrimFunc:
    """kind "max" or "avg"; padding = (top, left, bottom, right); output (N, OH, OW, C)."""
    if maxpool_rows_a53.applies(kind, kernel, strides, padding, shape, simd):
        return maxpool_rows_a53.maxpool_3x3s2(shape, padding, name)
    n, h, w_, c = shape
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w_ + pl + pr - kw) // sw + 1
    cv = vector_width(c, 2 * simd.lanes)
    x = te.placeholder(shape, "float32", name="X")
    fill = tvm.tirx.min_value("float32") if kind == "max" else tvm.tirx.const(0.0, "float32")
    xp = pad_nhwc(x, padding, fill)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    reducer = te.max if kind == "max" else te.sum
    acc = te.compute((n, oh, ow, c), lambda a, y, z, k: reducer(
        xp[a, y * sh + ry, z * sw + rx, k], axis=[ry, rx]), name="acc")
    if kind == "max":
        out = te.compute((n, oh, ow, c), lambda a, y, z, k: acc[a, y, z, k], name="out")
    else:
        def count(y, z):
            if count_include_pad or not any(padding):
                return tvm.tirx.const(float(kh * kw), "float32")
            y0, z0 = y * sh - pt, z * sw - pl
            hy = tvm.tirx.min(y0 + kh, h) - tvm.tirx.max(y0, 0)
            hz = tvm.tirx.min(z0 + kw, w_) - tvm.tirx.max(z0, 0)
            return (hy * hz).astype("float32")

        out = te.compute((n, oh, ow, c), lambda a, y, z, k: acc[a, y, z, k] / count(y, z), name="out")
    sch = s_tir.Schedule(workload := te.create_prim_func([x, out]))
    if (oh, ow) == (1, 1) and not any(padding) and min(kh, kw) > 1:
        _schedule_global(sch, c, simd)
        return finish(sch, name, workload=workload)
    ab, ob = sch.get_sblock("acc"), sch.get_sblock("out")
    la, ly, lz, lk = sch.get_loops(ob)
    ko, ki = sch.split(lk, [None, cv])
    sch.reorder(la, ly, lz, ko, ki)
    sch.compute_at(ab, ko)
    sch.set_scope(ab, 0, ACC_SCOPE)
    sch.vectorize(ki)
    red = tile_inner(sch, ab, 4, [cv], [kh, kw], vec=True)
    if kh * kw <= 9:
        for loop in red:
            sch.unroll(loop)
    sch.parallel(sch.fuse(la, ly))
    if red:
        sch.decompose_reduction(ab, red[0])
    if any(padding):
        pa, py, pz, pc = sch.get_loops(sch.get_sblock("pad"))
        sch.parallel(sch.fuse(pa, py))
        _, pcv = sch.split(pc, [None, vector_width(c, simd.lanes)])
        sch.vectorize(pcv)
    return finish(sch, name, workload=workload)


_UNROLL_VECTORS = 16  # channel vectors per pixel unrolled (accumulators in registers); more: a loop over L1


def _schedule_global(sch: s_tir.Schedule, c: int, simd: Simd) -> None:
    """(N, 1, 1, C) from (N, H, W, C): one forward pass over the map, all channels accumulated per
    pixel (in registers up to 16 vectors, else in an L1 buffer). The window-order schedule walked the
    map once per vector of channels, C * 4 bytes apart, and 48-channel blocks still C * 4 bytes apart:
    past the A53 prefetcher's 4-line stride, every line a demand miss."""
    ab = sch.get_sblock("acc")
    cv = vector_width(c, simd.lanes)
    loops = sch.get_loops(ab)  # n, 1, 1, channels, then the window (ry, rx)
    chans, ry, rx = loops[3], loops[4], loops[5]
    kc, kv = sch.split(chans, [None, cv])
    sch.reorder(ry, rx, kc, kv)
    if c // cv <= _UNROLL_VECTORS:
        sch.unroll(kc)
    sch.vectorize(kv)
    sch.decompose_reduction(ab, ry)
