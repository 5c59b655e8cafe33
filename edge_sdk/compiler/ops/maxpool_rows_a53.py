"""Float max pool 3x3 stride 2 pad 1 (NHWC; ResNet's pool after the stem) for the Cortex-A53: one
forward pass over the input rows, in the order the A53's prefetcher follows.

Why: the generic pool (ops/pool.py) pads the input into a copy (112x112x64: 3.2 MB written and read
back) and reads each output row's three input rows at once. The prefetcher tracks two streams
(timing/a53.py `pf_streams = 2`, ASSUMED) trained by three misses at a fixed stride (`pf_trigger`, TRM),
so the third row's lines are demand misses from DRAM (`dram`, FIT); priced alone (modelled Pi 3B, 1
thread) that pool is 15.5 M cycles against a traffic floor of ~2.8 M (4 MB at the FIT DRAM rate).

How: no padded copy (the window is clamped to the map: a repeated element does not change a max), and
each output row reads only two input rows, 2y and 2y+1: the row 2y-1 it shares with the row above is
kept as its three-column max in `prev` (one pixel of all channels per output column), written when that
row was row 2y+1. Per output pixel, all channels (C / 4 vectors) stay in registers; the four phases (row
2y: its pixels 2z and 2z+1; then row 2y+1 the same) are kept in that order by an empty inline-asm
barrier, so each row's misses run forward a line at a time (LLVM's scheduler would interleave the
phases' loads and break the stride). `prev` (14 KB at 56x64) leaves the L1 while an output row streams
56 KB past it, and its L2 hits would train the prefetcher as a third stream: a PRFM of the next pixel's
`prev` lines (prfm_pair_a53, one line each; L2 hits, so no DRAM traffic) brings them back first.
Output rows are split into `GROUPS` parallel runs (each starts from its row 2y-1 afresh). The rows
and columns above are for padding 1 (torch); with 0 at the top / left (TF SAME at an even size: the
zoo's ResNet18) the window starts one row / column later, 2y .. 2y+2.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from edge_sdk.compiler.ops import prfm_pair_a53
from edge_sdk.compiler.ops.common import mark_scheduled

GROUPS = 4  # parallel runs of output rows (threads); each re-reads one input row to start
_LANES = 4
_MAX_C = 64  # all channels of a pixel in registers (16 of the 32 vectors), whole lines a pixel
_BARRIER = "edge_a53_order"
_BARRIER_IR = (f"define i32 @{_BARRIER}(ptr %p) alwaysinline {{\nentry:\n"
               "  call void asm sideeffect \"\", \"r,~{memory}\"(ptr %p)\n  ret i32 0\n}\n")


def applies(kind: str, kernel, strides, padding, shape, simd) -> bool:
    """True for the case this kernel implements: float max, 3x3, stride 2, padding 0 or 1 a side (TF SAME
    at an even size: (0, 0, 1, 1); torch: (1, 1, 1, 1)), on NEON,
    16 to 64 channels in whole lines."""
    return (kind == "max" and simd.isa == "neon" and tuple(kernel) == (3, 3) and tuple(strides) == (2, 2)
            and set(padding[:4]) <= {0, 1} and shape[3] % 16 == 0 and shape[3] <= _MAX_C and min(shape[1], shape[2]) >= 2)


def maxpool_3x3s2(shape, padding, name: str) -> tvm.tirx.PrimFunc:
    """(N, H, W, C) -> (N, OH, OW, C), float32; padding (top, left, bottom, right), each 0 or 1."""
    n, h, w, c = (int(d) for d in shape)
    pt, pl, pb, pr = padding
    oh, ow = (h + pt + pb - 3) // 2 + 1, (w + pl + pr - 3) // 2 + 1
    cv, g_ = c // _LANES, GROUPS
    per = (oh + g_ - 1) // g_
    line = 64
    pf = prfm_pair_a53.name_of(c * 4 // line, c * 4)
    imports = _BARRIER_IR + prfm_pair_a53.llvm_ir(c * 4 // line, c * 4)

    @T.prim_func(private=True, s_tir=True)
    def func(x: T.Buffer((n, h, w, c), "float32"), out: T.Buffer((n, oh, ow, c), "float32")):
        with T.sblock("root"):
            prev = T.alloc_buffer((g_, ow, c), "float32")
            for bg in T.parallel(n * g_, annotations={"pragma_import_llvm": imports}):
                for z, kc in T.grid(ow, cv):  # prev = the 3-column max of this run's row 2y-1
                    for ki in T.vectorized(_LANES):
                        prev[bg % g_, z, kc * 4 + ki] = T.max(T.max(
                            x[bg // g_, T.min(T.max(2 * (bg % g_) * per - pt, 0), h - 1), T.max(2 * z - pl, 0), kc * 4 + ki],
                            x[bg // g_, T.min(T.max(2 * (bg % g_) * per - pt, 0), h - 1), T.min(2 * z - pl + 1, w - 1), kc * 4 + ki]),
                            x[bg // g_, T.min(T.max(2 * (bg % g_) * per - pt, 0), h - 1), T.min(2 * z - pl + 2, w - 1), kc * 4 + ki])
                for yy in range(per):
                    if (bg % g_) * per + yy < oh:
                        for z in range(ow):
                            acc = T.alloc_buffer((c,), "float32", scope="local")
                            T.evaluate(T.call_extern("int32", pf, T.address_of(prev[bg % g_, z, 0]), T.int64(line)))
                            for kc in T.unroll(cv):  # row 2y, pixels 2z-1 (an L1 hit) and 2z
                                for ki in T.vectorized(_LANES):
                                    acc[kc * 4 + ki] = T.max(
                                        x[bg // g_, T.min(2 * ((bg % g_) * per + yy) - pt + 1, h - 1), T.max(2 * z - pl, 0), kc * 4 + ki],
                                        x[bg // g_, T.min(2 * ((bg % g_) * per + yy) - pt + 1, h - 1), T.min(2 * z - pl + 1, w - 1), kc * 4 + ki])
                            T.evaluate(T.call_extern("int32", _BARRIER, T.address_of(x[bg // g_, 0, 0, 0])))
                            for kc in T.unroll(cv):  # row 2y, pixel 2z+1; row 2y-1 from prev
                                for ki in T.vectorized(_LANES):
                                    acc[kc * 4 + ki] = T.max(T.max(
                                        acc[kc * 4 + ki],
                                        x[bg // g_, T.min(2 * ((bg % g_) * per + yy) - pt + 1, h - 1), T.min(2 * z - pl + 2, w - 1), kc * 4 + ki]),
                                        prev[bg % g_, z, kc * 4 + ki])
                            T.evaluate(T.call_extern("int32", _BARRIER, T.address_of(x[bg // g_, 0, 0, 0])))
                            for kc in T.unroll(cv):  # row 2y+1, pixels 2z-1 and 2z, into prev
                                for ki in T.vectorized(_LANES):
                                    prev[bg % g_, z, kc * 4 + ki] = T.max(
                                        x[bg // g_, T.min(2 * ((bg % g_) * per + yy) - pt + 2, h - 1),
                                          T.max(2 * z - pl, 0), kc * 4 + ki],
                                        x[bg // g_, T.min(2 * ((bg % g_) * per + yy) - pt + 2, h - 1), T.min(2 * z - pl + 1, w - 1), kc * 4 + ki])
                            T.evaluate(T.call_extern("int32", _BARRIER, T.address_of(x[bg // g_, 0, 0, 0])))
                            for kc in T.unroll(cv):  # row 2y+1, pixel 2z+1; the output pixel
                                for ki in T.vectorized(_LANES):
                                    prev[bg % g_, z, kc * 4 + ki] = T.max(
                                        prev[bg % g_, z, kc * 4 + ki],
                                        x[bg // g_, T.min(2 * ((bg % g_) * per + yy) - pt + 2, h - 1),
                                          T.min(2 * z - pl + 2, w - 1), kc * 4 + ki])
                                    out[bg // g_, (bg % g_) * per + yy, z, kc * 4 + ki] = T.max(
                                        acc[kc * 4 + ki], prev[bg % g_, z, kc * 4 + ki])

    return mark_scheduled(func, name)
