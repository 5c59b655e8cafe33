"""Integer TE kernels and their schedules: conv2d, depthwise, dense with the requantize fused in.

Each builder returns a Kernel: a scheduled PrimFunc plus the constant arrays it takes after the
activation input(s). Shared scheme (TFLite's): int8 x int8 products widened to int16 (|p| <= 2^14, so
exact), accumulated in int32; the input zero point's cross term is folded into the int32 bias at
compile time (bias' = bias - Z_in * sum(w)) and padding is filled with Z_in, which is the same as
TFLite skipping the padded taps; the epilogue is the fixed-point multiply (per output channel), the
output zero point and the activation clamp, written as int8. On aarch64 LLVM turns the widening
multiply-accumulate into smull/smlal/sadalp (the A53 has no sdot); on x86 into pmaddwd/pmovsx.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from edge_sdk.compiler.int8 import fixedpoint as fp
from edge_sdk.compiler.int8 import (dense_u8s8_vpdpbusd_x86, dwconv, dwconv_u8s8_vpdpbusd_x86, gemm_int8_smull_neon,
                                   gemm_int8_widen16, x86_requant, x86_vnni)
from edge_sdk.compiler.int8 import winograd_int8_f23  # noqa: F401  (registers its int8.gemm8 candidate)
from edge_sdk.compiler.int8 import winograd_int8_f23_blocked  # noqa: F401  (registers its int8.gemm8 candidates)
from edge_sdk.compiler.int8.gemm_int8_widen16 import DENSE, ConvGeom
from edge_sdk.compiler.ops.common import Simd, finish, largest_divisor
from edge_sdk.quant.int8 import Requant, Window


@dataclass
class Kernel:
    func: tvm.tirx.PrimFunc
    consts: list[np.ndarray]
    out_shape: tuple[int, ...]
    out_dtype: str = "int8"


def _requant_consts(rq: Requant) -> list[np.ndarray]:
    shift = np.asarray(rq.shift, np.int64)
    return [np.asarray(rq.multiplier, np.int32), np.maximum(shift, 0).astype(np.int32),
            np.maximum(-shift, 0).astype(np.int32)]


def _epilogue(acc, bias, m, ls, rs, o, rq: Requant):
    v = fp.mbqm(acc + bias[o], m[o], ls[o], rs[o]) + fp.i64(rq.out_zp)
    return fp.clamp_int8(v, rq.act[0], rq.act[1])


def _pad_int8(x, pads, value: int):
    """NHWC pad (top, bottom, left, right) with the input zero point."""
    n, h, w, c = (int(v) for v in x.shape)
    pt, pb, pl, pr = pads
    if not any(pads):
        return x
    return te.compute(
        (n, h + pt + pb, w + pl + pr, c),
        lambda a, y, z, k: tirx.if_then_else(
            tirx.all(y >= pt, y < h + pt, z >= pl, z < w + pl), x[a, y - pt, z - pl, k],
            tirx.const(value, "int8")), name="pad")


def _schedule_tiled(sch, simd: Simd, *, oh: int, ow: int, oc: int, red: int, has_pad: bool):
    """out[n, y, z, o]: parallel over rows, tile (pixels x lanes) with the int32 accumulator local."""
    acc, out = sch.get_sblock("acc"), sch.get_sblock("out")
    la, ly, lz, lo = sch.get_loops(out)
    vec = largest_divisor(oc, 4 * simd.lanes)
    zt = largest_divisor(ow, 4)
    zo, zi = sch.split(lz, [None, zt])
    oo, oi = sch.split(lo, [None, vec])
    sch.reorder(la, ly, zo, oo, zi, oi)
    sch.compute_at(acc, oo)
    sch.set_scope(acc, 0, "local")
    loops = sch.get_loops(acc)[4:]
    n_sp = (zt > 1) + (vec > 1)
    spatial, reds = loops[:n_sp], loops[n_sp:]
    if reds:
        sch.reorder(*reds, *spatial)
    if vec > 1:
        sch.vectorize(spatial[-1])
        sch.vectorize(oi)
    if zt > 1:
        sch.unroll(spatial[0])
    sch.parallel(sch.fuse(la, ly))
    if reds and red > 1:
        sch.decompose_reduction(acc, reds[0])
    if has_pad:
        pa, py, _, _ = sch.get_loops(sch.get_sblock("pad"))
        sch.parallel(sch.fuse(pa, py))


def _folded_bias(bias, w: np.ndarray, in_zp: int, axes) -> np.ndarray:
    """bias - Z_in * sum(w) over the reduction axes: the input zero point's cross term, at compile time."""
    return (0 if bias is None else bias.astype(np.int64)) - in_zp * w.astype(np.int64).sum(axes)


