"""The A53 max pool 3x3 stride 2, padding 0 or 1 a side (ops/maxpool_rows_a53: one forward pass, the
shared input row kept as its column max) on pi3 under qemu, bit-exact against numpy's max over the
-inf-padded window: torch's and TF SAME's padding, even and odd sizes (the clamped last row / column),
fewer output rows than parallel runs, a batch of two, 16 to 64 channels. The host keeps ops/pool.py's
schedule (checked by test_compiler_ops). No speed is asserted."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.compiler.ops import maxpool_rows_a53
from edge_sdk.compiler.ops.common import simd_of
from edge_sdk.compiler.ops.pool import pool2d
from edge_sdk.targets import get_target
from test_float_fusions import run_prim_pi3

PAD = (1, 1, 1, 1)
SAME = (0, 0, 1, 1)  # TF SAME at an even size (the zoo's ResNet18); torch pads (1, 1, 1, 1)
CASES = [((1, 14, 14, 64), PAD), ((1, 9, 7, 32), PAD), ((2, 6, 11, 16), PAD), ((1, 3, 2, 48), PAD),
         ((1, 112, 112, 64), SAME), ((1, 10, 9, 64), SAME), ((1, 7, 8, 16), (1, 0, 0, 1)), ((1, 5, 5, 32), (0, 0, 0, 0))]


def ref_max(x, pad):
    xp = np.pad(x, ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0)), constant_values=-np.inf)
    oh, ow = (xp.shape[1] - 3) // 2 + 1, (xp.shape[2] - 3) // 2 + 1
    return np.stack([xp[:, i:i + 2 * oh:2, j:j + 2 * ow:2] for i in range(3) for j in range(3)]).max(axis=0)


def test_applies_only_to_its_case():
    neon, host = simd_of(get_target("pi3").tvm_target()), simd_of(get_target("host").tvm_target())
    assert maxpool_rows_a53.applies("max", (3, 3), (2, 2), PAD, (1, 112, 112, 64), neon)
    assert not maxpool_rows_a53.applies("max", (3, 3), (2, 2), PAD, (1, 112, 112, 64), host)
    assert not maxpool_rows_a53.applies("avg", (3, 3), (2, 2), PAD, (1, 112, 112, 64), neon)
    assert maxpool_rows_a53.applies("max", (3, 3), (2, 2), SAME, (1, 112, 112, 64), neon)
    assert not maxpool_rows_a53.applies("max", (3, 3), (2, 2), (2, 2, 2, 2), (1, 112, 112, 64), neon)
    assert not maxpool_rows_a53.applies("max", (3, 3), (2, 2), PAD, (1, 112, 112, 12), neon)
    assert not maxpool_rows_a53.applies("max", (3, 3), (2, 2), PAD, (1, 56, 56, 128), neon)


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("shape,pad", CASES)
def test_maxpool_rows_on_pi3_under_qemu_is_exact(shape, pad):
    x = np.random.default_rng(19).standard_normal(shape).astype("float32")
    func = pool2d(shape, "max", (3, 3), (2, 2), pad, simd_of(get_target("pi3").tvm_target()), name="t_maxrows")
    assert "edge_a53_order" in func.script()
    ref = ref_max(x, pad)
    out = run_prim_pi3(func, [x], ref.shape)
    np.testing.assert_array_equal(out, ref)
