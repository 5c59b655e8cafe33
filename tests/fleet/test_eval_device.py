"""edge-sdk eval on a device over SSH: a real sshd (the loopback fleet), the package as deploy installed it,
the inputs and eval_batch.py uploaded to a scratch folder, run there with the device's runtime bundle.

The device's scores must give exactly the host's result (the host's is checked against the numpy
evaluator in tests/test_eval.py), and nothing is left behind on the device.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from edge_sdk.cli import main

pytestmark = pytest.mark.slow


def _images(root, seed=4):
    rng = np.random.default_rng(seed)
    for c in ("0", "4", "8"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (80, 100, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    return root


def test_eval_on_a_loopback_device_equals_the_host_and_leaves_nothing(loopback_fleet, known_hosts_for, host_package,
                                                                     tmp_path, capsys):
    from edge_sdk.fleet.config import load_fleet
    from edge_sdk.fleet.deploy import LocalPackage, deploy
    from edge_sdk.results.store import ResultsStore

    kh = known_hosts_for(loopback_fleet)
    dev = load_fleet(loopback_fleet.fleet_yaml).select()[0]
    images, db = _images(tmp_path / "imgs"), tmp_path / "r.sqlite"
    fleet_args = ["--device", dev.name, "--fleet", str(loopback_fleet.fleet_yaml), "--known-hosts", str(kh)]

    capsys.readouterr()
    assert main(["eval", str(host_package), "--images", str(images), "--json", "--db", str(db), *fleet_args]) == 8
    assert "is not installed there" in capsys.readouterr().err  # before deploy: a clear device error

    assert deploy([dev], [LocalPackage.load(host_package)], known_hosts=kh).all_ok
    assert main(["eval", str(host_package), "--images", str(images), "--json", "--db", str(db), *fleet_args]) == 0
    remote = json.loads(capsys.readouterr().out)[0]
    assert main(["eval", str(host_package), "--images", str(images), "--json", "--no-record"]) == 0
    local = json.loads(capsys.readouterr().out)[0]
    assert remote["where"] == f"device {dev.name}" and remote["device"] == dev.name and not remote["emulated"]
    for key in ("images", "top1_correct", "top5_correct", "per_class", "misclassified"):
        assert remote[key] == local[key], key
    assert remote["images"] == 9 and len(remote["latency_ms"]) == 5
    with ResultsStore(db) as store:
        runs = store.query()
    assert [(r["device"], r["source"], r["accuracy"]) for r in runs] == [(dev.name, "eval", pytest.approx(remote["top1"]))]
    home = next(d for d in loopback_fleet.devices if d.name == dev.name).home
    assert not list(home.glob(".edge-sdk/models/*/.eval.tmp-*"))  # the scratch folder is gone
