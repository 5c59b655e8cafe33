"""The LLVM form of gemm_int8_smull_neon's 16-deep int8 step as TVM tensor intrinsics: SMULL_4x4 (a 4 pixels x
4 channels tile: `smull` / `smull` on the two halves of each operand pair, LLVM fusing the adds into `smlal2` and
`sadalp`) and LANE_SUM_4 (each accumulator's 4 partial sums by two `addp`). Registered on first use by `register`.
"""
from __future__ import annotations

from tvm.script import tirx as T

SMULL_4x4 = "edge_int8_smull_sadalp_4x4x16"
LANE_SUM_4 = "edge_int32_lane_sum_addp_4x4"


@T.prim_func(s_tir=True)
def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    sa, sb, s0, s1 = T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, (4, 16), "int8", offset_factor=1, strides=[sa, 1])
    B = T.match_buffer(b, (4, 16), "int8", offset_factor=1, strides=[sb, 1])
    C = T.match_buffer(c, (4, 4, 4), "int32", offset_factor=1, strides=[s0, s1, 1])
    with T.sblock("root"):
        T.reads(C[0:4, 0:4, 0:4], A[0:4, 0:16], B[0:4, 0:16])
        T.writes(C[0:4, 0:4, 0:4])
        for i, j, l, h, p in T.grid(4, 4, 4, 2, 2):
            with T.sblock("update"):
                vi, vj, vl, vh, vp = T.axis.remap("SSSRR", [i, j, l, h, p])
                C[vi, vj, vl] = C[vi, vj, vl] + T.Cast("int32", A[vi, vh * 8 + vl * 2 + vp]) * T.Cast(
                    "int32", B[vj, vh * 8 + vl * 2 + vp])


@T.prim_func(s_tir=True)
def _impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    """The step. Its named vector temporaries cost a 16-byte TVMBackendAllocWorkspace each per tile of the
    parallel loop; a temporary-free version (f1b271b, reverted) removed that but doubled ResNet18 int8's
    rows-outer 3x3 convs in the timing model (56x56 / 28x28, K >= 576: ~32 -> 69.7 M cycles, load/store-bound)."""
    sa, sb, s0, s1 = T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, (4, 16), "int8", offset_factor=1, strides=[sa, 1])
    B = T.match_buffer(b, (4, 16), "int8", offset_factor=1, strides=[sb, 1])
    C = T.match_buffer(c, (4, 4, 4), "int32", offset_factor=1, strides=[s0, s1, 1])
    with T.sblock("root"):
        T.reads(C[0:4, 0:4, 0:4], A[0:4, 0:16], B[0:4, 0:16])
        T.writes(C[0:4, 0:4, 0:4])
        for i in T.unroll(4):
            for j in T.unroll(4):
                av = A.vload([i, 0], "int8x16")
                bv = B.vload([j, 0], "int8x16")
                lo = T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.smull"),
                                             T.Shuffle([av], [0, 1, 2, 3, 4, 5, 6, 7]),
                                             T.Shuffle([bv], [0, 1, 2, 3, 4, 5, 6, 7]), dtype="int16x8")
                hi = T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.smull"),
                                             T.Shuffle([av], [8, 9, 10, 11, 12, 13, 14, 15]),
                                             T.Shuffle([bv], [8, 9, 10, 11, 12, 13, 14, 15]), dtype="int16x8")
                C[i, j, T.ramp(T.int32(0), 1, 4)] = C[i, j, T.ramp(T.int32(0), 1, 4)] + T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.saddlp"), lo + hi, dtype="int32x4")


@T.prim_func(s_tir=True)
def _sum_desc(c: T.handle, d: T.handle) -> None:
    s0 = T.int32()
    C = T.match_buffer(c, (4, 4), "int32", offset_factor=1, strides=[s0, 1])
    D = T.match_buffer(d, (4,), "int32", offset_factor=1)
    with T.sblock("root"):
        T.reads(D[0:4], C[0:4, 0:4])
        T.writes(D[0:4])
        for j, lane in T.grid(4, 4):
            with T.sblock("update"):
                vj, vl = T.axis.remap("SR", [j, lane])
                D[vj] = D[vj] + C[vj, vl]


@T.prim_func(s_tir=True)
def _sum_impl(c: T.handle, d: T.handle) -> None:
    s0 = T.int32()
    C = T.match_buffer(c, (4, 4), "int32", offset_factor=1, strides=[s0, 1])
    D = T.match_buffer(d, (4,), "int32", offset_factor=1)
    with T.sblock("root"):
        T.reads(D[0:4], C[0:4, 0:4])
        T.writes(D[0:4])
        D[T.ramp(T.int32(0), 1, 4)] = D[T.ramp(T.int32(0), 1, 4)] + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.addp"),
            T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.addp"), C.vload([0, 0], "int32x4"), C.vload([1, 0], "int32x4"), dtype="int32x4"),
            T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.addp"), C.vload([2, 0], "int32x4"), C.vload([3, 0], "int32x4"), dtype="int32x4"),
            dtype="int32x4")


def register() -> None:
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(SMULL_4x4, allow_missing=True) is None:
        TensorIntrin.register(SMULL_4x4, desc, _impl)
    if TensorIntrin.get(LANE_SUM_4, allow_missing=True) is None:
        TensorIntrin.register(LANE_SUM_4, _sum_desc, _sum_impl)
