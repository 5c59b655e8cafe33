"""A KxK conv (any stride) as an implicit-im2col GEMM on the A53 assembly 8x8 tile (conv1x1_gemm_a53).

out[p, o] = sum_{ky, kx, c} X[y(p) * sh + ky, x(p) * sw + kx, c] * W[o, ky, kx, c] for the output pixels
p = y * OW + x: per row tile of 8 pixels, the packing stage AP copies their KH x KW x CI windows into
L1 as (KH, KW, CI, 8) (8 pixels contiguous per reduction step: the tile's A operand; the padding is
read there, no padded copy of X), then every 8-channel weight panel (KH, KW, CI, 8) of the packed
weights (conv2d.pack_conv_weight, unchanged) runs through the tile, and the epilogue stores 8 x 8.

Why: the direct conv (conv2d.conv2d_direct) is LLVM's register tile over rows of X, whose operand loads
do not pair with `fmla` on the A53 (a53.py vld_pairs_q_neon, NCNN); the assembly tile's `ldr d` / `ldr x`
/ `ins` pattern costs 1.25x the NEON floor (conv1x1_gemm_a53's docstring). The reduction is KH*KW*CI
(>= 64, even) so the tile's fixed cost per 8 x 8 (the pack, 2 cycles a float, and the C round trip) is
small beside its loop. Used for ResNet18's 3x3 stride-2 convs (conv2d_direct's rule, `applies`).
"""
from __future__ import annotations

import tvm
from tvm import s_tir, te
from tvm.script import tirx as T

from edge_sdk.compiler.ops import conv1x1_gemm_a53 as a53
from edge_sdk.compiler.ops.common import ACC_SCOPE, NO_EPILOGUE, Epilogue, Simd, apply_epilogue, finish, pad_nhwc, round_up


def applies(simd: Simd, shape, kernel, strides, padding, nr: int) -> bool:
    """NEON, batch 1, a kernel wider than 1x1 (unit reduction loops would not match the intrinsic),
    8-channel panels, and conv1x1_gemm_a53.applies for the GEMM (K = KH*KW*CI >= 64, an odd K by the
    kernel's one-step tail; a row tile is 8 pixels of one output row, padded by <= 25 %). Zero padding
    or per-channel fills (a stem's folded input affine) alike: AP reads the border."""
    n, h, w_, ci = shape
    kh, kw = kernel
    if simd.isa != "neon" or n != 1 or kh < 2 or kw < 2 or nr != a53.NR:
        return False
    k = kh * kw * ci
    oh = (h + padding[0] + padding[2] - kh) // strides[0] + 1
    ow = (w_ + padding[1] + padding[3] - kw) // strides[1] + 1
    # rows of 8 output pixels within one output row: conv1x1_gemm_a53.applies' padding rule on OW
    return oh > 0 and a53.applies(simd, ow, k + k % 2, a53.MR, nr, False)


def intrin(kh: int, kw: int, ci: int) -> str:
    """C[8, 8] += sum_{ky, kx, c} A[ky, kx, c, 0:8]^T W[ky, kx, c, 0:8], A and W compact: the same
    assembly with K = KH*KW*CI (registered once per shape)."""
    from tvm.s_tir import TensorIntrin

    name = f"{a53.NAME}_conv{kh}x{kw}x{ci}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    shp, k = (kh, kw, ci, a53.MR), kh * kw * ci
    fname, keven = (a53.NAME_ODD, k - 1) if k % 2 else (a53.NAME, k)  # an odd K: the kernel's tail step

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, shp, "float32", offset_factor=1)
        W = T.match_buffer(w, shp, "float32", offset_factor=1)
        C = T.match_buffer(c, (a53.MR, a53.NR), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:8, 0:8], A[0:kh, 0:kw, 0:ci, 0:8], W[0:kh, 0:kw, 0:ci, 0:8])
            T.writes(C[0:8, 0:8])
            for ky, kx, kc, i, j in T.grid(kh, kw, ci, 8, 8):
                with T.sblock("update"):
                    vi, vj, vy, vx, vc = T.axis.remap("SSRRR", [i, j, ky, kx, kc])
                    C[vi, vj] = C[vi, vj] + A[vy, vx, vc, vi] * W[vy, vx, vc, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, w: T.handle, c: T.handle) -> None:
        sc = T.int32()
        A = T.match_buffer(a, shp, "float32", offset_factor=1)
        W = T.match_buffer(w, shp, "float32", offset_factor=1)
        C = T.match_buffer(c, (a53.MR, a53.NR), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:8, 0:8], A[0:kh, 0:kw, 0:ci, 0:8], W[0:kh, 0:kw, 0:ci, 0:8])
            T.writes(C[0:8, 0:8])
            T.evaluate(T.call_extern("int32", fname, C.access_ptr("rw"), A.access_ptr("r"), W.access_ptr("r"),
                                     keven, sc))

    TensorIntrin.register(name, desc, impl)
    return name


