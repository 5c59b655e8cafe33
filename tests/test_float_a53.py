"""Float kernels re-decided for the A53 (issue 13), against numpy in float64, on pi3 under qemu.

GEMMs whose row tiles run inside the weight panels (conv2d._rows_outer False) copy A once into
row-tile panels (mp/mr, K, mr); only the NEON schedule does, so these run on pi3 (our runner under
qemu, Cortex-A53). No speed is asserted.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops.common import Epilogue, simd_of
from edge_sdk.targets import get_target

sys.path.insert(0, str(Path(__file__).parent))
from test_float_fusions import run_prim_pi3  # noqa: E402

RNG = np.random.default_rng(1313)
# (m, k, n, residual): a row tail (37, 61 rows), panels blocked (nb >= 2), weights bigger than A
CASES = [(37, 160, 96, False), (61, 128, 256, True), (49, 96, 512, False)]


@pytest.mark.qemu
@pytest.mark.parametrize("m,k,n,residual", CASES)
def test_packed_rows_gemm_on_pi3_under_qemu(m, k, n, residual):
    simd = simd_of(get_target("pi3").tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    assert not conv_ops._rows_outer((m, k, n, nr), simd)  # the packed path runs
    a = RNG.standard_normal((m, k)).astype("float32")
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    b = RNG.standard_normal(n).astype("float32")
    r = RNG.standard_normal((m, n)).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(("relu",), residual), nr=nr, name="t_a53_gemm")
    rp = np.zeros((m, npad), "float32")
    rp[:, :n] = r
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([rp] if residual else [])
    out = run_prim_pi3(func, args, (m, npad))[:, :n]
    ref = np.maximum(a.astype("float64") @ w + b + (r if residual else 0), 0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
