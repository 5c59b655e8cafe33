"""The global pool (squeeze-excite's mean, the head's average; ops/pool.py _schedule_global: one pass
over the map per block of up to 64 channels) against numpy on the host and on pi3 under qemu.
Channel counts that are not a multiple of the block (144 -> 48-channel blocks), odd ones (13: scalar
steps), a batch of two, and max as well as mean. No speed is asserted here."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.compiler.ops.common import simd_of
from edge_sdk.compiler.ops.pool import pool2d
from edge_sdk.targets import get_target
from test_float_fusions import run_prim, run_prim_pi3

CASES = [("avg", (1, 7, 5, 144)), ("max", (1, 9, 9, 13)), ("avg", (2, 3, 4, 40)), ("max", (1, 6, 6, 200))]


def ref_global(x, kind):
    x = x.astype("float64")
    return x.mean(axis=(1, 2), keepdims=True) if kind == "avg" else x.max(axis=(1, 2), keepdims=True)


def global_pool(shape, kind, target):
    return pool2d(shape, kind, shape[1:3], (1, 1), (0, 0, 0, 0), simd_of(get_target(target).tvm_target()),
                  name="t_gpool")


@pytest.mark.parametrize("kind,shape", CASES)
def test_global_pool_matches_numpy_on_host(kind, shape):
    x = np.random.default_rng(14).standard_normal(shape).astype("float32")
    out = run_prim(global_pool(shape, kind, "host"), get_target("host"), x, out_shape=(shape[0], 1, 1, shape[3]))
    np.testing.assert_allclose(out, ref_global(x, kind), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("kind,shape", CASES)
def test_global_pool_on_pi3_under_qemu_matches_numpy(kind, shape):
    x = np.random.default_rng(14).standard_normal(shape).astype("float32")
    out = run_prim_pi3(global_pool(shape, kind, "pi3"), [x], (shape[0], 1, 1, shape[3]))
    np.testing.assert_allclose(out, ref_global(x, kind), rtol=1e-5, atol=1e-6)
