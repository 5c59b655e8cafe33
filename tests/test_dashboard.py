"""The dashboard: chart data from the store, the server, the export, and the page in a real headless Chromium.

The browser tests count the SVG marks (each carries data-* attributes) and match them to the rows of
the test database: a chart that silently drops or invents data fails here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from edge_sdk.cli.dashboard import add_dashboard_parser
from edge_sdk.dashboard import chart_data, export_html, make_server, render_page
from edge_sdk.errors import ConfigError, UsageError
from edge_sdk.results.store import SCHEMA_VERSION, ResultsStore

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))
from dashboard_screenshot import fill_sample_store  # noqa: E402
from test_results import manifest, run_json  # noqa: E402


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("dash") / "results.sqlite"
    with ResultsStore(db) as store:
        fill_sample_store(store)
        # A profiled run (edge-runner --profile): each layer's time measured as conv + glue. The split
        # differs from the op-based one (conv1's fused epilogue is glue), so a chart that ignores it fails.
        store.record_run(run_json(per_layer_ms=MEASURED), manifest(), device="profiled-pi",
                         extra={"source": "bench"})
    return db


MEASURED = [{"name": "conv1", "op": "conv2d", "ms": 7.5, "conv_ms": 6.0, "glue_ms": 1.5},
            {"name": "avgpool", "op": "mean", "ms": 0.5, "conv_ms": 0.0, "glue_ms": 0.5}]


def s_all(db) -> list[dict]:
    with ResultsStore(db) as s:
        return s.query()


@pytest.fixture(scope="module")
def expected(sample_db) -> dict:
    """What each chart must show, computed from the database directly (not from chart_data)."""
    with ResultsStore(sample_db) as s:
        latest = s.query(latest=True)
        pkgs = s.packages()
    floats = {(r["model"], r["device"], r["target"], r["threads"]): r["latency_median_ms"]
              for r in latest if r["variant"] == "float32"}
    return {
        "latency": {r["run_id"]: r["latency_median_ms"] for r in latest},
        "speedup": {r["run_id"]: floats[(r["model"], r["device"], r["target"], r["threads"])] / r["latency_median_ms"]
                    for r in latest if r["variant"] != "float32"
                    and (r["model"], r["device"], r["target"], r["threads"]) in floats},
        "layer": sorted((r["run_id"], x["name"]) for r in latest for x in r["per_layer_ms"]),
        "roofline": sorted((r["run_id"], lyr["name"]) for r in latest
                           for lyr in pkgs[r["package_sha256"]]["layers"] if lyr["flops"] > 0),
        "accuracy": {r["run_id"]: r["accuracy"] for r in latest if r["accuracy"] is not None},
        "profiled": {r["run_id"] for r in latest if r["per_layer_ms"]},
        "split": {(r["run_id"], x["name"]): (x["conv_ms"], x["glue_ms"]) for r in latest for x in r["per_layer_ms"]
                  if "conv_ms" in x},
        "stale": [r["run_id"] for r in s_all(sample_db) if r["run_id"] not in {x["run_id"] for x in latest}],
    }


# ------------------------------------------------------------------ data, without a browser
def test_chart_data_matches_the_store(sample_db, expected):
    with ResultsStore(sample_db) as s:
        d = chart_data(s)
    assert expected["stale"], "the sample must contain a superseded run"
    assert {r["run_id"]: r["median_ms"] for r in d["latency"]} == expected["latency"]
    assert {r["run_id"]: pytest.approx(r["speedup"]) for r in d["speedup"]} == expected["speedup"]
    assert [v["name"] for v in d["variants"]] == ["float32", "int8", "w1a2"]  # the variant table's order
    for run in d["layers"]:
        assert run["run_id"] in expected["profiled"]
        assert run["conv_ms"] + run["glue_ms"] == pytest.approx(sum(x["ms"] for x in run["segments"]))
        assert {x["kind"] for x in run["segments"]} == {"conv", "glue"}
    assert {r["run_id"] for r in d["unprofiled"]} == set(expected["latency"]) - expected["profiled"]
    split = expected["split"]
    assert len(split) == len(MEASURED)
    for run in d["layers"]:
        for x in run["segments"]:
            key = (run["run_id"], x["name"])
            if key in split:  # measured: the runner's split, not the op's
                assert (x["split"], x["conv_ms"], x["glue_ms"]) == ("measured", *split[key])
            else:  # op-based: all of the layer's time to its op's kind
                assert x["split"] == "op"
                assert (x["conv_ms"], x["glue_ms"]) == ((x["ms"], 0.0) if x["kind"] == "conv" else (0.0, x["ms"]))
    [profiled] = [r for r in d["layers"] if r["device"] == "profiled-pi"]
    assert (profiled["measured"], profiled["conv_ms"], profiled["glue_ms"]) == (True, 6.0, 2.0)
    for panel in d["roofline"]:
        for p in panel["points"]:
            bound = min(panel["peak_gflops"], panel["mem_gbps"] * p["intensity"])
            assert p["bound_gflops"] == pytest.approx(bound)
            # an emulated run's layer times are QEMU's: never attained GFLOP/s (test_dashboard_modelled)
            assert p["measured"] == (p["run_id"] in expected["profiled"] and not p["emulated"])
            if not p["measured"]:
                assert p["gflops"] == pytest.approx(bound)
    point = next(p for panel in d["roofline"] for p in panel["points"] if p["measured"])
    seg = next(x for r in d["layers"] if r["run_id"] == point["run_id"] for x in r["segments"] if x["name"] == point["layer"])
    assert point["gflops"] == pytest.approx(point["flops"] / (seg["ms"] * 1e6))


def test_export_is_self_contained(sample_db, tmp_path):
    with ResultsStore(sample_db) as s:
        out = export_html(s, tmp_path / "dash.html")
    text = out.read_text()
    assert "http://" not in text and "https://" not in text
    assert text.count("<script") == 2 and '<script id="edge-data" type="application/json">' in text
    assert "connect-src 'none'" in text  # the exported page may not even try the network


def test_untrusted_text_cannot_close_the_script():
    page = render_page({"meta": {}, "evil": "</script><script>alert(1)</script><!--"})
    assert page.count("</script>") == 2


def test_server_routes(sample_db):
    server = make_server(db=sample_db, port=0)
    assert server.server_address[0] == "127.0.0.1"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/api/data") as r:
            data = json.load(r)
            assert r.headers["Content-Type"] == "application/json"
        with urllib.request.urlopen(base + "/") as r:
            page = r.read().decode()
        with urllib.request.urlopen(urllib.request.Request(base + "/", method="HEAD")) as r:
            assert r.status == 200 and r.read() == b"" and int(r.headers["Content-Length"]) == len(page.encode())
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/../etc/passwd")
        assert e.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
    assert len(data["latency"]) == len(s_all(sample_db)) - 1
    assert 'id="edge-data"' not in page and "connect-src 'self'" in page


def _drive(argv):
    p = argparse.ArgumentParser()
    add_dashboard_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["dashboard", *argv])
    return args.drive(args)


def test_cli_export_and_errors(sample_db, tmp_path, capsys):
    assert _drive(["--db", str(sample_db), "--export", str(tmp_path / "d.html")]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "d.html").stat().st_size > 10_000
    with pytest.raises(UsageError, match="no such results database"):
        _drive(["--db", str(tmp_path / "missing.sqlite")])
    with pytest.raises(UsageError, match="must be an .html file"):
        _drive(["--db", str(sample_db), "--export", str(tmp_path / "d.png")])
    newer = tmp_path / "newer.sqlite"
    ResultsStore(newer).close()
    import sqlite3

    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(ConfigError, match="newer"):
        _drive(["--db", str(newer), "--export", str(tmp_path / "n.html")])
    assert not (tmp_path / "n.html").exists()


def test_port_in_use_is_a_usage_error(sample_db):
    first = make_server(db=sample_db, port=0)
    try:
        with pytest.raises(UsageError, match="cannot listen on 127.0.0.1"):
            make_server(db=sample_db, port=first.server_address[1])
    finally:
        first.server_close()


# ------------------------------------------------------------------ a real headless Chromium
@pytest.fixture(scope="module")
def chromium_ok():
    from cdp import chromium_binary

    missing = []
    if chromium_binary() is None:
        missing.append("chromium (apt-get install chromium)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        missing.append("websocket-client (pip)")
    if missing:
        msg = "needs " + " and ".join(missing) + "; tools/setup.sh installs them"
        if os.environ.get("CI"):
            pytest.fail(msg)  # in CI a missing browser is a setup bug, not a reason to skip
        pytest.skip(msg)


MARKS_JS = "JSON.stringify([...document.querySelectorAll('[data-chart]')].map(e => ({...e.dataset})))"


def _marks(browser) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in json.loads(browser.evaluate(MARKS_JS)):
        out.setdefault(m["chart"], []).append(m)
    return out


def _check_marks(marks, expected):
    assert {int(m["runId"]): float(m["medianMs"]) for m in marks["latency"]} == \
        pytest.approx(expected["latency"])
    assert len(marks["latency"]) == len(expected["latency"])
    assert {int(m["runId"]): float(m["speedup"]) for m in marks["speedup"]} == pytest.approx(expected["speedup"])
    assert sorted((int(m["runId"]), m["layer"]) for m in marks["layer"]) == expected["layer"]
    drawn = {(int(m["runId"]), m["layer"]): (float(m["convMs"]), float(m["glueMs"]))
             for m in marks["layer"] if m["split"] == "measured"}
    assert drawn == expected["split"]
    assert sorted((int(m["runId"]), m["layer"]) for m in marks["roofline"]) == expected["roofline"]
    assert {m["measured"] == "true" for m in marks["roofline"]} == {True, False}
    assert {int(m["runId"]): float(m["accuracy"]) for m in marks["accuracy"]} == pytest.approx(expected["accuracy"])


def test_served_page_in_chromium(chromium_ok, sample_db, expected, tmp_path):
    from cdp import Chromium

    server = make_server(db=sample_db, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Chromium(tmp_path / "profile") as browser:
            assert browser.load(f"http://127.0.0.1:{server.server_address[1]}/") == "1"
            marks = _marks(browser)
            tables = browser.evaluate("document.querySelectorAll('table').length")
            parts = browser.evaluate("JSON.stringify([...document.querySelectorAll('[data-split=measured] rect')]"
                                     ".map(r => r.dataset.part))")
            rows = browser.evaluate("document.querySelector('#latency table').tBodies[0].rows.length")
            svgs = browser.evaluate("[...document.querySelectorAll('svg.chart')].every("
                                    "s => s.getAttribute('role') === 'img' && s.querySelector('title'))")
            shot = browser.screenshot(tmp_path / "dashboard.png")
            errors = browser.errors()
    finally:
        server.shutdown()
        server.server_close()
    assert errors == []
    _check_marks(marks, expected)
    assert tables == 5 and rows == len(expected["latency"]) and svgs
    assert json.loads(parts) == ["conv", "glue", "glue"]  # conv1: conv + glue; avgpool: glue only (0 ms conv)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_exported_file_in_chromium_offline(chromium_ok, sample_db, expected, tmp_path):
    """The export, opened from disk with every network route dead, draws the same marks."""
    from cdp import Chromium

    with ResultsStore(sample_db) as s:
        out = export_html(s, tmp_path / "dash.html")
    with Chromium(tmp_path / "profile", offline=True) as browser:
        assert browser.load(out.as_uri()) == "1"
        marks = _marks(browser)
        urls = browser.requested_urls()
        errors = browser.errors()
    assert errors == []
    assert all(u.startswith(("file:", "data:")) for u in urls), urls
    _check_marks(marks, expected)


def test_empty_store_and_hostile_names_in_chromium(chromium_ok, tmp_path):
    """An empty store says so; a device name full of markup is shown as text, never run."""
    from cdp import Chromium

    empty = tmp_path / "empty.sqlite"
    ResultsStore(empty).close()
    evil_name = "<img src=x onerror=\"window.pwned=1\"></script><script>window.pwned=2</script>"
    hostile = tmp_path / "hostile.sqlite"
    with ResultsStore(hostile) as s:
        s.record_run(run_json(), manifest(), device=evil_name)
    with Chromium(tmp_path / "profile", offline=True) as browser:
        for db in (empty, hostile):
            with ResultsStore(db) as s:
                export_html(s, tmp_path / f"{db.stem}.html")
        browser.load((tmp_path / "empty.html").as_uri())
        empty_text = browser.evaluate("document.getElementById('charts').textContent")
        browser.load((tmp_path / "hostile.html").as_uri())
        pwned = browser.evaluate("window.pwned === undefined ? null : window.pwned")
        shown = browser.evaluate("document.querySelector('[data-chart=latency]').getAttribute('data-device')")
        errors = browser.errors()
    assert "No runs recorded yet" in empty_text
    assert pwned is None and shown == evil_name
    assert errors == []
