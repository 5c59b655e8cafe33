"""The dashboard's per-layer chart, Pi roofline and accuracy chart (issue 24 items 2 and 4), in real Chromium.

- The reduced demo (tests/conftest.py reduced_demo, shared) stores every emulated-Pi package's per-layer
  modelled split (timing/per_layer.py); its dashboard draws, for the emulated Pi, one modelled bar per
  variant (float32, int8, w1a2 and the fused-glue ablation w1a2-unfused) cut into the package's layers
  with conv and glue parts plus the named rest, and a roofline of filled points at the modelled attained
  GFLOP/s. Read back from the rendered page: marks, their fill, their split.
- The accuracy chart marks each point's device and target (shape by where its ms come from, label text),
  and no two labels overlap each other or any point: the boxes Chromium lays out, read with getBBox.
No speed is asserted.
"""
from __future__ import annotations

import json
import sys
from itertools import combinations
from pathlib import Path

import pytest

from edge_sdk.dashboard import export_html
from edge_sdk.results.store import ResultsStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

MARKS_JS = "JSON.stringify([...document.querySelectorAll('[data-chart]')].map(e => ({...e.dataset, " \
           "fill: e.getAttribute('fill'), tagName: e.tagName, parts: [...e.querySelectorAll('rect')].map(r => r.dataset.part)})))"
BOXES_JS = """JSON.stringify({
  labels: [...document.querySelectorAll('#accuracy text.point-label')].map(t => {
    const b = t.getBBox(); return {for: t.dataset.labelFor, text: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height}; }),
  points: [...document.querySelectorAll('#accuracy [data-chart=accuracy]')].map(p => {
    const b = p.getBBox(); return {run: p.dataset.runId, basis: p.dataset.basis, tag: p.tagName,
      x: b.x, y: b.y, w: b.width, h: b.height}; })})"""


@pytest.fixture(scope="module")
def chromium_ok():
    from cdp import chromium_binary

    if chromium_binary() is None:
        pytest.skip("needs chromium (apt-get install chromium); tools/setup.sh installs it")


def _render(html: Path, tmp: Path, js: str):
    from cdp import Chromium

    with Chromium(tmp / "profile", offline=True) as browser:
        assert browser.load(html.as_uri()) == "1"
        got = json.loads(browser.evaluate(js))
        errors = browser.errors()
    assert errors == []
    return got


@pytest.mark.qemu
@pytest.mark.slow
def test_demo_dashboard_draws_the_pis_modelled_layers_and_a_filled_roofline(reduced_demo, chromium_ok, tmp_path):
    from edge_sdk.package import read_manifest

    assert reduced_demo.rc == 0, reduced_demo.out + reduced_demo.err[-3000:]
    marks = _render(reduced_demo.html, tmp_path, MARKS_JS)
    modelled = {int(m["runId"]): float(m["ms"]) for m in marks if m["chart"] == "latency" and m["basis"] == "modelled"}
    pi_layers = [m for m in marks if m["chart"] == "layer" and m["device"] == "pi1"]
    variants = {m["variant"] for m in pi_layers}
    assert {"float32", "w1a2", "w1a2-unfused"} <= variants <= {"float32", "int8", "w1a2", "w1a2-unfused"}
    for v in variants:
        segs = [m for m in pi_layers if m["variant"] == v]
        assert {m["split"] for m in segs} == {"modelled"}
        [pkg] = [p for p in reduced_demo.pkgs.glob(f"{segs[0]['model']}-{v}-pi3-*.edgepkg")
                 if read_manifest(p)["variant"] == v]
        table = read_manifest(pkg)["layers"]
        drawn = [m["layer"] for m in segs if m["kind"] != "outside"]
        if any(r.get("kernels") for r in table):  # the model file's layer names, as the host profile names them
            assert drawn == [r["name"] for r in table if r.get("kernels")]
        else:  # the int8 table lists no kernels: its rows join by index (timing/per_layer.py); every conv is one
            assert drawn == [r["name"] for r in table if r["name"] in drawn]
            assert {r["name"] for r in table if "conv" in r["op"]} <= set(drawn)
        assert any(m["kind"] == "outside" and m["parts"] == ["outside"] for m in segs)  # the runtime: a named row
        convs = [m for m in segs if m["kind"] == "conv"]
        assert convs and all(m["parts"][0] == "conv" for m in convs)
        total = sum(float(m["ms"]) for m in segs)
        assert total == pytest.approx(modelled[int(segs[0]["runId"])], rel=0.03)  # the bar is the model's figure
    roof = [m for m in marks if m["chart"] == "roofline" and m["device"] == "pi1"]
    assert {m["variant"] for m in roof} >= variants
    filled = [m for m in roof if m["basis"] == "modelled"]
    assert filled and all(m["measured"] == "true" and m["fill"] not in ("white", None) for m in filled)
    assert all(m["fill"] == "white" for m in roof if m["basis"] == "bound")


def _eval_run(store, *, model, variant, device, target, emulated, ms, acc, modelled=None):
    man = {"model": {"name": model}, "variant": variant, "target": {"name": target, "arch": "aarch64"}, "layers": []}
    run = {"model": model, "variant": variant, "target": target, "threads": 1, "repeats": 5, "emulated": emulated,
           "latency_ms": {k: ms for k in ("median", "min", "max", "p10", "p90")}}
    if modelled is not None:
        run |= {"modelled_ms": modelled, "model_version": "a53-test"}
    store.record_run(run, man, device=device, extra={"source": "eval", "accuracy": acc,
                                                     "package_sha256": f"{model}{variant}{device}".ljust(64, "0")})