def _gemm_kernel(x_shape, w_hwio: np.ndarray, bias, rq: Requant, *, geom: ConvGeom = DENSE, simd: Simd,
                 name: str) -> Kernel | None:
    """The register-tiled int16/int32 GEMM (gemm_int8_widen16.py) for a conv or dense layer, or None when a channel's
    multiplier needs a left shift (real multiplier >= 1: the 32-bit epilogue assumes none)."""
    shift = np.asarray(rq.shift, np.int64)
    if np.any(shift > 0) or np.any(np.asarray(rq.multiplier, np.int64) <= 0):
        return None
    co = w_hwio.shape[-1]
    b = _folded_bias(bias, w_hwio.reshape(-1, co), rq.in_zp, 0)
    rshift = -shift
    m = x_shape[0] if len(x_shape) == 2 else x_shape[0] * geom.out_hw[0] * geom.out_hw[1]
    if simd.isa == "neon" and geom.out_hw is not None and gemm_int8_smull_neon.fits(w_hwio, m):
        from edge_sdk.compiler.choice import active
        from edge_sdk.compiler.choice.int8 import gemm8_site

        # on a Pi target compile/choice prices the tile's schedules for this layer ("<op index>:" names its row)
        sched = active().choose(gemm8_site(x_shape, w_hwio, bias, b, rq, geom, layer=name.rsplit("_", 1)[-1] + ":"))
        func, wp, npad = gemm_int8_smull_neon.conv_gemm8(x_shape, w_hwio, rq, geom=geom, name=name, schedule=sched)
    elif x86_vnni.applies(simd):  # u8 x s8 vpdpbusd: the u8 offset's term joins the bias
        func, wp, npad = x86_vnni.conv_gemm(x_shape, w_hwio, rq, geom=geom, simd=simd, name=name)
        b = b + x86_vnni.offset_correction(w_hwio)
        rshift = x86_requant.rshift_arg(shift)
    else:
        func, wp, npad = gemm_int8_widen16.conv_gemm(x_shape, w_hwio, rq, geom=geom, simd=simd, name=name)

    def padded(v):
        out = np.zeros(npad, np.int32)
        out[:co] = v
        return out

    return Kernel(func, [wp, padded(b), padded(rq.multiplier), padded(rshift)], (m, npad))


def conv2d(x_shape, w_ohwi: np.ndarray, bias, rq: Requant, win: Window, *, simd: Simd, name: str) -> Kernel:
    """Conv as im2col GEMM (out (N*OH*OW, COpad): the caller reshapes and slices)."""
    co, kh, kw, _ = w_ohwi.shape
    oh, ow, pads = win.place(x_shape, kh, kw)
    geom = ConvGeom(tuple(win.stride), tuple(win.dilation), pads, (oh, ow))
    k = _gemm_kernel(tuple(x_shape), np.ascontiguousarray(w_ohwi.transpose(1, 2, 3, 0)), bias, rq, geom=geom,
                     simd=simd, name=name)
    return k if k is not None else conv2d_direct(x_shape, w_ohwi, bias, rq, win, simd=simd, name=name)


