"""Integer kernels for the int8 binary (broadcasting), unary (table), resize and data-movement ops,
and their emission into the Relax module of compiler/int8/backend (graph/ops entries name the emitters):

    emit_binary / emit_unary / emit_movement / emit_resize(bb, g, op, env, *, name) -> [relax values, one
    per op output] (emit_binary: None for a same-shape ADD it leaves to glue.add, emit_scheduled.add)

- Binary ops with numpy broadcasting (squeeze-excite's (1,H,W,C) x (1,1,1,C), a (1,H,W,1) gate, a
  constant vector or scalar): ADD/SUB (TFLite's rescale to 2*max(S1,S2) with 20 bits of headroom), MUL
  (one requantization of the product), PRELU, MAXIMUM/MINIMUM (raw values: one quantization).
- Unary ops (HARD_SWISH, LEAKY_RELU, TANH, LOGISTIC) are a 256-entry table computed at compile time by
  the numpy reference (quant/int8_pointwise.py): exact by construction, one load per element.
- RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR: TE kernels over index/weight tables computed at compile
  time (quant/int8_layout.py), the interpolation in int32 as the reference kernel's int8 overload.
- SPLIT/SPLIT_V/STRIDED_SLICE/TRANSPOSE/GATHER/PACK move raw int8 values: Relax take/permute_dims/
  concat, legalized by TVM.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx

from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8.glue import _done, done_elementwise, logistic as table_kernel
from edge_sdk.compiler.int8.kernels import Kernel
from edge_sdk.compiler.ops.common import simd_of
from edge_sdk.models.tflite_int8 import Int8Graph, Op
from edge_sdk.quant import int8_layout as ql, int8_pointwise as qp
from edge_sdk.quant import tflite_int8_ref_ops as ref

FAST_REQUANT = True  # the 32-bit requantize where it is exact (no left shift); False: always int64


def _bcast(t, shape, out_rank: int):
    """Index function of a tensor broadcast to an output of rank out_rank (numpy rules)."""
    pad = (1,) * (out_rank - len(shape)) + tuple(shape)
    lead = out_rank - len(shape)
    return lambda i: t(*[0 if pad[d] == 1 else i[d] for d in range(lead, out_rank)])


def _consts(g: Int8Graph, op: Op) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The int32 constant row of a binary op (multipliers and split shifts) and (z1, z2, z_out, lshift)."""
    def split(m, s):
        return [m, max(s, 0), max(-s, 0)]

    if op.kind in ("ADD", "SUB"):
        p = ref.add_params(g, op)
        row = split(p.m1, p.s1) + split(p.m2, p.s2) + split(p.mo, p.so)
        return np.array(row, np.int32), (p.in1_zp, p.in2_zp, p.out_zp, p.left_shift)
    if op.kind == "MUL":
        p = ref.mul_params(g, op)
        return np.array(split(p.multiplier, p.shift), np.int32), (p.in1_zp, p.in2_zp, p.out_zp, 0)
    if op.kind == "PRELU":
        p = ref.prelu_params(g, op)
        return np.array(split(p.m1, p.s1) + split(p.m2, p.s2), np.int32), (p.in_zp, p.alpha_zp, p.out_zp, 0)
    return np.zeros(1, np.int32), (0, 0, 0, 0)


def _neon_target() -> bool:
    t = tvm.target.Target.current(allow_none=True)
    return t is not None and simd_of(t).isa == "neon"


def _i32(v):
    return tirx.const(int(v), "int32") if isinstance(v, int) else v.astype("int32")


def _scaled(kind: str, a, b, c, zs, fast: bool, *, neon: bool = False):
    """ADD/SUB's per-operand rescale as their own stages over each operand's shape (one multiply per stage:
    TVM's simplifier takes ~30 s over the nested form), so a broadcast operand is rescaled once. `fast`:
    every shift is a right shift, so the 32-bit form (fixedpoint.mbqm32, equal there) applies; `neon`: as
    sqrdmulh / srshl (fixedpoint.mbqm32_neon, equal to mbqm32; the loop must be vectorized by 4)."""
    if kind not in ("ADD", "SUB"):
        return a, b
    rq32 = fp.mbqm32_neon if neon else fp.mbqm32

    def stage(t, z, k, nm):
        if fast:
            return te.compute(t.shape, lambda *i: rq32((_i32(t(*i)) - _i32(z)) << _i32(zs[3]), c[k], c[k + 2]),
                              name=nm)
        return te.compute(t.shape, lambda *i: fp.mbqm((fp.i64(t(*i)) - fp.i64(z)) << fp.i64(zs[3]), c[k], c[k + 1],
                                                      c[k + 2]).astype("int32"), name=nm)

    return stage(a, zs[0], 0, "va"), stage(b, zs[1], 3, "vb")


