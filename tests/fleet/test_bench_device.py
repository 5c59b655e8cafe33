"""edge-sdk bench --device D --fleet F against a loopback fleet (real sshd servers, host target).

Here because the loopback fixtures live in tests/fleet/conftest.py. The tiny model compiles for the
device's target (host), is deployed, run there with --profile, and its rows land in the store under
the device's name with the measured per-layer conv/glue split. No speed is asserted.
"""
from __future__ import annotations

import argparse
import json

import pytest

from edge_sdk.bench import bench as B
from edge_sdk.cli import bench as CB
from edge_sdk.errors import UsageError
from edge_sdk.results.store import ResultsStore

TINY = ["mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "10"]


def _drive(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    CB.add_bench_parser(parser.add_subparsers())
    code = CB.drive_bench(parser.parse_args(["bench", *argv]))
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_bench_on_a_fleet_device(fleet, tmp_path, monkeypatch, capsys):
    loop, devices, kh = fleet
    monkeypatch.setattr(B, "cache_root", lambda: tmp_path / "cache")  # this test's packages only
    dev = devices[0]
    db = tmp_path / "results.sqlite"
    common = [*TINY, "--variants", "float32,int8", "--device", dev.name, "--fleet", str(loop.fleet_yaml),
              "--known-hosts", str(kh), "--warmup", "1", "--repeat", "3", "--db", str(db)]

    code, out = _drive(common, capsys)  # the table, as a person sees it
    assert code == 0, out
    assert f"on device {dev.name} (host)" in out and "installed on" in out
    with ResultsStore(db) as s:
        stored = s.query()
    assert len(stored) == 2 and {r["device"] for r in stored} == {dev.name}
    assert {r["variant"] for r in stored} == {"float32", "int8"}
    assert all(r["source"] == "bench" and r["golden_ok"] and not r["emulated"] for r in stored)
    assert all(r["cpu_model"] for r in stored)  # read on the device
    f32 = next(r for r in stored if r["variant"] == "float32")
    assert f32["per_layer_ms"], "the device run was profiled: per-layer times come back"
    split = [x for x in f32["per_layer_ms"] if "conv_ms" in x]
    assert split and all(x["conv_ms"] + x["glue_ms"] == pytest.approx(x["ms"], abs=1e-5) for x in split)
    assert any(x["conv_ms"] > 0 for x in split)

    # Again: the packages are already on the device (content-addressed), nothing is re-sent.
    code, out = _drive([*common, "--json"], capsys)
    js = json.loads(out)
    assert code == 0, js
    assert js["device"] == dev.name and js["target"] == dev.target == "host"
    assert js["system"]["device"] == dev.name and js["system"]["cpu_model"]
    rows = {r["variant"]: r for r in js["rows"]}
    assert set(rows) == {"float32", "int8"}
    for r in rows.values():
        assert r["status"] == B.OK, r
        assert r["latency_ms"]["median"] > 0 and r["repeats"] >= 3 and r["golden"]["ok"]
        assert f"unchanged on {dev.name}" in r["detail"] and r["cached"]
    assert rows["int8"]["speedup_vs_float32"] is not None
    with ResultsStore(db) as s:
        assert len(s.query(device=dev.name)) == 4


def test_device_needs_a_fleet_and_no_peers(capsys):
    with pytest.raises(UsageError, match="--device and --fleet go together"):
        _drive([*TINY, "--device", "pi-1"], capsys)
    with pytest.raises(UsageError, match="drop --peers"):
        _drive([*TINY, "--device", "pi-1", "--fleet", "f.yaml", "--peers"], capsys)