def test_accuracy_labels_name_device_and_target_and_never_overlap(chromium_ok, tmp_path):
    """resnet18 float32 and int8 of the digits demo land on one spot (as issue 24 saw); more points crowd it."""
    with ResultsStore(tmp_path / "r.sqlite") as store:
        for variant, modelled, acc in (("float32", 40.0, 0.972), ("int8", 40.4, 0.972), ("w1a2", 12.0, 0.95),
                                       ("w1a2-unfused", 12.3, 0.95)):
            _eval_run(store, model="resnet18", variant=variant, device="pi1", target="pi3", emulated=True,
                      ms=4000.0, acc=acc, modelled=modelled)
        for variant, ms in (("float32", 40.2), ("int8", 41.0)):
            _eval_run(store, model="resnet18", variant=variant, device="loop1", target="host", emulated=False,
                      ms=ms, acc=0.972)
        _eval_run(store, model="resnet18", variant="w1a2", device="pi2", target="pi3", emulated=True, ms=900.0, acc=0.95)
        store.record_run({"model": "resnet18", "variant": "float32", "target": "host", "threads": 1, "repeats": 3,
                          "emulated": False, "latency_ms": {k: 40.0 for k in ("median", "min", "max", "p10", "p90")}},
                         {"model": {"name": "resnet18"}, "variant": "float32", "target": {"name": "host"}, "layers": []},
                         device="loop1", extra={"source": "classify", "package_sha256": "c" * 64})  # a latency run
        html = export_html(store, tmp_path / "dash.html")
    got = _render(html, tmp_path, BOXES_JS)
    labels, points = got["labels"], got["points"]
    assert len(labels) == len(points) == 7
    basis = {p["basis"] for p in points}
    assert basis == {"modelled", "measured", "qemu-wall"}
    assert {p["tag"] for p in points if p["basis"] == "modelled"} == {"path"}  # diamonds: modelled Pi ms
    assert {p["tag"] for p in points if p["basis"] == "measured"} == {"circle"}
    for lab in labels:  # each label names its device and target
        assert any(f"· {d} ({t})" in lab["text"] for d, t in (("pi1", "pi3"), ("loop1", "host"), ("pi2", "pi3")))

    def apart(a, b):
        return a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"] or a["y"] + a["h"] <= b["y"] or \
            b["y"] + b["h"] <= a["y"]

    for a, b in combinations(labels, 2):
        assert apart(a, b), (a, b)
    for lab in labels:
        for p in points:
            assert apart(lab, p), (lab, p)


SPLIT = [{"name": "conv1", "op": "conv2d", "ms": 0.8, "conv_ms": 0.7, "glue_ms": 0.1},
         {"name": "avgpool", "op": "mean", "ms": 0.05, "conv_ms": 0.0, "glue_ms": 0.05},
         {"name": "(TVM runtime: VM calls, allocations)", "op": "outside the layers", "ms": 0.15, "conv_ms": 0.0,
          "glue_ms": 0.15}]


def test_chart_data_draws_an_emulated_runs_modelled_split(tmp_path):
    """An emulated run with a stored split: modelled bars (the rest as kind 'outside'), filled roofline points at
    FLOPs / modelled ms; the same run without it stays hollow and unprofiled; a bad split is refused by name."""
    from edge_sdk.dashboard import chart_data
    from edge_sdk.errors import UsageError
    from test_results import manifest, run_json

    with ResultsStore(tmp_path / "r.sqlite") as store:
        for device, extra in (("pi1", {"per_layer_modelled_ms": SPLIT}), ("pi2", {})):
            store.record_run(run_json(threads=1, modelled_ms=1.0, model_version="a53-test"), manifest(), device=device,
                             extra={"source": "classify", "package_sha256": "d" * 64, **extra})
        with pytest.raises(UsageError, match=r"per_layer_modelled_ms\[0\]"):
            store.record_run(run_json(threads=1), manifest(), device="pi3",
                             extra={"per_layer_modelled_ms": [{"name": "conv1", "ms": -1, "conv_ms": 0, "glue_ms": 0}]})
        data = chart_data(store)
    [bar] = data["layers"]
    assert bar["device"] == "pi1" and bar["modelled"] and bar["ms_is"] == "modelled Pi 3 ms"
    assert [(s["name"], s["kind"], s["split"]) for s in bar["segments"]] == [
        ("conv1", "conv", "modelled"), ("avgpool", "glue", "modelled"), (SPLIT[2]["name"], "outside", "modelled")]
    assert (bar["conv_ms"], bar["glue_ms"], bar["outside_ms"]) == pytest.approx((0.7, 0.15, 0.15))
    assert [r["device"] for r in data["unprofiled"]] == ["pi2"]
    points = {(p["device"], p["layer"]): p for panel in data["roofline"] for p in panel["points"]}
    conv = points[("pi1", "conv1")]
    assert conv["basis"] == "modelled" and conv["measured"] and conv["gflops"] == pytest.approx(13824 / (0.8 * 1e6))
    assert points[("pi2", "conv1")]["basis"] == "bound" and not points[("pi2", "conv1")]["measured"]
