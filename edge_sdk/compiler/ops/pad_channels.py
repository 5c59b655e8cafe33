"""relax.nn.pad of the channel axis only (NHWC, constant, after the channels) as a scheduled copy.

Why: BlazeFace-style residual blocks (mediapipe's face_detection_short_range, 11 of them) widen the shortcut
by padding its channels with zeros (24 -> 28, 36 -> 42, ...) before the add. TVM's default legalization writes
that pad as one guarded scalar element at a time (fused with the reshape after it): 2.3 of the detector's 26.7
modelled Pi 3B ms. Here the tensor is viewed as (pixels, C) rows and the output as (pixels, CO / v, v) with v
a power of two dividing both C and CO: each v-wide step is either entirely a copy or entirely the fill, decided
by its block index alone, so every step is one vector load (or none) and one vector store.

    pad_channels(mod, simd) -> mod    (run on "main" after the kernel rewrite, before LegalizeOps)
"""
from __future__ import annotations

import math

import tvm
from tvm import relax, s_tir, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from edge_sdk.compiler.ops.chain import ints, op_name, shape_of
from edge_sdk.compiler.ops.common import Simd, finish, vector_width


def channel_pad_kernel(rows: int, c: int, co: int, v: int, fill: float, simd: Simd, *,
                       name: str = "edge_pad_channels") -> tvm.tirx.PrimFunc:
    """X (rows, c) -> (rows, co / v, v): X's channels, then `fill` up to co."""
    x = te.placeholder((rows, c), "float32", name="X")
    blocks = c // v
    out = te.compute((rows, co // v, v), lambda p, ko, ki: tvm.tirx.if_then_else(
        ko < blocks, x[p, te.min(ko, blocks - 1) * v + ki], tvm.tirx.const(fill, "float32")), name="out")
    sch = s_tir.Schedule(workload := te.create_prim_func([x, out]))
    lp, _, lki = sch.get_loops(sch.get_sblock("out"))
    sch.vectorize(lki)
    po, _ = sch.split(lp, [None, max(1, 4096 // co)])  # ~16 KB of output per parallel task
    sch.parallel(po)
    return finish(sch, name, workload=workload)


def _match(call):
    """(n, h, w, c, co, fill) for a constant pad of the last axis only, high side; else None."""
    if op_name(call) != "relax.nn.pad" or str(call.attrs.pad_mode) != "constant":
        return None
    shape, pw = shape_of(call.args[0]), ints(call.attrs.pad_width)
    if shape is None or len(shape) != 4 or len(pw) != 8 or any(pw[:7]) or pw[7] <= 0:
        return None
    return (*shape, shape[3] + pw[7], float(call.attrs.pad_value))


@mutator
class _ChannelPads(PyExprMutator):
    def __init__(self, mod, simd: Simd):
        super().__init__(mod)
        self.simd, self.count = simd, 0

    def visit_call_(self, call):
        call = super().visit_call_(call)
        found = _match(call)
        if found is None:
            return call
        n, h, w, c, co, fill = found
        v = vector_width(math.gcd(c, co), 4 * self.simd.lanes)
        rows = n * h * w
        name = f"edge_pad_channels_{rows}x{c}_to_{co}"
        gv = self.builder_.add_func(channel_pad_kernel(rows, c, co, v, fill, self.simd, name=name), name)
        flat = self.builder_.emit(relax.op.reshape(call.args[0], (rows, c)))
        out = self.builder_.emit(relax.call_tir(gv, [flat], relax.TensorType((rows, co // v, v), "float32")))
        self.count += 1
        return relax.op.reshape(out, (n, h, w, co))


def pad_channels(mod: tvm.IRModule, simd: Simd) -> tvm.IRModule:
    """Every channel-only pad of "main" as channel_pad_kernel (see the module docstring)."""
    rewriter = _ChannelPads(mod, simd)
    new = rewriter.visit_expr(mod["main"])
    rewriter.builder_.update_func(rewriter.builder_.get().get_global_var("main"), new)
    return rewriter.builder_.get()

