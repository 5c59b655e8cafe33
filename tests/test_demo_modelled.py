"""The demo's modelled column (issue 12 items 6 and 7): the emulated Pi's packages carry their modelled
Pi 3 ms (the Cortex-A53 timing model over each pi3 package at --threads, cached by the package's
content), the table's speedups use them, and the emulator's wall time is shown only labelled as
"QEMU wall time (emulator speed, not a Pi)", never in a ratio.
"""
from __future__ import annotations

import json
import re
import sqlite3

import pytest

from edge_sdk.demo import DemoOptions, DemoReport, _pi_time, add_speedups, print_table
from edge_sdk.labels import QEMU_WALL
from edge_sdk.timing.package_figures import model_version


def _row(device, target, variant, wall, modelled):
    emulated = target == "pi3"
    r = {"device": device, "how": "stand-in", "target": target, "variant": variant, "frames": 2, "median_ms": wall,
         "p10_ms": wall * 0.9, "p90_ms": wall * 1.1, "agreement": None, "golden_ok": True, "run_id": 0,
         "emulated": emulated}
    fig = None if modelled is None else {"modelled_ms": modelled, "modelled_cycles": modelled * 1.2e6,
                                         "model_version": "a53-test"}
    return r | _pi_time({"latency_ms": {"median": wall}, "emulated": emulated, "target": target}, fig)


def _line(out: str, *cells: str) -> str:
    [line] = [x for x in out.splitlines() if all(c in x for c in cells)]
    return line


def test_the_table_ratios_use_modelled_ms_and_label_the_wall_time(capsys, tmp_path):
    """No device: rows as record() makes them; qemu's wall-time ratios (3.38x, 5.62x) differ from the model's."""
    rows = [_row("pi1", "pi3", "float32", 5491.0, 301.0), _row("pi1", "pi3", "int8", 1623.0, 196.0),
            _row("pi1", "pi3", "w1a2", 977.0, None),
            _row("loop1", "host", "float32", 40.0, None), _row("loop1", "host", "int8", 16.0, None)]
    add_speedups(rows)
    print_table(DemoReport(rows, tmp_path / "d.html", tmp_path / "r.sqlite", 60.0), DemoOptions(out_dir=tmp_path))
    out = capsys.readouterr().out
    int8 = _line(out, "pi1", "int8")
    assert f"{301.0 / 196.0:.2f}x" in int8 and f"{5491.0 / 1623.0:.2f}x" not in int8
    assert "196.00" in int8 and "modelled Pi 3 ms" in int8 and "1623.00" in int8  # wall time: its own column
    w1a2 = _line(out, "pi1", "w1a2")
    assert f"{5491.0 / 977.0:.2f}x" not in w1a2 and "977.00" in w1a2  # no modelled figure: no speedup at all
    assert f"{40.0 / 16.0:.2f}x" in _line(out, "loop1", "int8")  # a real device's measured ms
    flat = " ".join(out.split())
    assert f"{QEMU_WALL}: the emulator's time per frame on this machine, never used for a speedup" in flat
    assert [r["speedup"] for r in rows] == [1.0, pytest.approx(301.0 / 196.0), None, 1.0, pytest.approx(2.5)]


def _json_doc(out: str):
    m = re.search(r"^[\[{]$", out, re.M)  # print_json's document follows the table
    doc = json.loads(out[m.start():])
    return doc["latency"] if isinstance(doc, dict) else doc