def conv2d_direct(x_shape, w_ohwi: np.ndarray, bias, rq: Requant, win: Window, *, simd: Simd, name: str) -> Kernel:
    """The int64-epilogue direct conv: any requantize shift (the GEMM path's fallback)."""
    n, h, w, ci = x_shape
    co, kh, kw, _ = w_ohwi.shape
    oh, ow, pads = win.place(x_shape, kh, kw)
    w_hwio = np.ascontiguousarray(w_ohwi.transpose(1, 2, 3, 0))
    b = _folded_bias(bias, w_ohwi.reshape(co, -1), rq.in_zp, 1)
    x = te.placeholder((n, h, w, ci), "int8", name="x")
    wt = te.placeholder(w_hwio.shape, "int8", name="w")
    bt = te.placeholder((co,), "int32", name="bias")
    m, ls, rs = (te.placeholder((co,), "int32", name=nm) for nm in ("mult", "lshift", "rshift"))
    xp = _pad_int8(x, pads, rq.in_zp)
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, ci), "rc")
    (sh, sw), (dh, dw) = win.stride, win.dilation
    acc = te.compute((n, oh, ow, co), lambda a, y, z, o: te.sum(
        (xp[a, y * sh + ry * dh, z * sw + rx * dw, rc].astype("int16")
         * wt[ry, rx, rc, o].astype("int16")).astype("int32"), axis=[ry, rx, rc]), name="acc")
    out = te.compute((n, oh, ow, co), lambda a, y, z, o: _epilogue(acc[a, y, z, o], bt, m, ls, rs, o, rq), name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, m, ls, rs, out]))
    _schedule_tiled(sch, simd, oh=oh, ow=ow, oc=co, red=kh * kw * ci, has_pad=any(pads))
    return Kernel(finish(sch, name), [w_hwio, b.astype(np.int32), *_requant_consts(rq)], (n, oh, ow, co))


def depthwise(x_shape, w_1hwc: np.ndarray, bias, rq: Requant, win: Window, *, depth_multiplier: int, simd: Simd,
              name: str) -> Kernel:
    """Depthwise with the 32-bit epilogue (dwconv.py), else the int64-epilogue loop nest."""
    shift = np.asarray(rq.shift, np.int64)
    if np.any(shift > 0) or np.any(np.asarray(rq.multiplier, np.int64) <= 0):
        return depthwise_direct(x_shape, w_1hwc, bias, rq, win, depth_multiplier=depth_multiplier, simd=simd,
                                name=name)
    _, kh, kw, co = w_1hwc.shape
    oh, ow, pads = win.place(x_shape, kh, kw)
    w_hwc = np.ascontiguousarray(w_1hwc[0])
    b = _folded_bias(bias, w_hwc, rq.in_zp, (0, 1))
    geom = ConvGeom(tuple(win.stride), (1, 1), pads, (oh, ow))
    if dwconv_u8s8_vpdpbusd_x86.applies(simd, channels=co, depth_multiplier=depth_multiplier, dilation=win.dilation):
        dwx = dwconv_u8s8_vpdpbusd_x86
        func = dwx.depthwise_u8s8(tuple(x_shape), w_hwc, rq, geom=geom, simd=simd, name=name)
        lanes = simd.vnni
        order = dwx.channel_order(co, lanes)
        b = b + dwx.offset_correction(w_hwc)
        return Kernel(func, [dwx.pack_weight(w_hwc, lanes), b.astype(np.int32)[order],
                             np.asarray(rq.multiplier, np.int32)[order], x86_requant.rshift_arg(shift)[order]],
                      (x_shape[0], oh, ow, co))
    func = dwconv.depthwise_i8(tuple(x_shape), w_hwc, rq, geom=geom,
                               depth_multiplier=depth_multiplier, simd=simd, name=name)
    return Kernel(func, [w_hwc, b.astype(np.int32), np.asarray(rq.multiplier, np.int32), (-shift).astype(np.int32)],
                  (x_shape[0], oh, ow, co))


def depthwise_direct(x_shape, w_1hwc: np.ndarray, bias, rq: Requant, win: Window, *, depth_multiplier: int,
                     simd: Simd, name: str) -> Kernel:
    n, h, w, ci = x_shape
    _, kh, kw, co = w_1hwc.shape
    dm = depth_multiplier
    oh, ow, pads = win.place(x_shape, kh, kw)
    w_hwc = np.ascontiguousarray(w_1hwc[0])
    b = _folded_bias(bias, w_hwc, rq.in_zp, (0, 1))
    x = te.placeholder((n, h, w, ci), "int8", name="x")
    wt = te.placeholder(w_hwc.shape, "int8", name="w")
    bt = te.placeholder((co,), "int32", name="bias")
    m, ls, rs = (te.placeholder((co,), "int32", name=nm) for nm in ("mult", "lshift", "rshift"))
    xp = _pad_int8(x, pads, rq.in_zp)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    sh, sw = win.stride
    acc = te.compute((n, oh, ow, co), lambda a, y, z, o: te.sum(
        (xp[a, y * sh + ry, z * sw + rx, o // dm if dm > 1 else o].astype("int16")
         * wt[ry, rx, o].astype("int16")).astype("int32"), axis=[ry, rx]), name="acc")
    out = te.compute((n, oh, ow, co), lambda a, y, z, o: _epilogue(acc[a, y, z, o], bt, m, ls, rs, o, rq), name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, m, ls, rs, out]))
    _schedule_tiled(sch, simd, oh=oh, ow=ow, oc=co, red=kh * kw, has_pad=any(pads))
    return Kernel(finish(sch, name), [w_hwc, b.astype(np.int32), *_requant_consts(rq)], (n, oh, ow, co))


