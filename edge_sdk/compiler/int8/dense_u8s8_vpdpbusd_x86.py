"""int8 fully connected layer on x86 with VNNI: u8 x s8 `vpdpbusd`, 4 inputs x 16 output channels a step.

The plain kernel (kernels.dense_direct) widens to int16 and multiplies per input: 0.094 ms for MobileNetV1's
1024 -> 1000 classifier on this Zen 4 (LiteRT 0.014). Here a row's inputs are x + 128 as u8 (x86_vnni's
offset: the constant -(128 + Z_in) sum_k w goes into the bias), and a chunk of 4 vectors of output channels
keeps 8 accumulators (the reduction split in two halves of the k steps, so 8 independent vpdpbusd chains);
each step broadcasts one dword of 4 inputs and multiplies it with the 4 vectors of the packed weights
(CO/64, K/4, 64, 4), streamed once. Epilogue: LiteRT's single rounding of FULLY_CONNECTED
(quant.int8.requantize_single: (acc * M + 2^(ts - 1)) >> ts, ts = 31 - shift) on even / odd 64-bit lanes
(vpmuldq, vpsravq), + Z_out, clamp. A chunk past the last channel is computed on zero weights and only its
valid channels are stored.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.script import tirx as T

from edge_sdk.compiler.int8.x86_vnni import OFFSET, VPDPBUSD
from edge_sdk.compiler.ops.common import Simd, mark_scheduled, round_up

CHUNK_VECTORS = 4


def applies(simd: Simd) -> bool:
    return simd.vnni in VPDPBUSD


def pack_weight(w_ok: np.ndarray, lanes: int) -> np.ndarray:
    """(CO, K) int8 -> (COpad / cv, Kpad / 4, cv * 4): cv = 4 vectors of channels, K and CO padded with 0."""
    co, k = w_ok.shape
    cv = CHUNK_VECTORS * lanes
    w = np.zeros((round_up(co, cv), round_up(k, 4)), np.int8)
    w[:co, :k] = w_ok
    w = w.reshape(-1, cv, w.shape[1] // 4, 4).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(w).reshape(w.shape[0], w.shape[1], cv * 4)


def padded(v, co: int, lanes: int, dtype=np.int32) -> np.ndarray:
    out = np.zeros(round_up(co, CHUNK_VECTORS * lanes), dtype)
    out[:co] = v
    return out


def _single_rounding(acc, m, ts, lanes: int):
    """int32xlanes (acc * m + 2^(ts - 1)) >> ts, the product in 64 bits: even lanes as the qwords' low halves,
    odd lanes as their high halves (vpmuldq reads the low dword of each qword)."""
    q = f"int64x{lanes // 2}"

    def b64(v: int):
        return tirx.Broadcast(tirx.const(v, "int64"), lanes // 2)

    xq, mq, tq = (tirx.reinterpret(q, v) for v in (acc, m, ts))
    lo32 = b64(0xFFFFFFFF)
    t_even, t_odd = tq & lo32, tq >> b64(32)
    even = ((xq << b64(32)) >> b64(32)) * ((mq << b64(32)) >> b64(32)) + (b64(1) << (t_even - b64(1)))
    odd = (xq >> b64(32)) * (mq >> b64(32)) + (b64(1) << (t_odd - b64(1)))
    merged = ((even >> t_even) & lo32) | ((odd >> t_odd) << b64(32))
    return tirx.reinterpret(f"int32x{lanes}", merged)


def dense_u8s8(batch: int, w_ok: np.ndarray, rq, *, simd: Simd, name: str):
    """PrimFunc (x (batch, K) int8, w packed (pack_weight), bias, mult, total shift (padded() each, int32),
    out (batch, CO) int8). The bias must include -(128 + Z_in) * sum_k w; total shift = 31 - shift."""
    co, k = (int(d) for d in w_ok.shape)
    lanes = simd.vnni
    cv = CHUNK_VECTORS * lanes
    chunks, ksteps = round_up(co, cv) // cv, round_up(k, 4) // 4
    half = ksteps // 2
    kp = ksteps * 4
    dp = VPDPBUSD[lanes][1]
    v32, vb = f"int32x{lanes}", 4 * lanes
    lo, hi = rq.act
    full = co // cv  # chunks whose channels are all valid: one vector store
    tail = co - full * cv

    def step(acc, xu, wp, b, ch, kk, j):
        a = T.reinterpret(f"uint8x{vb}", T.broadcast(T.reinterpret("int32", xu[b, T.ramp(kk * 4, 1, 4)]), lanes))
        return T.call_llvm_pure_intrin(v32, dp, acc, a, wp[ch, kk, T.ramp(j * vb, 1, vb)])

    def finish_vec(a0, a1, mult, tsh, ch, j):
        c0 = ch * cv + j * lanes
        y = _single_rounding(a0 + a1, mult[T.ramp(c0, 1, lanes)], tsh[T.ramp(c0, 1, lanes)], lanes)
        y = y + T.broadcast(T.int32(rq.out_zp), lanes)
        y = tirx.max(tirx.min(y, T.broadcast(T.int32(hi), lanes)), T.broadcast(T.int32(lo), lanes))
        return T.Cast(f"int8x{lanes}", y)

    flip = tirx.const(OFFSET, "uint8")

    @T.prim_func(private=True)
    def fc(xh: T.handle, wh: T.handle, bh: T.handle, mh: T.handle, th: T.handle, oh: T.handle):
        x = T.match_buffer(xh, (batch, k), "int8")
        wp = T.match_buffer(wh, (chunks, ksteps, cv * 4), "int8")
        bias = T.match_buffer(bh, (chunks * cv,), "int32")
        mult = T.match_buffer(mh, (chunks * cv,), "int32")
        tsh = T.match_buffer(th, (chunks * cv,), "int32")
        out = T.match_buffer(oh, (batch, co), "int8")
        xu = T.decl_buffer((batch, kp), "uint8")
        res = T.decl_buffer((cv,), "int8")
        acc = T.decl_buffer((2 * CHUNK_VECTORS * lanes,), "int32")
        for b, i in T.grid(batch, kp):
            xu[b, i] = T.if_then_else(i < k, T.reinterpret("uint8", x[b, T.min(i, k - 1)]) ^ flip, T.uint8(0))
        for b, ch in T.grid(batch, chunks):
            for j in T.unroll(CHUNK_VECTORS):
                acc[T.ramp(j * lanes, 1, lanes)] = bias[T.ramp(ch * cv + j * lanes, 1, lanes)]
                acc[T.ramp((CHUNK_VECTORS + j) * lanes, 1, lanes)] = T.broadcast(T.int32(0), lanes)
            for kk in T.serial(half):
                for j in T.unroll(CHUNK_VECTORS):
                    acc[T.ramp(j * lanes, 1, lanes)] = step(acc[T.ramp(j * lanes, 1, lanes)], xu, wp, b, ch, kk, j)
                    acc[T.ramp((CHUNK_VECTORS + j) * lanes, 1, lanes)] = step(
                        acc[T.ramp((CHUNK_VECTORS + j) * lanes, 1, lanes)], xu, wp, b, ch, kk + half, j)
            for kk in T.serial(ksteps - 2 * half):  # an odd count of k steps: the last one
                for j in T.unroll(CHUNK_VECTORS):
                    acc[T.ramp(j * lanes, 1, lanes)] = step(acc[T.ramp(j * lanes, 1, lanes)], xu, wp, b, ch,
                                                            2 * half + kk, j)
            for j in T.unroll(CHUNK_VECTORS):
                res[T.ramp(j * lanes, 1, lanes)] = finish_vec(
                    acc[T.ramp(j * lanes, 1, lanes)], acc[T.ramp((CHUNK_VECTORS + j) * lanes, 1, lanes)],
                    mult, tsh, ch, j)
            if ch < full:
                out[b, T.ramp(ch * cv, 1, cv)] = res[T.ramp(0, 1, cv)]
            else:
                for i in T.serial(tail):
                    out[b, ch * cv + i] = res[i]

    return mark_scheduled(fc, name)
