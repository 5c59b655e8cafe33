"""`edge-sdk demo`, reduced (tiny MobileNetV1, 3 frames): compile, emulated Pi + loopback device,
deploy, the classify app on the devices over SSH, results store, dashboard, table; nothing left running.
And the demo's package cache: rebuilt after `edge-sdk tune` writes a record.
"""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import shutil

import pytest



@pytest.mark.qemu
@pytest.mark.slow
def test_reduced_demo_end_to_end(reduced_demo):
    run = reduced_demo
    db, html, out = run.db, run.html, run.out
    assert run.rc == 0, out + run.err[-3000:]
    doc = json.loads(out[out.index('{\n  "latency"'):])
    rows, acc = doc["latency"], doc["accuracy"]
    got = {(r["device"], r["target"], r["variant"]) for r in rows}
    variants = {v for d, _, v in got if d == "loop1"}  # int8 joins when the compiler takes a zoo model in int8
    assert {"float32", "w1a2"} <= variants <= {"float32", "int8", "w1a2"}
    # the emulated Pi also runs the fused-glue ablation (w1a2-unfused), for its per-layer modelled split
    assert got == {("loop1", "host", v) for v in variants} | {("pi1", "pi3", v) for v in variants | {"w1a2-unfused"}}
    assert "int8" in variants or "note: int8" in out
    assert all(r["frames"] == 3 and r["golden_ok"] and r["median_ms"] > 0 for r in rows)
    assert all(r["agreement"] == 1.0 for r in rows if r["variant"] == "float32")
    for r in rows:  # the printed table has a row per device and variant
        assert any(r["device"] in line and r["variant"] in line and f"{r['median_ms']:.2f}" in line
                   for line in out.splitlines()), r
    assert "emulated (qemu)" in out and str(html) in out and "agreement with float32, random weights" in out
    # the trained digits classifier, eval'd on the emulated Pi over SSH: accuracy per variant next to latency
    assert [(r["device"], r["target"], r["variant"], r["images"]) for r in acc] == [
        ("pi1", "pi3", v, 20) for v in ("float32", "int8", "w1a2")]
    assert all(r["top1"] >= 0.8 and r["top5"] >= r["top1"] and r["emulated"] and r["device_ms"] > 0 for r in acc)
    assert "modelled Pi 3 ms" in out
    for r in acc:  # printed next to its latency: the modelled Pi 3 ms ("-" when the timing model cannot price it)
        line = next((ln for ln in out.splitlines() if r["variant"] in ln and f"{r['top1']:.2%}" in ln
                     and f"{r['device_ms']:.2f}" in ln), None)
        assert line is not None, r
        assert (f"{r['modelled_ms']:.2f}" if r["modelled_ms"] is not None else " - ") in line, (r, line)

    with sqlite3.connect(db) as con:
        runs = con.execute("SELECT r.device, r.target, r.variant, r.emulated, r.source, m.repeats, "
                           "m.latency_median_ms, m.golden_ok FROM runs r JOIN measurements m ON m.run_id = r.id "
                           "WHERE r.source = 'classify' ORDER BY r.id").fetchall()
        evals = con.execute("SELECT r.variant, m.accuracy FROM runs r JOIN measurements m ON m.run_id = r.id "
                            "WHERE r.source = 'eval' ORDER BY r.id").fetchall()
        cpus = con.execute("SELECT target, cpu_model, extra FROM runs WHERE source = 'classify'").fetchall()
    # a measured (host) row names the CPU it ran on and the -mcpu its package was built for (issue 24)
    from edge_sdk.results.store import device_facts

    host = [(cpu, json.loads(extra or "{}").get("mcpu")) for t, cpu, extra in cpus if t == "host"]
    assert host and all(cpu == device_facts()["cpu_model"] and mcpu for cpu, mcpu in host), host
    assert evals == [(r["variant"], pytest.approx(r["top1"])) for r in acc]
    assert {(d, t, v) for d, t, v, *_ in runs} == got and len(runs) == len(rows)
    for d, t, v, emulated, source, repeats, median, golden in runs:
        assert emulated == (t == "pi3") and source == "classify" and repeats == 3 and golden == 1
        assert median == pytest.approx(next(r["median_ms"] for r in rows if (r["device"], r["variant"]) == (d, v)),
                                       abs=0.006)

    page = html.read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "mobilenet_v1" in page and "w1a2" in page
    ours = set(re.findall(r"netns (edge-pi-[\w-]+)", run.err))  # the demo names the namespaces it stopped
    assert ours and not ours & run.netns_after and not ours & run.netns_before  # made by the demo, and gone
    assert not any("edge-sdk-demo-" in line for line in run.mounts_after.splitlines())


@pytest.mark.slow
def test_demo_recompiles_float32_after_a_tuning_record_lands(tmp_path, monkeypatch):
    """compile applies the user's tuning records to float32 by default, so a record that `edge-sdk tune`
    writes must name a new float32 package; the demo's old cache key ignored the records and served the
    package built before the tune. int8 and bitserial apply no records: they stay cached."""
    from edge_sdk.demo import DemoOptions, compile_variants
    from edge_sdk.tune.store import repo_root, user_root

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # the user's records root, empty so far
    said: list[str] = []

    def build() -> dict[str, list[Path]]:
        said.clear()
        opts = DemoOptions(model="mobilenet_v1", alpha=0.25, resolution=32, classes=10, out_dir=tmp_path / "pkgs")
        return compile_variants(opts, ["host"], say=said.append, notes=[])

    first = build()["host"]
    assert build()["host"] == first and all(m.startswith(("cached:", "note:")) for m in said), said
    shipped = sorted((repo_root() / "host").glob("*.json"))[0]  # a valid record, as `edge-sdk tune` writes them
    (user_root() / "host").mkdir(parents=True)
    shutil.copy(shipped, user_root() / "host" / shipped.name)
    again = build()["host"]
    f32 = [p for p in again if "-float32-" in p.name]
    assert len(f32) == 1 and f32[0] not in first and f32[0].is_file()
    assert any(m.startswith("compiled float32") for m in said), said
    assert sorted(p for p in again if p not in f32) == sorted(p for p in first if "-float32-" not in p.name)
