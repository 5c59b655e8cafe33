"""`edge-sdk tune --target pi3` with no device: MetaSchedule candidates timed by the modelled A53 clock
(tune/modelled_runner.py: each candidate's edge-runner --kernel under qemu with libtiming.so). One 2-trial
search of one kernel of a tiny MobileNetV1, end to end; the times are modelled Pi seconds, never asserted."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache (MetaSchedule databases, bundles) that still finds the built qemu plugins and runtime."""
    from edge_sdk.runtime.bundle import cache_root

    shared, own = cache_root(), tmp_path / "cache"
    own.mkdir()
    for name in ("qemu-plugins", "runtime", "wheels"):
        if (shared / name).exists():
            (own / name).symlink_to(shared / name)
    monkeypatch.setenv("EDGE_SDK_CACHE", str(own))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return own


def test_tune_pi3_without_a_device_runs_under_qemu(cache, tmp_path, capsys):
    from edge_sdk.cli import main

    out = tmp_path / "records"
    argv = ["tune", "mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "10", "--target", "pi3",
            "--trials", "2", "--kernel", "edge_dw_1", "--out", str(out), "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["target"] == "pi3"
    (row,) = res["kernels"]
    assert row["ours_ms"] > 0 and row["tuned_ms"] is not None and row["tuned_ms"] > 0
    recs = list((out / "pi3").glob("*.json"))
    assert len(recs) == 1 and json.loads(recs[0].read_text())["trials"] >= 2