def _binary_value(kind: str, va, vb, c, zs, act, fast: bool, neon: bool = False):
    if fast and kind in ("ADD", "SUB", "MUL"):  # int32 lanes: |(a-z1)(b-z2)| <= 2^16, |va|, |vb| <= 2^28
        if kind == "MUL":
            v = fp.mbqm32((_i32(va) - _i32(zs[0])) * (_i32(vb) - _i32(zs[1])), c[0], c[2])
        else:
            v = (fp.mbqm32_neon if neon else fp.mbqm32)(va + vb if kind == "ADD" else va - vb, c[6], c[8])
        return fp.clamp_int8_32(v + _i32(zs[2]), *act)
    z1, z2, zo = (fp.i64(v) for v in zs[:3])
    if kind in ("ADD", "SUB"):  # va, vb: already rescaled (_scaled)
        xa, xb = fp.i64(va), fp.i64(vb)
        return fp.clamp_int8(fp.mbqm(xa + xb if kind == "ADD" else xa - xb, c[6], c[7], c[8]) + zo, *act)
    if kind == "MUL":
        return fp.clamp_int8(fp.mbqm((fp.i64(va) - z1) * (fp.i64(vb) - z2), c[0], c[1], c[2]) + zo, *act)
    if kind == "PRELU":
        xv = fp.i64(va) - z1
        pos = fp.mbqm(xv, c[0], c[1], c[2])
        neg = fp.mbqm(xv * (fp.i64(vb) - z2), c[3], c[4], c[5])
        return fp.clamp_int8(fp.sel(xv >= fp.i64(0), pos, neg) + zo)
    return tirx.max(va, vb) if kind == "MAXIMUM" else tirx.min(va, vb)


def _shape(g: Int8Graph, i: int) -> tuple[int, ...]:
    return tuple(g.tensors[i].shape) or (1,)  # a scalar constant travels as shape (1,)


def binary(g: Int8Graph, op: Op, *, name: str) -> Kernel:
    """One broadcasting elementwise kernel; the two operands are its first two inputs (constants too)."""
    sa, sb = (_shape(g, i) for i in op.inputs[:2])
    out_shape = tuple(g.tensors[op.outputs[0]].shape)
    a = te.placeholder(sa, "int8", name="a")
    b = te.placeholder(sb, "int8", name="b")
    row, zs = _consts(g, op)
    c = te.placeholder(row.shape, "int32", name="rq")
    fast = FAST_REQUANT and not np.any(row[1::3]) and op.kind in ("ADD", "SUB", "MUL")  # no left shifts
    flat = fast and op.kind in ("ADD", "SUB") and sa == sb == out_shape  # the rescales inline, one flat loop
    neon = flat and int(np.prod(out_shape)) % 4 == 0 and _neon_target()
    va, vb = _scaled(op.kind, a, b, c, zs, fast, neon=neon)
    fa, fb = _bcast(va, sa, len(out_shape)), _bcast(vb, sb, len(out_shape))
    act = ref.op_act(g, op)
    out = te.compute(out_shape, lambda *i: _binary_value(op.kind, fa(i), fb(i), c, zs, act, fast, neon), name="out")
    if flat:  # 16 lanes a step; on NEON as 4 int32x4 vectors (sqrdmulh / srshl take whole int32x4 only)
        return done_elementwise([a, b, c, out], name, [row], out_shape, inline=(va, vb), vec=4 if neon else 16)
    return _done([a, b, c, out], name, [row], out_shape)


def _const_table(g: Int8Graph, op: Op):
    """(tensor operand position, table (n, 256)) when one operand is a constant of n <= 1024 broadcast
    positions and the other has the output's shape: out = table[position of the constant, q + 128], the
    numpy reference applied to every (constant, int8 value) pair -- exact, and one load per element."""
    ts = [g.tensors[i] for i in op.inputs[:2]]
    out_shape = tuple(g.tensors[op.outputs[0]].shape)
    for pos in (0, 1):
        x, c = ts[pos], ts[1 - pos]
        if c.data is None or x.data is not None or tuple(x.shape) != out_shape or c.data.size > 1024:
            continue
        col = np.asarray(c.data, np.int8).reshape(-1, 1)
        row = qp.ALL_INT8.astype(np.int8).reshape(1, -1)
        table = ref.binary(g, op, *((row, col) if pos == 0 else (col, row)))
        return pos, np.ascontiguousarray(table, np.int8)
    return None


