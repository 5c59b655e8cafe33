"""Modelled Pi time in the results store and the dashboard (issue 12 item 6).

The store keeps a run's modelled_ms / modelled_cycles / model_version (and still opens a file written
before those columns, read-only or read-write); the dashboard draws an emulated Pi's latency as its
modelled Pi ms, its speedups from modelled ms only (an emulated run with only the emulator's wall time
gets no speedup), and each roofline against the peak of the cores its run's threads use. The browser
test loads the exported page in a real headless Chromium, as tests/test_dashboard.py does.
"""
from __future__ import annotations

import csv
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from edge_sdk.dashboard import chart_data, export_html
from edge_sdk.errors import ConfigError, UsageError
from edge_sdk.results.store import ResultsStore
from edge_sdk.targets import get_target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from test_results import manifest, run_json  # noqa: E402

QEMU_WALL = "QEMU wall time (emulator speed, not a Pi)"
# (device, variant, threads, emulated, recorded median ms, modelled ms or None). The emulated Pi's
# wall times have the ratios qemu gives (float NEON emulated slowly), the modelled ones do not.
RUNS = [("pi1", "float32", 1, True, 5491.0, 301.0), ("pi1", "int8", 1, True, 1623.0, 212.5),
        ("pi1", "w1a2", 1, True, 977.0, None),
        ("pi1", "float32", 4, True, 2100.0, 95.0),
        ("loop1", "float32", 1, False, 40.0, None), ("loop1", "int8", 1, False, 16.0, None)]


def _record(store, device, variant, threads, emulated, median, modelled):
    target = "host" if device == "loop1" else "pi3"
    run = run_json(variant=variant, target=target, median=median, threads=threads, emulated=emulated)
    if modelled is not None:
        run |= {"modelled_ms": modelled, "modelled_cycles": modelled * 1.2e6, "model_version": "a53-test"}
    m = manifest(variant, target)
    m["target"] = dict(m["target"], peak_gflops=get_target(target).peak_gflops)  # all of the target's cores
    return store.record_run(run, m, device=device, extra={"source": "classify"})


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as s:
        for r in RUNS:
            _record(s, *r)
    return path


