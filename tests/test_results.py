"""The results store: round trip, latest-run selection, CSV/JSON export, schema checks, atomic writes, CLI."""
from __future__ import annotations

import argparse
import csv
import json
import sqlite3

import pytest

from edge_sdk.cli.results import add_results_parser
from edge_sdk.errors import ConfigError, UsageError
from edge_sdk.results import SCHEMA_VERSION, ResultsStore, default_db_path

LAYERS = [
    {"name": "conv1", "op": "conv2d", "inputs": [[1, 8, 8, 3]], "weights": [[3, 3, 3, 4]], "output": [1, 8, 8, 4],
     "flops": 13824, "bytes_read": 1200, "bytes_written": 1024, "epilogue": ["add", "clip"], "intensity": 6.216},
    {"name": "avgpool", "op": "mean", "inputs": [[1, 8, 8, 4]], "weights": [], "output": [1, 4],
     "flops": 256, "bytes_read": 1024, "bytes_written": 16, "epilogue": [], "intensity": 0.246},
]


def manifest(variant="float32", target="pi3", model="tiny"):
    return {"model": {"name": model, "source": "zoo"}, "variant": variant, "created": "2025-01-01T00:00:00+00:00",
            "target": {"name": target, "arch": "aarch64", "peak_gflops": 38.4, "mem_gbps": 3.6},
            "versions": {"edge_sdk": "0.1.0", "tvm": "0.27.0"}, "layers": LAYERS,
            "totals": {"flops": 14080, "bytes": 3264}}


def run_json(variant="float32", target="pi3", model="tiny", median=10.0, **kw):
    return {"package": "/nowhere/tiny.edgepkg", "model": model, "variant": variant, "target": target,
            "emulated": True, "threads": 4, "repeats": 5,
            "latency_ms": {"median": median, "min": median - 1, "max": median + 2, "p10": median - 0.5,
                           "p90": median + 1},
            "load_ms": 3.5, "golden": {"ok": True, "max_abs_err": 1e-7}, "top_k": [], **kw}


