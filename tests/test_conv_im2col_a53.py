"""KxK convs as an implicit-im2col GEMM on the A53 assembly tile (ops/conv_im2col_a53.py), on pi3 under
qemu against a float64 numpy conv (compile/choice/families.np_conv). NEON only: the host's direct conv
is unchanged. No speed is asserted."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.compiler.choice.families import np_conv
from edge_sdk.compiler.ops import conv1x1_gemm_a53 as a53
from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops import conv_im2col_a53 as im2col
from edge_sdk.compiler.ops.common import Epilogue, simd_of
from edge_sdk.targets import get_target

sys.path.insert(0, str(Path(__file__).parent))
from test_float_fusions import run_prim_pi3  # noqa: E402

RNG = np.random.default_rng(2026)
# (shape, Cout, kernel, stride, pad, residual, schedule): ResNet18-like 3x3 s2 (OW 7 -> a tail row tile
# of 8, K = 576), TF's asymmetric SAME pad with Cin 8 (K = 72), a stride-1 conv asked for by name (OW 11
# -> 16), a 5x5 s2 (K = 150), and ResNet18's stem shape 7x7 s2 Cin 3 (K = 147: the kernel's odd tail
# step), with zeros and with per-channel border fills (a folded input affine)
CASES = [((1, 14, 14, 64), 40, 3, 2, (1, 1, 1, 1), True, "default"),
         ((1, 16, 16, 8), 16, 3, 2, (0, 0, 1, 1), False, "default"),
         ((1, 9, 11, 12), 24, 3, 1, (1, 1, 1, 1), True, "im2col"),
         ((1, 16, 16, 6), 24, 5, 2, (2, 2, 2, 2), False, "default"),
         ((1, 32, 32, 3), 64, 7, 2, (3, 3, 3, 3), False, "default"),
         ((1, 30, 30, 3), 64, 7, 2, (3, 3, 2, 2, (0.5, -1.0, 2.0)), True, "default")]


@pytest.mark.qemu
@pytest.mark.parametrize("shape,co,kk,stride,pad,residual,schedule", CASES)
def test_im2col_conv_on_pi3_under_qemu(shape, co, kk, stride, pad, residual, schedule):
    simd = simd_of(get_target("pi3").tvm_target())
    x = RNG.standard_normal(shape).astype("float32")
    w = (RNG.standard_normal((kk, kk, shape[3], co)) / np.sqrt(kk * kk * shape[3])).astype("float32")
    b = RNG.standard_normal(co).astype("float32")
    nr = conv_ops.choose_nr(simd, 2, co)
    wp = conv_ops.pack_conv_weight(w, nr)
    cpad = wp.shape[0] * nr
    func = conv_ops.conv2d_direct(shape, (kk, kk), (stride, stride), pad, cpad, simd,
                                  epi=Epilogue(("relu",), residual), name="t_im2col", schedule=schedule)
    assert (a53.NAME_ODD if kk * kk * shape[3] % 2 else a53.NAME) in func.body.script()  # the asm tile runs
    ref = np_conv(x, w, (stride, stride), pad) + b
    rp = np.zeros(ref.shape[:3] + (cpad,), "float32")
    rp[..., :co] = RNG.standard_normal(ref.shape).astype("float32")
    ref = np.maximum(ref + (rp[..., :co] if residual else 0), 0)
    args = [x, wp, conv_ops.pad_bias(b, cpad)] + ([rp] if residual else [])
    out = run_prim_pi3(func, args, rp.shape)[..., :co]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_im2col_rule():
    pi3 = simd_of(get_target("pi3").tvm_target())
    host = simd_of(get_target("host").tvm_target())
    s2 = (2, 2)
    assert im2col.applies(pi3, (1, 56, 56, 64), (3, 3), s2, (1, 1, 1, 1), 8)
    assert im2col.applies(pi3, (1, 14, 14, 256), (3, 3), s2, (1, 1, 1, 1), 8)  # OW 7 -> 8
    assert not im2col.applies(pi3, (1, 224, 224, 3), (3, 3), s2, (1, 1, 1, 1), 8)  # K = 27 < MIN_K
    assert not im2col.applies(pi3, (1, 56, 56, 64), (1, 1), s2, (0, 0, 0, 0), 8)  # 1x1: unit loops
    assert im2col.applies(pi3, (1, 224, 224, 3), (7, 7), s2, (3, 3, 3, 3, (0.5, 1.0, 2.0)), 8)  # K 147, fills
    assert not im2col.applies(pi3, (1, 10, 10, 64), (3, 3), s2, (1, 1, 1, 1), 8)  # OW 5 -> 8: > 25 %
    assert not im2col.applies(host, (1, 56, 56, 64), (3, 3), s2, (1, 1, 1, 1), 16)  # x86: no A64 asm
    direct = conv_ops.conv2d_direct((1, 16, 16, 64), (3, 3), (1, 1), (1, 1, 1, 1), 64, pi3, name="t")
    assert a53.NAME not in direct.body.script()  # stride 1 keeps the direct conv (Winograd's domain)
