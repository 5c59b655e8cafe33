"""Fused glue (shift + offset) against the unfused float glue."""
import numpy as np
import pytest

from edge_sdk.errors import ModelError
from edge_sdk.quant import bitserial as bs, glue as g


def _layer(seed, *, out_bits=2, neg_fraction=0.2):
    rng = np.random.default_rng(seed)
    c, o = 48, 40
    a = rng.integers(0, 4, (1, 12, 11, c))
    w, ws = bs.quantize_weights(rng.normal(size=(3, 3, c, o)), bits=1)
    acc = bs.bitserial_conv2d_nhwc(a, w, a_bits=2, w_bits=1, mode="unipolar", padding=1)
    y = acc * ws * 0.5
    gamma = rng.uniform(0.5, 1.5, o) * np.where(rng.random(o) < neg_fraction, -1, 1)
    p = g.GlueParams(weight_scale=ws, in_step=0.5, out_step=0.4, gamma=gamma, beta=rng.normal(size=o) * 0.3,
                     mean=y.mean(axis=(0, 1, 2)), var=y.var(axis=(0, 1, 2)), out_bits=out_bits)
    return a, w, acc, p, c * 9 * 3


@pytest.mark.parametrize("out_bits", [1, 2, 3])
def test_fused_equals_unfused_when_scale_is_power_of_two(out_bits):
    _, _, acc, p, bound = _layer(1, out_bits=out_bits)
    p = g.shiftnorm_params(p)
    diff = g.compare_glue(acc, p, g.derive_fused_glue(p, acc_bound=bound))
    assert diff["max_abs_diff"] == 0, diff


def test_fused_vs_unfused_general_scale_is_bounded():
    """Snapping |M| to a power of two moves codes; measured here: ~13% of 2-bit codes by <= 3."""
    _, _, acc, p, bound = _layer(2)
    glue = g.derive_fused_glue(p, acc_bound=bound)
    m, _ = p.multiplier_and_bias()
    diff = g.compare_glue(acc, p, glue)
    # the documented bound: |acc| * |M - 2^-shift| + 1 codes
    allowed = np.max(np.abs(acc) * np.abs(np.abs(m) - np.exp2(-glue.shift.astype(float)))) + 1
    assert 0 < diff["mismatch_fraction"] < 0.3
    assert diff["max_abs_diff"] <= allowed


def test_negative_gamma_flips_weights_exactly():
    a, w, acc, p, bound = _layer(3, neg_fraction=0.5)
    glue = g.derive_fused_glue(p, acc_bound=bound)
    assert glue.flip.any() and not glue.flip.all()
    w2 = g.flip_weight_codes(w, flip=glue.flip, bits=1)
    acc2 = bs.bitserial_conv2d_nhwc(a, w2, a_bits=2, w_bits=1, mode="unipolar", padding=1)
    np.testing.assert_array_equal(acc2, np.where(glue.flip, -acc, acc))


def test_large_multiplier_uses_left_shift():
    p = g.GlueParams(weight_scale=np.array([8.0]), in_step=1.0, out_step=1.0, gamma=np.array([1.0]),
                     beta=np.array([0.0]), mean=np.array([0.0]), var=np.array([1.0 - 1e-5]), out_bits=3)
    glue = g.derive_fused_glue(p, acc_bound=100)
    assert glue.shift.tolist() == [-3]
    acc = np.arange(-2, 3)[:, None]
    np.testing.assert_array_equal(g.fused_glue(acc, glue), g.unfused_glue(acc, p))


def test_overflow_is_refused():
    p = g.GlueParams(weight_scale=np.array([2.0**15]), in_step=1.0, out_step=1.0, gamma=np.array([1.0]),
                     beta=np.array([0.0]), mean=np.array([0.0]), var=np.array([1.0]), out_bits=2)
    with pytest.raises(ModelError, match="int32"):
        g.derive_fused_glue(p, acc_bound=1 << 20)
