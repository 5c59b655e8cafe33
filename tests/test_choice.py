"""compile/choice: each layer's candidate schedules priced on the modelled A53 clock (issue 20 items 1, 4).

Every price here is a real qemu-aarch64 run of the candidate under libtiming.so and the A53 timing model;
outputs are checked against numpy. No speed is asserted: only that candidates that do different work are
priced differently, that the cheaper correct one is kept, and that a wrong one never is.
"""
from __future__ import annotations

import json
from pathlib import Path
import warnings

import numpy as np
import pytest
from tvm import s_tir, te

from edge_sdk.compiler import choice
from edge_sdk.compiler.choice import Built, Site, Spec, register_candidates
from edge_sdk.compiler.choice import cache as choice_cache
from edge_sdk.compiler.choice.chooser import ChoiceWarning, Chooser, code_hashes
from edge_sdk.compiler.ops.common import finish

DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow
N = 4096


@register_candidates("test.double")
def _double_candidates(workload: dict) -> list[str]:
    return ["four_passes", "wrong_triple"]


def _double(schedule: str, name: str, xs) -> Built:
    """y = 2 x over N floats: "default" one vectorized pass; "four_passes" the same sum as four quarter
    terms (4x the loads and adds, same result); "wrong_triple" one vectorized pass of 3 x (cheapest-looking
    and wrong)."""
    x = te.placeholder((N,), "float32", name="X")
    if schedule == "four_passes":
        r = te.reduce_axis((0, 4), name="r")
        y = te.compute((N,), lambda i: te.sum(x[i] * 0.5, axis=r), name="Y")
    else:
        y = te.compute((N,), lambda i: x[i] * (3.0 if schedule == "wrong_triple" else 2.0), name="Y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    i = sch.get_loops(sch.get_sblock("Y"))[0]
    if schedule != "four_passes":
        sch.vectorize(sch.split(i, [None, 4])[1])
    return Built(finish(sch, name), [xs[0]], Spec((N,), "float32"))


def _site(layer: str = "double0") -> Site:
    return Site("test.double", {"n": N}, _double, [Spec((N,), "float32")],
                lambda xs: 2.0 * xs[0].astype(np.float64), rtol=1e-6, atol=1e-6, layer=layer)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A fresh choice cache (the qemu plugins and the runtime bundle still come from the shared cache)."""
    monkeypatch.setattr(choice_cache, "root", lambda: tmp_path / "choice")
    return tmp_path / "choice"


def test_cheaper_candidate_kept_wrong_one_never(own_cache):
    from edge_sdk.targets import get_target

    site = _site()
    assert site.candidates() == ["default", "four_passes", "wrong_triple"]
    ch = Chooser(get_target("pi3"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChoiceWarning)
        assert ch.choose(site) == "default"
    got = ch.layers["double0"]
    cands = got["candidates"]
    assert cands["default"]["ok"] and cands["four_passes"]["ok"]
    assert cands["four_passes"]["cycles"] > cands["default"]["cycles"]  # 4x the work, priced so
    assert not cands["wrong_triple"]["ok"] and "reference" in cands["wrong_triple"]["reason"]
    assert got["modelled_cycles"] == cands["default"]["cycles"]
    assert ch.stats["priced"] == 3


def test_cache_hit_and_a_stale_winner_is_skipped_with_a_warning(own_cache):
    from edge_sdk.targets import get_target

    tgt = get_target("pi3")
    first = Chooser(tgt)
    first.choose(_site())
    second = Chooser(tgt)
    assert second.choose(_site()) == "default"
    assert second.stats == {**second.stats, "priced": 0, "cached": 1}
    assert second.layers["double0"]["cached"] is True
    # a recorded winner that no longer builds: skipped with a warning, chosen again, never a failure
    key = choice_cache.key(_site(), code_hashes(_site(), _site().candidates()), tgt)
    (own_cache / f"{key}.json").write_text(json.dumps({"schedule": "gone_schedule"}))
    third = Chooser(tgt)
    with pytest.warns(ChoiceWarning, match="gone_schedule"):
        assert third.choose(_site()) == "default"
    # chosen again from each candidate's own cached price (same code): nothing runs under qemu again
    assert third.stats["priced"] == 0 and third.stats["price_cached"] == 3
    assert third.layers["double0"]["candidates"]["four_passes"]["cycles"] > \
        third.layers["double0"]["candidates"]["default"]["cycles"]


def test_compile_records_the_choice_and_second_compile_is_cached(own_cache, tmp_path, capsys):
    from edge_sdk.cli import main
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.package import read_manifest
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    model = load_model_file(DATA / "awkward_37x30_float.tflite", family="float")
    kw = dict(variant=get_variant("float32"), target=get_target("pi3"), choose=True)
    m1 = compile_model(model, out=tmp_path / "a.edgepkg", **kw).manifest
    ch = m1["choice"]
    assert ch["enabled"] and ch["workloads"] >= 3 and ch["priced"] >= ch["workloads"] and ch["cached"] == 0
    rows = [r for r in m1["layers"] if "choice" in r]
    assert {r["choice"]["family"] for r in rows} >= {"float.conv", "float.dw", "float.gemm"}
    for r in rows:  # the kept schedule ran, matched numpy, and is the cheapest that did
        c = r["choice"]
        ok = {n: v["cycles"] for n, v in c["candidates"].items() if v.get("ok")}
        if ok:
            assert c["schedule"] in ok and c["modelled_cycles"] == min(ok.values())
    m2 = compile_model(model, out=tmp_path / "b.edgepkg", **kw).manifest
    assert m2["choice"]["priced"] == 0 and m2["choice"]["cached"] == m2["choice"]["workloads"]
    assert [r.get("choice", {}).get("schedule") for r in m2["layers"]] == \
        [r.get("choice", {}).get("schedule") for r in m1["layers"]]
    off = compile_model(model, out=tmp_path / "c.edgepkg", **{**kw, "choose": False}).manifest
    assert off["choice"] == {"enabled": False} and not any("choice" in r for r in off["layers"])
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "a.edgepkg")]) == 0
    text = capsys.readouterr().out
    assert "schedule choice:" in text and "rule Mcyc" in text and "modelled Mcyc" in text
    assert any(r["choice"]["schedule"] in text for r in rows)
    assert read_manifest(tmp_path / "a.edgepkg")["choice"]["timing_model"].startswith("a53-")


def test_default_chooser_outside_a_compile():
    assert choice.active() is choice.DEFAULT_CHOOSER and choice.active().choose(_site()) == "default"