def const_binary(g: Int8Graph, op: Op, pos: int, table: np.ndarray, *, name: str) -> Kernel:
    """A binary op with a constant operand as a lookup in its (constant position, value) table."""
    out_shape = tuple(g.tensors[op.outputs[0]].shape)
    c_shape = _shape(g, op.inputs[1 - pos])
    pad = (1,) * (len(out_shape) - len(c_shape)) + tuple(c_shape)
    strides = [int(np.prod(pad[d + 1:])) for d in range(len(pad))]
    x = te.placeholder(out_shape, "int8", name="x")
    t = te.placeholder(table.shape, "int8", name="table")

    def f(*i):
        j = sum((i[d] * strides[d] for d in range(len(pad)) if pad[d] != 1), tirx.const(0, "int32"))
        return t[j, x(*i).astype("int32") + 128]

    return _done([x, t, te.compute(out_shape, f, name="out")], name, [table], out_shape)


def swish_table(g: Int8Graph, op: Op):
    """MUL(x, LOGISTIC(x)) -- swish as the TFLite converter writes it (EfficientNet) -- is a function of x
    alone: its 256-entry table, the numpy reference's LOGISTIC then MUL on every int8 value. None unless
    one operand is LOGISTIC's output and the other that LOGISTIC's input."""
    producers = {o: p for p in g.ops for o in p.outputs}
    for pos in (0, 1):
        src = producers.get(op.inputs[1 - pos])
        if src is not None and src.kind == "LOGISTIC" and src.inputs[0] == op.inputs[pos]:
            x = qp.ALL_INT8.astype(np.int8)
            sig = qp.lookup(x, ref.unary_table(g, src))
            return ref.binary(g, op, *((x, sig) if pos == 0 else (sig, x))), op.inputs[pos]
    return None


def resize(g: Int8Graph, op: Op, *, name: str) -> Kernel:
    x_t = g.tensors[op.inputs[0]]
    n, h, w, ch = x_t.shape
    oh, ow = ql.out_hw_of(g.tensors[op.inputs[1]].data)
    kw = {"align_corners": op.opts["align_corners"], "half_pixel_centers": op.opts["half_pixel_centers"]}
    x = te.placeholder(x_t.shape, "int8", name="x")
    if op.kind == "RESIZE_NEAREST_NEIGHBOR":
        tabs = [ql.nearest_index(oh, h, **kw), ql.nearest_index(ow, w, **kw)]
        iy, ix = (te.placeholder((len(t),), "int32", name=nm) for t, nm in zip(tabs, ("iy", "ix")))
        out = te.compute((n, oh, ow, ch), lambda b, y, z, k: x[b, iy[y], ix[z], k], name="out")
        return _done([x, iy, ix, out], name, [t.astype(np.int32) for t in tabs], out.shape)
    tabs = [*ql.bilinear_taps(oh, h, **kw), *ql.bilinear_taps(ow, w, **kw)]
    y0, y1, fy, x0, x1, fx = (te.placeholder((len(t),), "int32", name=nm)
                              for t, nm in zip(tabs, ("y0", "y1", "fy", "x0", "x1", "fx")))
    one = tirx.const(1 << 10, "int32")

    def f(b, y, z, k):
        def v(yy, xx):
            return x[b, yy, xx, k].astype("int32")
        acc = (v(y0[y], x0[z]) * (one - fy[y]) * (one - fx[z]) + v(y1[y], x0[z]) * fy[y] * (one - fx[z])
               + v(y0[y], x1[z]) * (one - fy[y]) * fx[z] + v(y1[y], x1[z]) * fy[y] * fx[z])
        rnd = tirx.Select(acc > 0, tirx.const(1 << 19, "int32"), tirx.const(-(1 << 19), "int32"))
        return tirx.truncdiv(acc + rnd, tirx.const(1 << 20, "int32")).astype("int8")

    out = te.compute((n, oh, ow, ch), f, name="out")
    return _done([x, y0, y1, fy, x0, x1, fx, out], name, [t.astype(np.int32) for t in tabs], out.shape)


