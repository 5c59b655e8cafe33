"""A 256-entry int8 table lookup (HARD_SWISH, LOGISTIC, swish, ...) as 64-byte vector steps on AVX-512 VBMI.

    lut_vbmi(shape, name) -> PrimFunc (x int8 shape, table int8 (256,), out int8 shape) | None

The plain kernel (glue.logistic) is `out = table[x + 128]`, one scalar load per element: 2.05 ms for
EfficientNet-B0's 112x112x96 swish on this Xeon. Here one step looks up 64 values: `vpermi2b` selects
from a 128-byte table by the low 7 bits of each index byte, and x's low 7 bits are those of x + 128, so
entries 0-127 (x < 0) are vpermi2b(T[0:64], x, T[64:128]) and entries 128-255 vpermi2b(T[128:192], x,
T[192:256]); a byte compare picks one. The same table, so the same values as the scalar kernel; the
tail (size % 64) stays scalar. None where the target lacks avx512vbmi.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

from edge_sdk.compiler.ops.common import has_feature, mark_scheduled

VEC = 64
PERMI2B = "llvm.x86.avx512.vpermi2var.qi.512"


def has_vbmi() -> bool:
    """Whether the current target (compile_int8 runs under `with target:`) has AVX-512 VBMI."""
    tgt = tvm.target.Target.current(allow_none=True)
    return tgt is not None and str(tgt.kind) == "llvm" and has_feature(tgt, "avx512vbmi")


def lut_vbmi(shape, *, name: str):
    n = int(np.prod(shape))
    if not has_vbmi() or n < VEC:
        return None
    nv, tail = n // VEC, n % VEC
    shape = tuple(int(d) for d in shape)

    @T.prim_func(private=True)
    def lut(xh: T.handle, th: T.handle, oh: T.handle):
        xs = T.match_buffer(xh, shape, "int8")
        t = T.match_buffer(th, (256,), "int8")
        os_ = T.match_buffer(oh, shape, "int8")
        x = T.decl_buffer((n,), "int8", data=xs.data)
        out = T.decl_buffer((n,), "int8", data=os_.data)
        for i in T.parallel(nv):
            out[T.ramp(i * VEC, 1, VEC)] = T.Select(
                x[T.ramp(i * VEC, 1, VEC)] < T.broadcast(T.int8(0), VEC),
                T.call_llvm_pure_intrin("int8x64", PERMI2B, t[T.ramp(0, 1, VEC)], x[T.ramp(i * VEC, 1, VEC)],
                                        t[T.ramp(64, 1, VEC)]),
                T.call_llvm_pure_intrin("int8x64", PERMI2B, t[T.ramp(128, 1, VEC)], x[T.ramp(i * VEC, 1, VEC)],
                                        t[T.ramp(192, 1, VEC)]))
        for j in T.serial(tail):
            out[nv * VEC + j] = t[T.Cast("int32", x[nv * VEC + j]) + 128]

    return mark_scheduled(lut, name)
