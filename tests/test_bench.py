"""edge-sdk bench plumbing on a tiny zoo model: rows and statuses, the golden check, JSON, the
results store, peers missing, and the qemu instruction counter (deterministic, K=3 minus K=1 > 0).

No test asserts a speed; the figures only have to exist and be positive.
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from edge_sdk.bench import bench as B
from edge_sdk.bench import peers as P
from bench_driver import bench_json
from edge_sdk.errors import MissingDependency, UsageError

TINY = {"alpha": 0.25, "resolution": 32, "classes": 10}


@pytest.fixture(scope="module")
def tiny():
    from edge_sdk.models.zoo import build_zoo_model

    return build_zoo_model("mobilenet_v1", seed=1, **TINY)


@pytest.fixture()
def unavailable_variant(monkeypatch):
    """A variant row that has not landed; made so if every row has landed by now."""
    from edge_sdk import variants

    name = next((n for n, v in variants.VARIANTS.items() if not v.available), None)
    if name is None:
        name = "w2a2"
        monkeypatch.setitem(variants.VARIANTS, name, dataclasses.replace(variants.VARIANTS[name], available=False))
    return name


def _fast(**kw):
    return {"warmup": 1, "repeat": 3, "min_time_ms": 0, **kw}


def test_rows_have_statuses_golden_check_and_table(tiny, isolated, unavailable_variant):
    res = B.run_bench(tiny, variants=["float32", unavailable_variant], **_fast())
    rows = {(r.engine, r.variant): r for r in res.rows}
    f32, na = rows[("edge-sdk", "float32")], rows[("edge-sdk", unavailable_variant)]
    assert f32.status == B.OK, f32.detail
    assert f32.golden["ok"] and f32.golden["reference"] == "numpy"
    assert f32.repeats >= 3 and 0 < f32.latency_ms["p10"] <= f32.latency_ms["median"] <= f32.latency_ms["p90"]
    assert f32.speedup_vs_float32 == pytest.approx(1.0)
    assert na.status == B.UNAVAILABLE and "not implemented" in na.detail and na.latency_ms is None
    assert res.system["cpu_model"] and res.system["versions"]["apache-tvm"]

    from edge_sdk.bench.report import render

    con = Console(record=True, width=200)
    render(res, console=con)
    text = con.export_text()
    assert "float32" in text and "ok" in text and "unavailable" in text

    # The second bench reuses the cached package (same key), a different variant would not.
    again = B.run_bench(tiny, variants=["float32"], **_fast())
    assert again.rows[0].cached is True and again.rows[0].package == f32.package


def test_wrong_output_is_a_status(tiny, isolated, monkeypatch):
    """A package whose golden output disagrees with what it computes gets 'wrong output', not 'ok'."""
    from edge_sdk.package import open_package, write_package

    res = B.run_bench(tiny, variants=["float32"], **_fast())
    good = Path(res.rows[0].package)
    bad = isolated / "bad.edgepkg"
    with tempfile.TemporaryDirectory() as tmp:
        pkg = open_package(good, Path(tmp) / "p")
        files = {n: pkg.member(n) for n in ("model.so", "params.bin", "golden_input.npy", "golden_output.npy")}
        np.save(files["golden_output.npy"], pkg.golden_output + 0.5)
        manifest = {k: v for k, v in pkg.manifest.items() if k != "members"}
        write_package(bad, manifest=manifest, files=files)
    monkeypatch.setattr(B, "cached_package", lambda *a, **k: (bad, True))
    row = B.run_bench(tiny, variants=["float32"], **_fast()).rows[0]
    assert row.status == B.WRONG and not row.golden["ok"] and row.golden["max_abs_err"] == pytest.approx(0.5, rel=1e-3)
    assert "golden check failed" in row.detail


def test_json_schema_store_and_missing_peers(isolated, capsys):
    db = isolated / "results.sqlite"
    code, js = bench_json(["mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "10",
                           "--variants", "float32", "--peers", "--warmup", "1", "--repeat", "3", "--min-time-ms",
                           "0", "--json", "--db", str(db)], capsys)
    assert code == 0
    assert js["schema"] == B.SCHEMA and js["mode"] == "latency" and js["target"] == "host"
    assert js["model"]["peer_key"] == "mobilenet_v1_0.25_32_c10"
    assert {"cpu_model", "logical_cpus", "versions", "hostname"} <= set(js["system"])
    for row in js["rows"]:
        assert {"engine", "variant", "family", "threads", "status", "detail", "latency_ms", "golden"} <= set(row)
        assert row["status"] in (B.OK, B.WRONG, B.FAILED, B.UNAVAILABLE)
    ours = [r for r in js["rows"] if r["engine"] == "edge-sdk"]
    peers = [r for r in js["rows"] if r["engine"] not in ("edge-sdk", "ncnn")]
    assert [r["status"] for r in ours] == ["ok"] and ours[0]["latency_ms"]["median"] > 0
    assert {r["engine"] for r in peers} == {"litert", "onnxruntime"}  # LCE is for resnet18 only
    assert all(r["status"] == "unavailable" and "tools/setup_peers.sh" in r["detail"] for r in peers)
    ncnn = [r for r in js["rows"] if r["engine"] == "ncnn"]  # needs no peers folder: our zoo model, written for ncnn
    assert [(r["variant"], r["status"]) for r in ncnn] == [("float32", "ok"), ("int8", "ok")]
    try:
        from edge_sdk.results.store import ResultsStore
    except ImportError:
        assert "skipped" in js["store"]["note"]
        return
    assert js["store"]["written"] == 3  # ours and the two ncnn rows
    with ResultsStore(db) as store:
        runs = store.query(model="mobilenet_v1")
    assert sorted((r["variant"], r["threads"]) for r in runs) == [("float32", 1), ("ncnn-float32", 1), ("ncnn-int8", 1)]
    assert [r["golden_ok"] for r in runs if r["variant"] == "float32"] == [1]


def test_peer_key_and_usage_errors(tiny):
    assert P.peer_key(tiny) == "mobilenet_v1_0.25_32_c10"
    file_model = type("M", (), {"name": "mobilenet_v1_1.0_224_float", "options": {}})()
    assert P.peer_key(file_model) == "mobilenet_v1_1.0_224"
    assert [p.engine for p in P.peers_for("resnet18_1.0_224")].count("lce") == 1
    assert "lce" not in [p.engine for p in P.peers_for("mobilenet_v1_1.0_224")]
    with pytest.raises(UsageError, match="did you mean|unknown variant"):
        B.parse_variants("float32,flaot16")
    with pytest.raises(UsageError, match="integers"):
        B.parse_threads("1,two")
    with pytest.raises(UsageError, match="--threads 1"):  # --emulate alone models N threads; --memory is one core's
        B.run_bench(tiny, variants=["float32"], threads=[2], emulate="pi3", memory=True)


@pytest.mark.qemu
def test_instruction_count_is_deterministic_and_per_inference_positive(tiny, tmp_path):
    from edge_sdk.qemu import runner as E

    try:
        E.plugin_dir()
    except MissingDependency as e:
        pytest.skip(str(e))  # names the fix: bash tools/build_qemu_plugins.sh
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs g++-aarch64-linux-gnu (tools/setup.sh installs it)")
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.package import open_package
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    out = compile_model(tiny, variant=get_variant("float32"), target=get_target("pi3"), out=tmp_path / "t.edgepkg")
    pkg = open_package(out.package, tmp_path / "p")
    kw = dict(lib=pkg.member("model.so"), params=pkg.member("params.bin"), input=pkg.golden_input)
    first = E.count_runner(**kw)
    second = E.count_runner(**kw, ks=(E.K_LOW,))
    assert second.counts[E.K_LOW] == first.counts[E.K_LOW]  # same guest, same count, to the instruction
    assert first.counts[E.K_HIGH] > first.counts[E.K_LOW] and first.per_inference > 0
    np.testing.assert_allclose(first.output, pkg.golden_output, rtol=1e-4, atol=1e-5)  # it ran the model