def dense(batch: int, w_ok: np.ndarray, bias, rq: Requant, *, simd: Simd, name: str) -> Kernel:
    """Fully connected with LiteRT's single-rounding requantize (quant.int8.requantize_single; the GEMM's
    epilogue rounds twice, as convolutions do): vpdpbusd on a VNNI target, else the loop nest."""
    shift = np.asarray(rq.shift, np.int64)
    if dense_u8s8_vpdpbusd_x86.applies(simd) and np.all(shift <= 30):
        dx, lanes = dense_u8s8_vpdpbusd_x86, simd.vnni
        b = _folded_bias(bias, w_ok, rq.in_zp, 1) + x86_vnni.offset_correction(w_ok.T)
        return Kernel(dx.dense_u8s8(batch, w_ok, rq, simd=simd, name=name),
                      [dx.pack_weight(w_ok, lanes), dx.padded(b, w_ok.shape[0], lanes),
                       dx.padded(rq.multiplier, w_ok.shape[0], lanes), dx.padded(31 - shift, w_ok.shape[0], lanes)],
                      (batch, w_ok.shape[0]))
    return dense_direct(batch, w_ok, bias, rq, simd=simd, name=name)


def dense_direct(batch: int, w_ok: np.ndarray, bias, rq: Requant, *, simd: Simd, name: str) -> Kernel:
    co, k = w_ok.shape
    vec = largest_divisor(co, 4 * simd.lanes)
    # (CO/vec, K, vec): each channel tile's weights are one contiguous stream (a (K, CO) matrix read a
    # vec-wide column at a time touched a new cache line per k: 1280 x 1000 missed the L2 on every row)
    w_p = np.ascontiguousarray(w_ok.T.reshape(k, co // vec, vec).transpose(1, 0, 2))
    b = _folded_bias(bias, w_ok, rq.in_zp, 1)
    x = te.placeholder((batch, k), "int8", name="x")
    wt = te.placeholder(w_p.shape, "int8", name="w")
    bt = te.placeholder((co,), "int32", name="bias")
    m, ts = (te.placeholder((co,), "int32", name=nm) for nm in ("mult", "total_shift"))
    rk = te.reduce_axis((0, k), "rk")
    acc = te.compute((batch, co), lambda a, o: te.sum(
        (x[a, rk].astype("int16") * wt[o // vec, rk, o % vec].astype("int16")).astype("int32"), axis=[rk]),
        name="acc")

    def single(a, o):  # (acc * M + 2^(ts - 1)) >> ts, ts = 31 - shift
        v = fp.i64(acc[a, o] + bt[o]) * fp.i64(m[o]) + (fp.i64(1) << (fp.i64(ts[o]) - fp.i64(1)))
        return fp.clamp_int8((v >> fp.i64(ts[o])) + fp.i64(rq.out_zp), rq.act[0], rq.act[1])

    out = te.compute((batch, co), single, name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, bt, m, ts, out]))
    acc_b, out_b = sch.get_sblock("acc"), sch.get_sblock("out")
    la, lo = sch.get_loops(out_b)
    oo, oi = sch.split(lo, [None, vec])
    sch.compute_at(acc_b, oo)
    sch.set_scope(acc_b, 0, "local")
    inner = sch.get_loops(acc_b)[2:]
    lk = inner[-1]
    if vec > 1:
        lv = inner[0]
        sch.reorder(lk, lv)
        sch.vectorize(lv)
        sch.vectorize(oi)
    sch.decompose_reduction(acc_b, lk)
    total = (31 - np.asarray(rq.shift, np.int64)).astype(np.int32)
    return Kernel(finish(sch, name), [w_p, b.astype(np.int32), np.asarray(rq.multiplier, np.int32), total],
                  (batch, co))
