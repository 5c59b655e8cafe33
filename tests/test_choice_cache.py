"""compile/choice's price cache and candidates (issue 20): a re-run prices only the candidates whose code changed;
the kernels that became rules (im2col, packed Winograd) keep their alternatives as candidates.

Prices are real qemu-aarch64 runs under libtiming.so, checked against numpy; no speed is asserted.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import s_tir, te

from edge_sdk.compiler.choice import Built, Site, Spec, register_candidates
from edge_sdk.compiler.choice import cache as choice_cache
from edge_sdk.compiler.choice import families as F
from edge_sdk.compiler.choice.chooser import Chooser, NotPriced, code_hashes
from edge_sdk.compiler.ops.common import Epilogue, Simd, finish

N = 2048
OFFERED = ["halves"]  # test.grow's candidates besides the default (a test adds one)


@register_candidates("test.grow")
def _grow(workload: dict) -> list[str]:
    return list(OFFERED)


def _build(schedule: str, name: str, xs) -> Built:
    """y = 2 x: "default" vectorized; "halves" x/2 summed over 4 terms; "scalar" one unvectorized pass."""
    x = te.placeholder((N,), "float32", name="X")
    if schedule == "halves":
        r = te.reduce_axis((0, 4), name="r")
        y = te.compute((N,), lambda i: te.sum(x[i] * 0.5, axis=r), name="Y")
    else:
        y = te.compute((N,), lambda i: x[i] * 2.0, name="Y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    if schedule == "default":
        sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("Y"))[0], [None, 4])[1])
    return Built(finish(sch, name), [xs[0]], Spec((N,), "float32"))


def _site() -> Site:
    return Site("test.grow", {"n": N}, _build, [Spec((N,), "float32")], lambda xs: 2.0 * xs[0].astype(np.float64),
                rtol=1e-6, atol=1e-6, layer="grow0")


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(choice_cache, "root", lambda: tmp_path / "choice")
    return tmp_path / "choice"


@pytest.mark.slow
def test_a_new_candidate_is_the_only_one_priced_again(own_cache):
    from edge_sdk.targets import get_target

    tgt = get_target("pi3")
    first = Chooser(tgt)
    first.choose(_site())
    assert first.stats["priced"] == 2
    OFFERED.append("scalar")
    try:
        second = Chooser(tgt)  # the decision's key moved (a new candidate): only "scalar" runs under qemu
        second.choose(_site())
        assert second.stats["priced"] == 1 and second.stats["price_cached"] == 2
        cands = second.layers["grow0"]["candidates"]
        assert cands["default"]["cycles"] == first.layers["grow0"]["candidates"]["default"]["cycles"]
        assert cands["scalar"]["ok"] and cands["scalar"]["cycles"] != cands["default"]["cycles"]
        shy = Chooser(tgt)  # told not to price: everything it needs is cached now
        shy.price_missing = False
        assert shy.choose(_site()) == second.layers["grow0"]["schedule"] and shy.stats["priced"] == 0
    finally:
        OFFERED.remove("scalar")


def test_a_chooser_told_not_to_price_raises_on_a_missing_price(own_cache):
    from edge_sdk.targets import get_target

    shy = Chooser(get_target("pi3"))
    shy.price_missing = False
    with pytest.raises(NotPriced, match="halves|default"):
        shy.choose(_site())
    assert shy.stats["priced"] == 0


def _conv_site(h=16, c=64, co=64, stride=1):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((3, 3, c, co)) / np.sqrt(9 * c)).astype("float32")
    b = rng.standard_normal(co).astype("float32")
    return F.conv_site(Simd("neon", 4, 32), (1, h, h, c), w, (stride, stride), (1, 1, 1, 1), b,
                       Epilogue(("relu",), residual=True))


def test_im2col_and_planar_winograd_are_candidates_with_their_own_code():
    site = _conv_site()
    names = site.candidates()
    assert {"direct_im2col", "winograd2_planar", "winograd4_planar", "winograd2", "winograd4"} <= set(names)
    hashes = code_hashes(site, names)
    assert not any(h.startswith("error") for h in hashes.values()), hashes
    for a, b in (("winograd2", "winograd2_planar"), ("winograd4", "winograd4_planar"),
                 ("direct_im2col", "direct_pixels_outer")):
        assert hashes[a] != hashes[b], (a, b)
    assert F.conv_plan(Simd("neon", 4, 32), (1, 8, 8, 64), (3, 3), (1, 1), (1, 1, 1, 1), 64,
                       "winograd4_planar") == (4, "planar")
    strided = _conv_site(h=32, stride=2).candidates()  # im2col is the strided rule: still named, no Winograd
    assert "direct_im2col" in strided and not any(n.startswith("winograd") for n in strided)
    x86 = F.conv_site(Simd("avx512", 16, 32), (1, 8, 8, 64), np.zeros((3, 3, 64, 64), "float32"), (1, 1),
                      (1, 1, 1, 1), np.zeros(64, "float32"), Epilogue(("relu",))).candidates()
    assert "direct_im2col" not in x86 and "winograd4_planar" not in x86  # NEON-only kernels


@pytest.mark.slow
def test_new_conv_candidates_price_and_match_numpy():
    from edge_sdk.compiler.choice import standalone
    from edge_sdk.targets import get_target

    site = _conv_site()
    acts = site.random_acts(0)
    ref = site.reference(acts)
    for name in ("direct_im2col", "winograd2_planar", "winograd4_planar"):
        p = standalone.price(site, name, get_target("pi3"), acts, ref=ref)
        assert p.ok and p.cycles > 0, (name, p.reason)