# ------------------------------------------------------------------ the store
def test_modelled_figures_round_trip_and_export(db, tmp_path):
    with ResultsStore(db) as s:
        rows = s.query()
        assert s.export_json(tmp_path / "r.json") == len(RUNS) and s.export_csv(tmp_path / "r.csv") == len(RUNS)
    got = [(r["device"], r["variant"], r["threads"], r["modelled_ms"], r["modelled_cycles"], r["model_version"])
           for r in rows]
    want = [(d, v, t, m, None if m is None else m * 1.2e6, None if m is None else "a53-test")
            for d, v, t, _, _, m in RUNS]
    assert got == want
    assert all("modelled_ms" not in r["extra"] for r in rows)  # a column, not a leftover
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["modelled_ms"] for r in doc["runs"]] == [m for *_, m in RUNS]
    with open(tmp_path / "r.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [float(r["modelled_ms"]) if r["modelled_ms"] else None for r in table] == [m for *_, m in RUNS]
    assert {r["model_version"] for r in table} == {"a53-test", ""}


def test_a_store_from_before_the_columns_opens(tmp_path):
    old = tmp_path / "old.sqlite"
    with ResultsStore(old) as s:
        _record(s, "pi1", "float32", 1, True, 5491.0, None)
    with sqlite3.connect(old) as c:  # what the store wrote before the modelled columns existed
        for col in ("modelled_ms", "modelled_cycles", "model_version"):
            c.execute(f"ALTER TABLE measurements DROP COLUMN {col}")

    def columns() -> set[str]:
        with sqlite3.connect(old) as c:
            return {r[1] for r in c.execute("PRAGMA table_info(measurements)")}

    assert "modelled_ms" not in columns()
    with ResultsStore(old, read_only=True) as s:  # tolerant read: NULL, and the file is not touched
        [row] = s.query()
        assert (row["modelled_ms"], row["model_version"]) == (None, None)
        assert chart_data(s)["latency"][0]["basis"] == "qemu-wall"
    assert "modelled_ms" not in columns()
    with ResultsStore(old) as s:  # read-write: the columns are added, old rows keep NULL, new rows carry figures
        _record(s, "pi1", "int8", 1, True, 1623.0, 212.5)
        assert [r["modelled_ms"] for r in s.query()] == [None, 212.5]
    assert {"modelled_ms", "modelled_cycles", "model_version"} <= columns()


def test_bad_modelled_figures(tmp_path, db):
    with ResultsStore(tmp_path / "x.sqlite") as s:
        for bad in (0, -3.0, "fast", float("inf")):
            with pytest.raises(UsageError, match="modelled_ms"):
                s.record_run(run_json(modelled_ms=bad), manifest(), device="d")
        assert s.query() == []  # nothing half-written
    with sqlite3.connect(db) as c:
        c.execute("UPDATE measurements SET modelled_ms = -1 WHERE id = 1")
    with ResultsStore(db) as s, pytest.raises(ConfigError, match="run 1: modelled_ms is -1"):
        s.query()


# ------------------------------------------------------------------ the dashboard's data
def test_latency_and_speedup_use_modelled_ms_for_the_emulated_pi(db):
    with ResultsStore(db) as s:
        d = chart_data(s)
    lat = {(r["device"], r["variant"], r["threads"]): r for r in d["latency"]}
    for dev, v, t, emulated, median, modelled in RUNS:
        r = lat[(dev, v, t)]
        want = ((modelled, "modelled") if modelled is not None else (median, "qemu-wall")) if emulated else \
            (median, "measured")
        assert (r["ms"], r["basis"]) == want
        assert r["qemu_wall_ms"] == (median if emulated else None)
        if r["basis"] == "modelled":  # the wall-time spread is not drawn around a modelled figure
            assert (r["basis_label"], r["p10_ms"], r["max_ms"]) == ("modelled Pi 3 ms", None, None)
    assert lat[("pi1", "w1a2", 1)]["basis_label"] == QEMU_WALL and d["labels"]["qemu_wall"] == QEMU_WALL

    speed = {(r["device"], r["variant"], r["threads"]): r for r in d["speedup"]}
    assert set(speed) == {("pi1", "int8", 1), ("loop1", "int8", 1)}  # w1a2 on the emulated Pi: wall time only
    assert speed[("pi1", "int8", 1)]["speedup"] == pytest.approx(301.0 / 212.5)
    assert speed[("pi1", "int8", 1)]["speedup"] != pytest.approx(5491.0 / 1623.0)
    assert (speed[("pi1", "int8", 1)]["float_ms"], speed[("pi1", "int8", 1)]["basis_label"]) == (301.0, "modelled Pi 3 ms")
    assert speed[("loop1", "int8", 1)]["speedup"] == pytest.approx(40.0 / 16.0)
    [skipped] = d["speedup_skipped"]
    assert (skipped["device"], skipped["variant"]) == ("pi1", "w1a2") and "w1a2" in skipped["reason"]


def test_roofline_peak_follows_the_thread_count(db):
    with ResultsStore(db) as s:
        d = chart_data(s)
    panels = {(p["device"], p["target"], p["threads"]): p for p in d["roofline"]}
    pi3, host = get_target("pi3"), get_target("host")
    assert set(panels) == {("pi1", "pi3", 1), ("pi1", "pi3", 4), ("loop1", "host", 1)}
    # one A53 core: 4 fp32 lanes x FMA (2 FLOP) per cycle at the clock; four threads: all four cores
    assert panels[("pi1", "pi3", 1)]["peak_gflops"] == pytest.approx(pi3.clock_ghz * 4 * 2)
    assert panels[("pi1", "pi3", 4)]["peak_gflops"] == pytest.approx(pi3.peak_gflops)
    assert panels[("loop1", "host", 1)]["peak_gflops"] == pytest.approx(host.peak_gflops / host.cores)
    for p in panels.values():
        assert p["ridge"] == pytest.approx(p["peak_gflops"] / p["mem_gbps"])
        for pt in p["points"]:
            assert pt["bound_gflops"] == pytest.approx(min(p["peak_gflops"], p["mem_gbps"] * pt["intensity"]))


def test_an_emulated_runs_layer_times_are_labelled_and_never_attained_gflops(tmp_path):
    """Per-layer times of an emulated run are the emulator's: the layer table says so and the roofline
    draws its points at their bound (hollow), while a device's profiled run gets attained GFLOP/s."""
    from test_results import LAYERS

    per_layer = [{"name": lyr["name"], "ms": 7.5} for lyr in LAYERS]
    with ResultsStore(tmp_path / "r.sqlite") as s:
        for device, target, emulated in (("pi1", "pi3", True), ("loop1", "host", False)):
            run = run_json(target=target, emulated=emulated, threads=1, per_layer_ms=per_layer)
            s.record_run(run, manifest("float32", target), device=device)
        d = chart_data(s)
    segs = {r["device"]: r["segments"] for r in d["layers"]}
    assert {x["ms_is"] for x in segs["pi1"]} == {QEMU_WALL}
    assert {x["ms_is"] for x in segs["loop1"]} == {"measured on the device"}
    points = {p["device"]: p["points"] for p in d["roofline"]}
    assert points["pi1"] and not any(pt["measured"] for pt in points["pi1"])
    assert all(pt["gflops"] == pt["bound_gflops"] for pt in points["pi1"])
    assert all(pt["measured"] for pt in points["loop1"])
    assert all(pt["gflops"] == pytest.approx(pt["flops"] / 7.5e6) for pt in points["loop1"])


# ------------------------------------------------------------------ the page, in a real headless Chromium
@pytest.fixture(scope="module")
def chromium_ok():
    from cdp import chromium_binary

    if chromium_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("needs chromium (apt-get install chromium); tools/setup.sh installs it")
        pytest.skip("needs chromium (apt-get install chromium); tools/setup.sh installs it")


MARKS_JS = "JSON.stringify([...document.querySelectorAll('[data-chart]')].map(e => ({...e.dataset})))"


def test_page_draws_modelled_ms_and_labels_the_wall_time(chromium_ok, db, tmp_path):
    from cdp import Chromium

    with ResultsStore(db) as s:
        out = export_html(s, tmp_path / "dash.html")
        ids = {(r["device"], r["variant"], r["threads"]): r["run_id"] for r in s.query()}
    with Chromium(tmp_path / "profile", offline=True) as browser:
        assert browser.load(out.as_uri()) == "1"
        marks = json.loads(browser.evaluate(MARKS_JS))
        tips = json.loads(browser.evaluate("JSON.stringify([...document.querySelectorAll('[data-chart=latency]')]"
                                           ".map(e => [e.dataset.runId, e.querySelector('title').textContent]))"))
        text = browser.evaluate("document.getElementById('charts').textContent")  # charts, notes, tables
        errors = browser.errors()
    assert errors == []
    by = {}
    for m in marks:
        by.setdefault(m["chart"], []).append(m)
    drawn = {int(m["runId"]): (float(m["ms"]), m["basis"]) for m in by["latency"]}
    for dev, v, t, emulated, median, modelled in RUNS:
        want = (modelled, "modelled") if emulated and modelled else (median, "qemu-wall" if emulated else "measured")
        assert drawn[ids[(dev, v, t)]] == want
    assert {int(m["runId"]): pytest.approx(float(m["speedup"])) for m in by["speedup"]} == {
        ids[("pi1", "int8", 1)]: 301.0 / 212.5, ids[("loop1", "int8", 1)]: 40.0 / 16.0}
    roofs = {(m["device"], int(m["threads"])): float(m["peakGflops"]) for m in by["roof"]}
    assert roofs[("pi1", 1)] == pytest.approx(get_target("pi3").peak_gflops / 4)
    assert roofs[("pi1", 4)] == pytest.approx(get_target("pi3").peak_gflops)
    tip = dict(tips)[str(ids[("pi1", "int8", 1)])]
    assert "212.5 modelled Pi 3 ms" in tip and f"{QEMU_WALL}: 1623 ms" in tip
    assert "modelled Pi 3 ms" in text and QEMU_WALL in text and "1 of 4 cores" in text
    assert "No speedup for: tiny w1a2 on pi1 (pi3, 1 thread, emulated): no modelled Pi time for w1a2" in text
