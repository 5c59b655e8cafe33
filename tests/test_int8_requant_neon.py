"""The NEON requantize (fixedpoint.mbqm32_neon: sqrdmulh, the negative-value fixup, srshl) in the pi3 int8
kernels that use it, the 8-bit GEMM's epilogue and the depthwise one, under qemu against the numpy int8
reference (quant/int8.py, itself checked against TFLite BUILTIN_REF): every right shift 0..31, accumulators
of both signs, rounding ties, channel counts whose vector step is 8 and 16 lanes (split into int32x4)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from test_int8_gemm_smull_neon import _run_pi3


def _rq(rng, co, *, ties: bool):
    from edge_sdk.quant import int8 as q8

    shift = -(np.arange(co) % 32)  # right shifts 0..31
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    if ties:
        mult[::2] = 1 << 30  # SRDHM halves exactly: x/2, so odd sums meet a rounding tie at shift 0 and 1
    return q8.Requant(in_zp=int(rng.integers(-128, 128)), multiplier=mult, shift=shift,
                      out_zp=int(rng.integers(-20, 20)), act=(-128, 127))


def _depthwise(i, xs, kk, stride, padding):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8
    from edge_sdk.targets import get_target

    rng = np.random.default_rng(300 + i)
    c = xs[-1]
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, (1, kk, kk, c)).astype(np.int8)
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    rq, win = _rq(rng, c, ties=i % 2 == 0), q8.Window(stride, (1, 1), padding)
    k = kernels.depthwise(xs, w, bias, rq, win, depth_multiplier=1, simd=simd_of(get_target("pi3").tvm_target()),
                          name="k")
    return x, k, q8.depthwise_conv2d(x, w, bias, rq, win)


def _gemm(i, xs, co, kk):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8
    from edge_sdk.targets import get_target

    rng = np.random.default_rng(400 + i)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, (co, kk, kk, xs[-1])).astype(np.int8)
    bias = rng.integers(-3000, 3000, co).astype(np.int32)
    rq, win = _rq(rng, co, ties=True), q8.Window((1, 1), (1, 1), "SAME")
    k = kernels.conv2d(xs, w, bias, rq, win, simd=simd_of(get_target("pi3").tvm_target()), name="k")
    return x, k, q8.conv2d(x, w, bias, rq, win)


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
def test_neon_requantize_under_qemu_equals_reference():
    cases = [_depthwise(0, (1, 7, 9, 64), 3, (1, 1), "SAME"), _depthwise(1, (1, 9, 8, 32), 3, (2, 2), "SAME"),
             _depthwise(2, (1, 6, 5, 40), 5, (1, 1), "VALID"), _gemm(3, (1, 6, 7, 16), 64, 1),
             _gemm(4, (1, 5, 4, 8), 36, 3)]
    out = _run_pi3([k for _, k, _ in cases], [x for x, _, _ in cases])
    at = 0
    for n, (_, k, ref) in enumerate(cases):
        size = int(np.prod(k.out_shape))
        got = out[at:at + size].reshape(k.out_shape)
        at += size
        got = got[:, :ref.shape[-1]].reshape(ref.shape) if got.ndim == 2 else got
        np.testing.assert_array_equal(got, ref, err_msg=f"case {n}")
    assert at == out.size