@pytest.fixture
def store(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite") as s:
        yield s


def count(store, table):
    return store._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_round_trip(store):
    per_layer = [{"name": "conv1", "ms": 7.5}, {"name": "avgpool", "ms": 0.5}]
    rid = store.record_run(run_json(per_layer_ms=per_layer), manifest(), device="kitchen-pi",
                           extra={"cpu_model": "Cortex-A53", "clock_mhz": 1200.0, "temperature_c": 51.2,
                                  "accuracy": 0.71, "package_sha256": "ab" * 32, "board": "3B+"})
    [row] = store.query()
    assert row["run_id"] == rid
    assert (row["device"], row["model"], row["variant"], row["target"], row["threads"]) == \
        ("kitchen-pi", "tiny", "float32", "pi3", 4)
    assert row["emulated"] is True and row["golden_ok"] is True
    assert (row["latency_median_ms"], row["latency_min_ms"], row["latency_max_ms"]) == (10.0, 9.0, 12.0)
    assert (row["latency_p10_ms"], row["latency_p90_ms"], row["repeats"], row["load_ms"]) == (9.5, 11.0, 5, 3.5)
    assert (row["sdk_version"], row["tvm_version"]) == ("0.1.0", "0.27.0")
    assert (row["cpu_model"], row["clock_mhz"], row["temperature_c"]) == ("Cortex-A53", 1200.0, 51.2)
    assert row["accuracy"] == 0.71 and row["package_sha256"] == "ab" * 32
    assert row["per_layer_ms"] == per_layer
    assert row["extra"] == {"board": "3B+"}  # unknown extra keys are kept, not dropped
    pkg = store.packages()["ab" * 32]
    assert (pkg["peak_gflops"], pkg["mem_gbps"], pkg["total_flops"]) == (38.4, 3.6, 14080)
    assert [{k: lyr[k] for k in LAYERS[0]} for lyr in pkg["layers"]] == LAYERS


def test_layer_table_is_stored_once_per_package(store):
    for median in (10.0, 9.0, 11.0):
        store.record_run(run_json(median=median), manifest(), device="d", extra={"package_sha256": "cd" * 32})
    store.record_run(run_json(variant="int8", median=4.0), manifest("int8"), device="d")
    assert count(store, "runs") == 4
    assert count(store, "packages") == 2
    assert count(store, "package_layers") == 2 * len(LAYERS)


def test_latest_keeps_the_newest_run_per_key(store):
    store.record_run(run_json(median=30.0), manifest(), device="a")
    newest = store.record_run(run_json(median=10.0), manifest(), device="a")
    other = store.record_run(run_json(median=20.0), manifest(), device="b")
    assert [r["run_id"] for r in store.query(latest=True)] == [newest, other]
    assert [r["latency_median_ms"] for r in store.query(device="a")] == [30.0, 10.0]
    assert store.query(model="other") == []


def test_package_identity_without_a_given_sha(store, tmp_path):
    """No sha given: the package file's sha256 if the file is here, else the manifest's (stable)."""
    from edge_sdk.package import sha256_file

    store.record_run(run_json(), manifest(), device="a")
    store.record_run(run_json(), manifest(), device="a")
    pkg_file = tmp_path / "tiny.edgepkg"
    pkg_file.write_bytes(b"not really a package, but a file with a hash")
    store.record_run(run_json(package=str(pkg_file)), manifest(), device="a")
    shas = [r["package_sha256"] for r in store.query()]
    assert shas[0] == shas[1] != shas[2] == sha256_file(pkg_file)


def test_per_layer_as_a_mapping(store):
    store.record_run(run_json(per_layer_ms={"conv1": 2, "avgpool": 0.25}), manifest(), device="a")
    assert store.query()[0]["per_layer_ms"] == [{"name": "conv1", "ms": 2.0}, {"name": "avgpool", "ms": 0.25}]


def test_measured_conv_glue_split_is_kept(store):
    """A profiled run's per-layer conv/glue split (runtime/profile.py) survives the store; a half split
    (only one of the two) is dropped rather than stored as if it were measured."""
    per_layer = [{"name": "conv1", "op": "conv2d", "ms": 7.5, "conv_ms": 6.0, "glue_ms": 1.5},
                 {"name": "avgpool", "op": "mean", "ms": 0.5, "conv_ms": 0, "glue_ms": 0.5},
                 {"name": "extra", "ms": 0.25, "conv_ms": 0.2}]
    store.record_run(run_json(per_layer_ms=per_layer), manifest(), device="a")
    [row] = store.query()
    assert row["per_layer_ms"] == [per_layer[0], {**per_layer[1], "conv_ms": 0.0},
                                   {"name": "extra", "ms": 0.25}]
    with pytest.raises(UsageError, match=r"per_layer_ms\[0\]: conv_ms/glue_ms must be numbers"):
        store.record_run(run_json(per_layer_ms=[{"name": "c", "ms": 1, "conv_ms": "x", "glue_ms": 1}]),
                         manifest(), device="a")


def test_a_file_written_before_the_split_still_reads(tmp_path):
    """The split needs no schema change: a v1 file whose per-layer JSON has only name/ms/op (as every
    edge-sdk before it wrote) opens, reads, and takes new runs with a split beside the old ones."""
    db = tmp_path / "old.sqlite"
    with ResultsStore(db) as s:
        s.record_run(run_json(), manifest(), device="old")
    with sqlite3.connect(db) as c:  # what an older writer left: no conv_ms/glue_ms keys at all
        c.execute("UPDATE measurements SET per_layer_ms = ?",
                  (json.dumps([{"name": "conv1", "ms": 7.5, "op": "conv2d"}]),))
        assert c.execute("PRAGMA user_version").fetchone()[0] == 1
    with ResultsStore(db) as s:
        s.record_run(run_json(per_layer_ms=[{"name": "conv1", "ms": 2.0, "conv_ms": 1.5, "glue_ms": 0.5}]),
                     manifest(), device="new")
        old, new = s.query()
    assert old["per_layer_ms"] == [{"name": "conv1", "ms": 7.5, "op": "conv2d"}]
    assert new["per_layer_ms"] == [{"name": "conv1", "ms": 2.0, "conv_ms": 1.5, "glue_ms": 0.5}]


def test_export_csv_and_json(store, tmp_path):
    store.record_run(run_json(per_layer_ms=[{"name": "conv1", "ms": 1.0}]), manifest(), device="a,b \"quoted\"")
    store.record_run(run_json(variant="int8", median=3.0), manifest("int8"), device="c", extra={"accuracy": 0.5})
    assert store.export_csv(tmp_path / "out.csv") == 2
    with open(tmp_path / "out.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["device"] for r in rows] == ["a,b \"quoted\"", "c"]
    assert float(rows[1]["latency_median_ms"]) == 3.0 and float(rows[1]["accuracy"]) == 0.5
    assert json.loads(rows[0]["per_layer_ms"]) == [{"name": "conv1", "ms": 1.0}]
    assert store.export_json(tmp_path / "out.json") == 2
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert [r["variant"] for r in doc["runs"]] == ["float32", "int8"]
    assert {len(p["layers"]) for p in doc["packages"].values()} == {len(LAYERS)}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_rejects_a_newer_schema(tmp_path):
    path = tmp_path / "r.sqlite"
    ResultsStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1} is newer") as e:
        ResultsStore(path)
    assert str(path) in str(e.value) and "upgrade edge-sdk" in str(e.value)