@pytest.mark.qemu
@pytest.mark.slow
def test_reduced_demo_has_the_modelled_column(reduced_demo):
    """The same demo run as tests/test_demo.py's (one per session: tests/conftest.py reduced_demo)."""
    db, html, pkgs, out = reduced_demo.db, reduced_demo.html, reduced_demo.pkgs, reduced_demo.out
    assert reduced_demo.rc == 0, out + reduced_demo.err[-3000:]
    rows = _json_doc(out)
    pi = {r["variant"]: r for r in rows if r["target"] == "pi3"}
    host = {r["variant"]: r for r in rows if r["target"] == "host"}
    assert {"float32", "w1a2"} <= set(host) and set(pi) == set(host) | {"w1a2-unfused"}  # the ablation: Pi only
    for v, r in pi.items():
        assert r["modelled_ms"] > 0 and r["ms"] == r["modelled_ms"] and r["ms_is"] == "modelled Pi 3 ms"
        assert r["qemu_wall_ms"] == r["median_ms"] > 0  # the app's time on the emulated Pi, kept apart
        assert r["speedup"] == pytest.approx(pi["float32"]["modelled_ms"] / r["modelled_ms"])
        line = _line(out, "pi1", f" {v} ", f"{r['qemu_wall_ms']:.2f}")  # the latency table's row (not accuracy's)
        assert f"{r['modelled_ms']:.2f}" in line and f"{r['qemu_wall_ms']:.2f}" in line and f"{r['speedup']:.2f}x" in line
    for r in host.values():  # a real (loopback) device: measured, no model, no wall-time column
        assert (r["ms"], r["modelled_ms"], r["qemu_wall_ms"]) == (r["median_ms"], None, None)
        assert r["speedup"] == pytest.approx(host["float32"]["median_ms"] / r["median_ms"])
    assert QEMU_WALL in " ".join(out.split())

    with sqlite3.connect(db) as con:
        stored = con.execute("SELECT r.target, r.variant, r.package_sha256, m.latency_median_ms, m.modelled_ms, "
                             "m.modelled_cycles, m.model_version FROM runs r JOIN measurements m ON m.run_id = r.id "
                             "WHERE r.source = 'classify'").fetchall()
    shas = {}
    for target, variant, sha, median, ms, cycles, version in stored:
        if target == "pi3":
            assert ms == pytest.approx(pi[variant]["modelled_ms"]) and cycles > 0 and version == model_version()
            assert median == pytest.approx(pi[variant]["qemu_wall_ms"], abs=0.006)
            shas[variant] = sha
        else:
            assert (ms, cycles, version) == (None, None, None)
    with sqlite3.connect(db) as con:  # every Pi package's per-layer modelled split, in the run's extra
        split = {v: (json.loads(x).get("per_layer_modelled_ms"), ms) for t, v, x, ms in con.execute(
            "SELECT r.target, r.variant, r.extra, m.modelled_ms FROM runs r JOIN measurements m ON m.run_id = r.id "
            "WHERE r.source = 'classify'") if t == "pi3"}
    assert set(split) == set(pi)
    for v, (layers, ms) in split.items():
        assert layers and sum(x["ms"] for x in layers) == pytest.approx(ms, rel=0.03), v

    # the column is the timing model's own figure for that package (not the cache's, not qemu's)
    from edge_sdk.package import sha256_file
    from edge_sdk.timing.api import model_package

    [f32] = [p for p in pkgs.glob("*-float32-pi3-*.edgepkg") if sha256_file(p) == shas["float32"]]
    assert model_package(f32, "pi3", 1)["modelled_ms"] == pytest.approx(pi["float32"]["modelled_ms"], rel=1e-9)

    page = html.read_text()  # the dashboard: the emulated Pi's bars and speedups are the modelled ones
    blob = page[page.index('<script id="edge-data" type="application/json">'):].split(">", 1)[1]
    data = json.loads(blob[:blob.index("</script>")].replace("<\\/", "</").replace("<\\!--", "<!--"))
    drawn = {(r["device"], r["variant"]): r for r in data["latency"]}
    assert all(drawn[("pi1", v)]["ms"] == pytest.approx(r["modelled_ms"]) for v, r in pi.items())
    for s in data["speedup"]:
        if s["device"] == "pi1":
            assert s["basis"] == "modelled"
            assert s["speedup"] == pytest.approx(pi["float32"]["modelled_ms"] / pi[s["variant"]]["modelled_ms"])