def conv2d_im2col(shape, kernel, strides, padding, cpad: int, simd: Simd, *, epi: Epilogue = NO_EPILOGUE,
                  name="edge_conv2d") -> tvm.tirx.PrimFunc:
    """conv2d.conv2d_direct's signature and result (X NHWC, W (cpad/8, KH, KW, CI, 8), bias [, R] ->
    (1, OH, OW, cpad)), computed as above; the tail row tile re-reads the last pixel and stores nothing."""
    act, residual = epi.act, epi.residual
    n, h, w_, ci = shape
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = padding[:4]
    oh, ow = (h + pt + pb - kh) // sh + 1, (w_ + pl + pr - kw) // sw + 1
    mr, nr = a53.MR, a53.NR
    owp = round_up(ow, mr)
    x = te.placeholder(shape, "float32", name="X")
    wt = te.placeholder((cpad // nr, kh, kw, ci, nr), "float32", name="W")
    b = epi.bias(cpad)
    r = te.placeholder((n, oh, ow, cpad), "float32", name="R") if residual else None
    xp = pad_nhwc(x, padding, padding[4] if len(padding) > 4 else tvm.tirx.const(0.0, "float32"))
    col = (lambda z: te.min(z, ow - 1)) if owp != ow else (lambda z: z)
    ap = te.compute((oh, owp // mr, kh, kw, ci, mr), lambda y, zo, ky, kx, c, ii: xp[
        0, y * sh + ky, col(zo * mr + ii) * sw + kx, c], name="AP")
    ry, rx, rc = (te.reduce_axis((0, e), name=nm) for e, nm in ((kh, "ry"), (kw, "rx"), (ci, "rc")))
    c = te.compute((oh, owp, cpad), lambda y, z, j: te.sum(
        ap[y, z // mr, ry, rx, rc, z % mr] * wt[j // nr, ry, rx, rc, j % nr], axis=[ry, rx, rc]), name="C")
    out = te.compute((n, oh, ow, cpad), lambda a, y, z, o: apply_epilogue(
        c[y, z, o], b[o], act, r[a, y, z, o] if residual else None, simd, epi.alpha(b, cpad, o)), name="out")
    args = [x, wt, b] + ([r] if residual else []) + [out]
    sch = s_tir.Schedule(workload := te.create_prim_func(args))
    if any(padding[:4]):
        sch.compute_inline(sch.get_sblock("pad"))
    cb, ob = sch.get_sblock("C"), sch.get_sblock("out")
    la, ly, lz, lo = sch.get_loops(ob)
    zo, zi = sch.split(lz, [None, mr])
    no, ni = sch.split(lo, [None, nr])
    sch.reorder(la, ly, zo, no, zi, ni)
    sch.compute_at(cb, no)
    sch.set_scope(cb, 0, ACC_SCOPE)
    sch.unroll(zi)
    sch.vectorize(ni)
    ci_, cj, cy, cx, cc = sch.get_loops(cb)[4:]
    sch.reorder(cy, cx, cc, ci_, cj)
    pack = sch.get_sblock("AP")
    sch.compute_at(pack, zo)
    *_, py, px, pc, pi = sch.get_loops(pack)
    sch.reorder(pi, py, px, pc)  # each pixel's window rows read forward
    sch.parallel(sch.fuse(la, ly))
    init = sch.decompose_reduction(cb, cy)
    sch.tensorize(cy, intrin(kh, kw, ci))
    sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(zo, "pragma_import_llvm", a53.llvm_ir(odd=bool(kh * kw * ci % 2)))
    return finish(sch, name, workload=workload)
