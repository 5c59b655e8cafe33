"""The epilogue activations (ops/activation.py) as the pi3 kernels run them: NEON vectors (4 lanes), the
divide-free sigmoid (Newton reciprocal), the magic-bias exp and hard-swish as clip(x/6 + 1/2), under qemu-aarch64 -cpu cortex-a53,
against numpy in float64 over the whole range the clamps cover. No speed is asserted here."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import s_tir, te

from edge_sdk.compiler.ops.activation import activate, exp_approx
from test_float_fusions import np_act, run_prim_pi3

XS = np.concatenate([np.linspace(-100, 100, 4001), [-87.5, -80.5, -3, 3, 0, -1e-3, 1e-3, 88.5],
                     np.random.default_rng(14).standard_normal(1019) * 6]).astype("float32")


def vector_func(fn, n: int, name: str):
    """y[i] = fn(x[i]) over n floats, the loop split by 4 and vectorized (NEON's float32x4)."""
    x = te.placeholder((n,), "float32", name="X")
    y = te.compute((n,), lambda i: fn(x[i]), name="Y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]).with_attr("global_symbol", name))
    (loop,) = sch.get_loops(sch.get_sblock("Y"))
    _, inner = sch.split(loop, [None, 4])
    sch.vectorize(inner)
    return sch.mod["main"].with_attr("global_symbol", name)


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("act", [("sigmoid",), ("swish",), ("hswish",)])
def test_neon_activations_on_pi3_under_qemu_match_numpy(act):
    xs = XS[: len(XS) // 4 * 4]
    out = run_prim_pi3(vector_func(lambda v: activate(v, act, "neon"), len(xs), "t_act_pi3"), [xs], xs.shape)
    np.testing.assert_allclose(out, np_act(xs, act), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.qemu
def test_exp_on_pi3_under_qemu_is_within_a_few_ulp():
    xs = np.concatenate([np.linspace(-87, 88, 20000), XS[-1019:-3]]).astype("float32")
    out = run_prim_pi3(vector_func(exp_approx, len(xs), "t_exp_pi3"), [xs], xs.shape)
    ref = np.exp(xs.astype("float64"))
    assert float(np.max(np.abs(out - ref) / ref)) < 1e-6
