"""Alternative 4x4x16 smull/sadalp steps for gemm_int8_smull_neon, offered as compile/choice candidates.

The step there (SMULL_4x4) names its two operand vectors; TVM 0.27 turns each named vector temporary
into a 16-byte TVMBackendAllocWorkspace buffer per tile of the parallel loop. The step here (f1b271b's,
reverted in 72d3fff as a global choice) repeats the loads instead, so no workspace is allocated, but it
priced 2x slower on ResNet18 int8's rows-outer 3x3 convs and ~10 % faster on MobileNetV3-Large /
EfficientNet-B0 int8: which one wins depends on the layer, so the per-layer choice prices both.
Same description (_desc) and results: only the instructions differ.
"""
from __future__ import annotations

from tvm.script import tirx as T

SMULL_4x4_NOTMP = "edge_int8_smull_sadalp_4x4x16_notmp"


@T.prim_func(s_tir=True)
def _impl_notmp(a: T.handle, b: T.handle, c: T.handle) -> None:
    sa, sb, s0, s1 = T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, (4, 16), "int8", offset_factor=1, strides=[sa, 1])
    B = T.match_buffer(b, (4, 16), "int8", offset_factor=1, strides=[sb, 1])
    C = T.match_buffer(c, (4, 4, 4), "int32", offset_factor=1, strides=[s0, s1, 1])
    with T.sblock("root"):
        T.reads(C[0:4, 0:4, 0:4], A[0:4, 0:16], B[0:4, 0:16])
        T.writes(C[0:4, 0:4, 0:4])
        for i in T.unroll(4):
            for j in T.unroll(4):
                C[i, j, T.ramp(T.int32(0), 1, 4)] = C[i, j, T.ramp(T.int32(0), 1, 4)] + T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.saddlp"),
                    T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.smull"),
                                            T.Shuffle([A.vload([i, 0], "int8x16")], [0, 1, 2, 3, 4, 5, 6, 7]),
                                            T.Shuffle([B.vload([j, 0], "int8x16")], [0, 1, 2, 3, 4, 5, 6, 7]),
                                            dtype="int16x8")
                    + T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.smull"),
                                              T.Shuffle([A.vload([i, 0], "int8x16")], [8, 9, 10, 11, 12, 13, 14, 15]),
                                              T.Shuffle([B.vload([j, 0], "int8x16")], [8, 9, 10, 11, 12, 13, 14, 15]),
                                              dtype="int16x8"), dtype="int32x4")


def register(desc) -> str:
    """Register the temporary-free step against gemm_int8_smull_neon's description; its intrinsic name."""
    from tvm.s_tir import TensorIntrin

    if TensorIntrin.get(SMULL_4x4_NOTMP, allow_missing=True) is None:
        TensorIntrin.register(SMULL_4x4_NOTMP, desc, _impl_notmp)
    return SMULL_4x4_NOTMP