def _call(bb, k: Kernel, args, name: str):
    gv = bb.add_func(k.func, name)
    args = list(args) + [relax.const(c) for c in k.consts]
    return bb.emit(relax.call_tir(gv, args, relax.TensorType(k.out_shape, k.out_dtype)))


def _arg(g: Int8Graph, env: dict, i: int):
    return env[i] if i in env else relax.const(np.ascontiguousarray(g.tensors[i].data).reshape(_shape(g, i)))


def _take_slices(bb, x, shape, sl):
    """STRIDED_SLICE as one take per sliced axis (any sign of stride, TF's clamping via slice.indices)."""
    for d, s in enumerate(sl):
        idx = np.arange(*s.indices(shape[d]), dtype=np.int32)
        if len(idx) != shape[d] or np.any(idx != np.arange(shape[d])):
            x = bb.emit(relax.op.take(x, relax.const(idx), axis=d))
    return x


def emit_movement(bb, g: Int8Graph, op: Op, env: dict, *, name: str):
    """SPLIT/SPLIT_V/STRIDED_SLICE/TRANSPOSE/GATHER/PACK: Relax ops on the raw int8 values."""
    k, t_out = op.kind, g.tensors[op.outputs[0]]
    if k in ("SPLIT", "SPLIT_V"):
        axis, sizes = ref.split_spec(g, op)
        x = env[op.inputs[1] if k == "SPLIT" else op.inputs[0]]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        return [bb.emit(relax.op.strided_slice(x, [axis], [int(a)], [int(b)])) for a, b in zip(starts, starts[1:])]
    x = env[op.inputs[0]]
    if k == "STRIDED_SLICE":
        sl, _ = ref.slice_spec(g, op)
        return [bb.emit(relax.op.reshape(_take_slices(bb, x, g.tensors[op.inputs[0]].shape, sl), t_out.shape))]
    if k == "TRANSPOSE":
        return [bb.emit(relax.op.permute_dims(x, [int(v) for v in g.tensors[op.inputs[1]].data]))]
    if k == "GATHER":
        idx = np.asarray(g.tensors[op.inputs[1]].data).astype(np.int32)
        rank = len(g.tensors[op.inputs[0]].shape)
        return [bb.emit(relax.op.take(x, relax.const(idx), axis=op.opts["axis"] % rank))]
    if k == "PACK":
        axis = op.opts["axis"] % len(t_out.shape)
        parts = [bb.emit(relax.op.expand_dims(_arg(g, env, i), [axis])) for i in op.inputs]
        return [bb.emit(relax.op.concat(parts, axis=axis))]
    return None


def emit_binary(bb, g: Int8Graph, op: Op, env: dict, *, name: str):
    """A broadcasting binary op (for ADD: only with a constant or broadcast operand, or the 32-bit fast path)."""
    ins = [g.tensors[i] for i in op.inputs[:2]]
    if op.kind == "ADD" and ins[0].shape == ins[1].shape and all(t.data is None for t in ins) and not (
            FAST_REQUANT and not np.any(_consts(g, op)[0][1::3])):
        return None  # glue.add (int64) when a shift is a left shift
    sw = swish_table(g, op) if op.kind == "MUL" else None
    if sw is not None:  # the LOGISTIC it reads is then dead code (DeadCodeElimination drops it)
        return [_call(bb, table_kernel(g.tensors[sw[1]].shape, sw[0], name=name), [env[sw[1]]], name)]
    tab = _const_table(g, op)
    if tab is not None:
        kern = const_binary(g, op, tab[0], tab[1], name=name)
        return [_call(bb, kern, [env[op.inputs[tab[0]]]], name)]
    return [_call(bb, binary(g, op, name=name), [_arg(g, env, i) for i in op.inputs[:2]], name)]


def emit_unary(bb, g: Int8Graph, op: Op, env: dict, *, name: str):
    """A unary op as the table lookup of its numpy reference's 256 outputs."""
    k_ = table_kernel(g.tensors[op.inputs[0]].shape, ref.unary_table(g, op), name=name)
    return [_call(bb, k_, [env[op.inputs[0]]], name)]


def emit_resize(bb, g: Int8Graph, op: Op, env: dict, *, name: str):
    return [_call(bb, resize(g, op, name=name), [env[op.inputs[0]]], name)]