def test_rejects_foreign_files(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(ConfigError, match="not an edge-sdk results database"):
        ResultsStore(other)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    with pytest.raises(ConfigError, match="junk.sqlite: not a readable results database"):
        ResultsStore(junk)
    with pytest.raises(UsageError, match="no such results database"):
        ResultsStore(tmp_path / "missing.sqlite", create=False)


def test_bad_input_writes_nothing(store):
    with pytest.raises(UsageError, match="run JSON variant 'int8' does not match the package manifest's 'float32'"):
        store.record_run(run_json(variant="int8"), manifest(), device="a")
    bad = run_json()
    del bad["latency_ms"]["min"]
    with pytest.raises(UsageError, match="run JSON latency_ms: missing key 'min'"):
        store.record_run(bad, manifest(), device="a")
    broken = manifest()
    broken["layers"] = [LAYERS[0], {"name": "x", "op": "mean"}]  # second layer lacks flops
    with pytest.raises(UsageError, match=r"manifest layers\[1\]: missing key 'flops'"):
        store.record_run(run_json(), broken, device="a")
    assert [count(store, t) for t in ("runs", "measurements", "packages", "package_layers")] == [0, 0, 0, 0]


def test_default_path_follows_edge_sdk_data(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGE_SDK_DATA", str(tmp_path / "data"))
    assert default_db_path() == tmp_path / "data" / "results.sqlite"
    with ResultsStore() as s:
        assert s.path == tmp_path / "data" / "results.sqlite" and s.path.is_file()


def _cli(argv):
    p = argparse.ArgumentParser()
    add_results_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.drive(args)


def test_cli_list_and_export(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    with ResultsStore(db) as s:
        s.record_run(run_json(), manifest(), device="kitchen-pi")
    assert _cli(["results", "list", "--db", str(db), "--json"]) == 0
    assert [r["device"] for r in json.loads(capsys.readouterr().out)] == ["kitchen-pi"]
    assert _cli(["results", "export", "--db", str(db), "--csv", str(tmp_path / "o.csv")]) == 0
    assert (tmp_path / "o.csv").read_text().count("\n") == 2
    with pytest.raises(UsageError, match="give --csv FILE and/or --json FILE"):
        _cli(["results", "export", "--db", str(db)])
    with pytest.raises(UsageError, match="no such results database"):
        _cli(["results", "list", "--db", str(tmp_path / "nope.sqlite")])


@pytest.mark.slow
def test_records_a_real_run(tmp_path, host_package, capsys):
    """A real package run on this machine, through the CLI's record action, lands in the store."""
    from edge_sdk.package import read_manifest, sha256_file
    from edge_sdk.run import run_package

    run = run_package(host_package, repeat=3)
    (tmp_path / "run.json").write_text(json.dumps(run.to_json()))
    db = tmp_path / "r.sqlite"
    assert _cli(["results", "record", str(tmp_path / "run.json"), "--package", str(host_package),
                 "--device", "localhost", "--local-facts", "--db", str(db)]) == 0
    with ResultsStore(db) as s:
        [row] = s.query()
        pkg = s.packages()[row["package_sha256"]]
    assert row["package_sha256"] == sha256_file(host_package)
    assert row["golden_ok"] is True and row["repeats"] == 3
    assert row["latency_median_ms"] == pytest.approx(run.median_ms)
    assert row["cpu_model"]  # /proc/cpuinfo is readable here
    assert len(pkg["layers"]) == len(read_manifest(host_package)["layers"])
