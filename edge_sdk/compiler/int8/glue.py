"""Integer TE kernels for the ops between the convolutions: add, pools, mean, pad, softmax, logistic,
and the float<->int8 ends (QUANTIZE/DEQUANTIZE of float-I/O models, the only float arithmetic).

These move little data next to the convs, so their schedules are simple (parallel outer loop).
Softmax uses TFLite's fixed-point exp through a 256-entry table: for int8 input the exp argument
x - max(x) takes only 256 values, so the table computed by the numpy reference is exact by
construction; the sum, the reciprocal (Newton-Raphson, gemmlowp) and the scaling run in-kernel.
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8.kernels import Kernel
from edge_sdk.compiler.ops.common import finish, largest_divisor
from edge_sdk.quant import int8 as q8, int8_nonlinear as qn


def _done(args, name: str, consts, out_shape, out_dtype="int8") -> Kernel:
    sch = s_tir.Schedule(te.create_prim_func(args))
    out = sch.get_sblock(args[-1].op.name)
    loops = sch.get_loops(out)
    if len(loops) >= 2 and int(out_shape[0]) == 1:
        sch.parallel(loops[1])
    return Kernel(finish(sch, name), consts, tuple(int(s) for s in out_shape), out_dtype)


def done_elementwise(args, name: str, consts, out_shape, *, inline: tuple = (), vec: int = 16) -> Kernel:
    """An elementwise kernel as one flat loop: the `inline` stages folded into the output, 16 int8 lanes a
    step (a smaller divisor of the size when 16 does not divide it), as vectors of `vec` lanes (the step's
    rest unrolled), the steps in parallel. The scalar loop nest of _done spent ~24 modelled A53 cycles an
    element on a 32-bit fixed-point ADD."""
    sch = s_tir.Schedule(te.create_prim_func(args))
    for t in inline:
        sch.compute_inline(sch.get_sblock(t.op.name))
    out = sch.get_sblock(args[-1].op.name)
    flat = sch.fuse(*sch.get_loops(out))
    size = int(np.prod(out_shape))
    reps = largest_divisor(size // vec, 16 // vec) if size % vec == 0 else 1
    outer, part, lanes = sch.split(flat, [None, reps, vec if size % vec == 0 else largest_divisor(size, 16)])
    sch.parallel(outer)
    sch.unroll(part)
    sch.vectorize(lanes)
    return Kernel(finish(sch, name), consts, tuple(int(s) for s in out_shape))


def add(shape, p: q8.AddParams, act, *, name: str) -> Kernel:
    a = te.placeholder(shape, "int8", name="a")
    b = te.placeholder(shape, "int8", name="b")

    # Constants travel in a small int32 tensor, not as immediates: with immediates TVM's simplifier
    # spends ~40 s folding the duplicated fixed-point subexpressions. Three stages, one multiply each.
    c = te.placeholder((9,), "int32", name="rq")
    consts = np.array([p.m1, max(p.s1, 0), max(-p.s1, 0), p.m2, max(p.s2, 0), max(-p.s2, 0),
                       p.mo, max(p.so, 0), max(-p.so, 0)], np.int32)
    va = te.compute(shape, lambda *i: fp.mbqm((fp.i64(a(*i)) - fp.i64(p.in1_zp)) << fp.i64(p.left_shift),
                                              c[0], c[1], c[2]).astype("int32"), name="va")
    vb = te.compute(shape, lambda *i: fp.mbqm((fp.i64(b(*i)) - fp.i64(p.in2_zp)) << fp.i64(p.left_shift),
                                              c[3], c[4], c[5]).astype("int32"), name="vb")
    out = te.compute(shape, lambda *i: fp.clamp_int8(fp.mbqm(fp.i64(va(*i)) + fp.i64(vb(*i)), c[6], c[7], c[8])
                                                     + fp.i64(p.out_zp), *act), name="out")
    return _done([a, b, c, out], name, [consts], shape)


def pool(shape, *, kind: str, kh: int, kw: int, stride, padding: str, act, name: str) -> Kernel:
    """AVERAGE_POOL_2D (C-rounded division by the count of valid taps) or MAX_POOL_2D, NHWC int8."""
    n, h, w, c = shape
    oh, ow, (pt, _, pl, _) = q8._pads(shape, kh, kw, stride, (1, 1), padding)
    sh, sw = stride
    x = te.placeholder(shape, "int8", name="x")
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def inside(y, z):
        iy, ix = y * sh + ry - pt, z * sw + rx - pl
        return tirx.all(iy >= 0, iy < h, ix >= 0, ix < w), iy, ix

    def tap(a, y, z, k, fill):
        ok, iy, ix = inside(y, z)
        return tirx.if_then_else(ok, x[a, tirx.max(iy, 0), tirx.max(ix, 0), k].astype("int32"),
                                 tirx.const(fill, "int32"))

    if kind == "MAX_POOL_2D":
        return _max_pool(x, (oh, ow), kh, kw, stride, (pt, pl), act, name)
    cnt = np.zeros((oh, ow), np.int32)
    for y in range(oh):
        for z in range(ow):
            ys = [y * sh + i - pt for i in range(kh)]
            xs = [z * sw + j - pl for j in range(kw)]
            cnt[y, z] = sum(0 <= v < h for v in ys) * sum(0 <= v < w for v in xs)
    ct = te.placeholder((oh, ow), "int32", name="count")
    s = te.compute((n, oh, ow, c), lambda a, y, z, k: te.sum(tap(a, y, z, k, 0), axis=[ry, rx]), name="s")

    def avg(a, y, z, k):
        acc, m = fp.i64(s[a, y, z, k]), fp.i64(ct[y, z])
        num = fp.sel(acc > fp.i64(0), acc + m // fp.i64(2), acc - m // fp.i64(2))
        return fp.clamp_int8(tirx.truncdiv(num, m), *act)

    out = te.compute((n, oh, ow, c), avg, name="out")
    return _done([x, ct, out], name, [cnt], out.shape)


def _max_pool(x, out_hw, kh: int, kw: int, stride, pads, act, name: str) -> Kernel:
    """MAX_POOL_2D in int8 lanes (the max and the activation clamp need no wider type): channels
    vectorized 16 at a time, the taps unrolled (a padding tap reads -128), rows in parallel."""
    n, h, w, c = (int(d) for d in x.shape)
    (oh, ow), (sh, sw), (pt, pl) = out_hw, stride, pads
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def tap(a, y, z, k):
        iy, ix = y * sh + ry - pt, z * sw + rx - pl
        return tirx.if_then_else(tirx.all(iy >= 0, iy < h, ix >= 0, ix < w),
                                 x[a, tirx.max(iy, 0), tirx.max(ix, 0), k], tirx.const(-128, "int8"))

    r = te.compute((n, oh, ow, c), lambda a, y, z, k: te.max(tap(a, y, z, k), axis=[ry, rx]), name="r")
    lo, hi = (tirx.const(v, "int8") for v in act)
    out = te.compute((n, oh, ow, c), lambda *i: tirx.max(tirx.min(r(*i), hi), lo), name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, out]))
    rb, ob = sch.get_sblock("r"), sch.get_sblock("out")
    la, ly, lz, lk = sch.get_loops(ob)
    ko, ki = sch.split(lk, [None, largest_divisor(c, 16)])
    sch.parallel(sch.fuse(la, ly))
    sch.vectorize(ki)
    sch.compute_at(rb, ko)
    vk, vy, vx = sch.get_loops(rb)[-3:]
    sch.reorder(vy, vx, vk)
    sch.vectorize(vk)
    sch.unroll(vy)
    sch.unroll(vx)
    sch.decompose_reduction(rb, vy)
    sch.vectorize(sch.get_loops(sch.get_sblock("r_init"))[-1])
    return Kernel(finish(sch, name), [], (n, oh, ow, c))


def mean(shape, axes, out_shape_keep, *, in_zp, out_zp, in_scale, out_scale, name: str) -> Kernel:
    """MEAN int8 over `axes`, keep_dims layout (callers reshape): sum - Z_in*n, one requantize."""
    n = int(np.prod([shape[a] for a in axes]))
    mult, shift = q8.mean_multiplier(in_scale, out_scale, n)
    x = te.placeholder(shape, "int8", name="x")
    red = {a: te.reduce_axis((0, shape[a]), f"r{a}") for a in axes}
    s = te.compute(out_shape_keep, lambda *i: te.sum(
        x(*[red[d] if d in red else i[d] for d in range(len(shape))]).astype("int32"), axis=list(red.values())),
        name="s")

    def f(*i):
        v = fp.i64(s(*i)) - fp.i64(in_zp * n)
        v = ((v + fp.i64(2 ** 31)) & fp.i64(0xFFFFFFFF)) - fp.i64(2 ** 31)  # static_cast<int32_t>
        return fp.clamp_int8(fp.mbqm(v, mult, max(shift, 0), max(-shift, 0)) + fp.i64(out_zp))

    out = te.compute(out_shape_keep, f, name="out")
    if tuple(axes) != (1, 2) or len(shape) != 4:
        return _done([x, out], name, [], out_shape_keep)
    # the global pool (H, W): pixels outer, channels inner (one contiguous row of C a step, which LLVM vectorizes);
    # per channel over H*W pixels it read with stride C, unvectorized (EfficientNet-B0: 16 M modelled Pi cycles)
    sch = s_tir.Schedule(te.create_prim_func([x, out]))
    blk = sch.get_sblock("s")
    *_, lc, ry, rx = sch.get_loops(blk)
    sch.reorder(ry, rx, lc)
    sch.decompose_reduction(blk, ry)
    return Kernel(finish(sch, name), [], tuple(int(v) for v in out_shape_keep))


def pad(shape, paddings, value: int, *, name: str) -> Kernel:
    pads = [(int(a), int(b)) for a, b in np.asarray(paddings).reshape(-1, 2)]
    out_shape = tuple(d + a + b for d, (a, b) in zip(shape, pads))
    x = te.placeholder(shape, "int8", name="x")

    def f(*i):
        ok = tirx.all(*[tirx.all(i[d] >= a, i[d] < a + shape[d]) for d, (a, _) in enumerate(pads)])
        src = [tirx.min(tirx.max(i[d] - a, 0), shape[d] - 1) for d, (a, _) in enumerate(pads)]
        return tirx.if_then_else(ok, x(*src), tirx.const(value, "int8"))

    return _done([x, te.compute(out_shape, f, name="out")], name, [], out_shape)


def softmax(shape, *, beta: float, in_scale: float, name: str) -> Kernel:
    """reference_ops::Softmax int8 -> int8 over the last axis (output scale 1/256, zero point -128)."""
    mult, left, diff_min = qn.softmax_params(beta, in_scale)
    diff = -np.arange(256, dtype=np.int64)  # index d <-> x - max = -d
    e = qn.exp_on_negative_values(q8.srdhm(diff * (1 << left), mult), 5)
    valid = diff >= diff_min
    e_tab = np.where(valid, e, 0).astype(np.int32)
    acc_tab = np.where(valid, qn.sat_mul_pot(e, -12), 0).astype(np.int32)
    valid_tab = valid.astype(np.int32)
    d = shape[-1]
    x = te.placeholder(shape, "int8", name="x")
    et, at, vt = (te.placeholder((256,), "int32", name=nm) for nm in ("exp", "acc", "valid"))
    lead = len(shape) - 1
    rc = te.reduce_axis((0, d), "rc")
    mx = te.compute(shape[:-1], lambda *i: te.max(x(*i, rc).astype("int32"), axis=[rc]), name="mx")
    rs = te.reduce_axis((0, d), "rs")
    sm = te.compute(shape[:-1], lambda *i: te.sum(at[mx(*i) - x(*i, rs).astype("int32")], axis=[rs]), name="sum")

    # GetReciprocal(sum, 12): one stage per Newton-Raphson step (gemmlowp one_over_one_plus_x_for_x_in_0_1)
    rows = shape[:-1]
    hp1 = te.compute(rows, lambda *i: tirx.clz(sm(*i)), name="hp1")  # sum > 0: clz(int32) == clz(uint32)
    hd = te.compute(rows, lambda *i: ((((fp.i64(sm(*i)) << fp.i64(hp1(*i))) & fp.i64(0xFFFFFFFF)) - fp.i64(1 << 31)
                                       + fp.i64(fp.INT32_MAX) + fp.i64(1)) >> fp.i64(1)).astype("int32"), name="hd")
    x0 = te.compute(rows, lambda *i: (fp.i64(1515870810) + fp.srdhm(hd(*i), -1010580540)).astype("int32"), name="x0")
    xs = [x0]
    def newton(prev):
        return lambda *i: (fp.i64(prev(*i)) + fp.sat_mul_pot(fp.srdhm(
            prev(*i), fp.i64(1 << 29) - fp.srdhm(hd(*i), prev(*i))), 2)).astype("int32")

    for k in range(3):
        xs.append(te.compute(rows, newton(xs[-1]), name=f"x{k + 1}"))
    rt = te.compute(rows, lambda *i: fp.sat_mul_pot(xs[-1](*i), 1).astype("int32"), name="recip")
    xt = te.compute(rows, lambda *i: (fp.i64(12 + 31 - 8) - fp.i64(hp1(*i))).astype("int32"), name="expo")

    def f(*i):
        idx = mx(*i[:lead]) - x(*i).astype("int32")
        v = fp.rounding_divide_by_pot(fp.srdhm(rt(*i[:lead]), et[idx]), xt(*i[:lead])) - fp.i64(128)
        return tirx.if_then_else(vt[idx] > 0, fp.clamp_int8(v), tirx.const(-128, "int8"))

    return _done([x, et, at, vt, te.compute(shape, f, name="out")], name, [e_tab, acc_tab, valid_tab], shape)


def logistic(shape, table: np.ndarray, *, name: str) -> Kernel:
    """out = table[x + 128]: 64 values a step on AVX-512 VBMI (lut.py), else one scalar load each."""
    from edge_sdk.compiler.int8.lut import lut_vbmi

    fast = lut_vbmi(shape, name=name)
    if fast is not None:
        return Kernel(fast, [table.astype(np.int8)], tuple(int(s) for s in shape))
    x = te.placeholder(shape, "int8", name="x")
    t = te.placeholder((256,), "int8", name="table")
    out = te.compute(shape, lambda *i: t[x(*i).astype("int32") + 128], name="out")
    return _done([x, t, out], name, [table.astype(np.int8)], shape)


def requantize(shape, *, in_zp, out_zp, in_scale, out_scale, name: str) -> Kernel:
    """QUANTIZE int8 -> int8 (a rescale between two quantizations)."""
    mult, shift = q8.quantize_multiplier(float(np.float32(in_scale)) / float(np.float32(out_scale)))
    x = te.placeholder(shape, "int8", name="x")
    out = te.compute(shape, lambda *i: fp.clamp_int8(
        fp.mbqm(fp.i64(x(*i)) - fp.i64(in_zp), mult, max(shift, 0), max(-shift, 0)) + fp.i64(out_zp)), name="out")
    return _done([x, out], name, [], shape)


def quantize(shape, *, scale: float, zero_point: int, name: str) -> Kernel:
    """QUANTIZE float32 -> int8: round(x / scale) half away from zero, in float32, as TFLite."""
    x = te.placeholder(shape, "float32", name="x")

    def f(*i):
        r = fp.round_half_away(x(*i) / tirx.const(float(np.float32(scale)), "float32"))
        return fp.clamp_int8(r.astype("int64") + fp.i64(zero_point))

    return _done([x, te.compute(shape, f, name="out")], name, [], shape)


def dequantize(shape, *, scale: float, zero_point: int, name: str) -> Kernel:
    x = te.placeholder(shape, "int8", name="x")
    out = te.compute(shape, lambda *i: tirx.const(float(np.float32(scale)), "float32")
                     * (x(*i).astype("int32") - zero_point).astype("float32"), name="out")
    return _done([x, out], name, [], shape, "float32")
