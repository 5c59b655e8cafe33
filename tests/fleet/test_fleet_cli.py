"""The fleet CLI layer (edge_sdk/cli/deploy.py, fleet.py, run.py) end to end on the loopback fleet: exit codes and output."""
from __future__ import annotations

import json
import os

import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.fleet.deploy import LocalPackage

pytestmark = pytest.mark.slow


def _args(fleet, kh, *more):
    return [*more, "--fleet", str(fleet.fleet_yaml), "--known-hosts", str(kh)]


def test_check_trust_deploy_status_run_rollback(fresh_fleet, host_package, tmp_path, capsys):
    kh = tmp_path / "known_hosts"
    assert cli_main(_args(fresh_fleet, kh, "fleet", "check")) == 0
    assert "3 devices" in capsys.readouterr().out
    # nothing trusted yet: deploy refuses every device, with the fingerprint and the way out
    assert cli_main(_args(fresh_fleet, kh, "deploy", str(host_package), "--json")) == 8
    out = json.loads(capsys.readouterr().out)
    assert all(not d["ok"] and "unknown host key" in d["error"] and "fleet trust" in d["error"] for d in out)
    assert cli_main(_args(fresh_fleet, kh, "fleet", "trust")) == 0
    assert capsys.readouterr().out.count("added") == 3

    assert cli_main(_args(fresh_fleet, kh, "deploy", str(host_package), "--group", "loopback")) == 0
    table = capsys.readouterr().out
    assert "3 of 3 devices ok" in table and "mobilenet_v1-float32: installed" in table
    pkg = LocalPackage.load(host_package)

    assert cli_main(_args(fresh_fleet, kh, "fleet", "status", "--device", "loop2", "--json")) == 0
    st = json.loads(capsys.readouterr().out)[0]
    assert st["models"]["mobilenet_v1-float32"]["package_sha256"] == pkg.sha256
    assert st["packages"] == [pkg.sha256] and st["runtime_current"]

    assert cli_main(_args(fresh_fleet, kh, "run", str(host_package), "--device", "loop2", "--repeat", "2",
                                "--json")) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["device"] == "loop2" and res["golden"]["ok"] and res["repeats"] == 2 and len(res["top_k"]) == 5

    # one version only: nothing to roll back to, and an unknown model gets a suggestion
    assert cli_main(_args(fresh_fleet, kh, "fleet", "rollback", "--device", "loop2", "--model",
                                "mobilenet_v1-float32")) == 8
    assert "no previous version" in capsys.readouterr().err
    assert cli_main(_args(fresh_fleet, kh, "fleet", "rollback", "--device", "loop2", "--model",
                                "mobilenet_v1")) == 2
    assert "did you mean 'mobilenet_v1-float32'" in capsys.readouterr().err


def test_run_of_a_package_not_installed_says_so(fresh_fleet, known_hosts_for, host_package, capsys):
    kh = known_hosts_for(fresh_fleet)
    assert cli_main(_args(fresh_fleet, kh, "run", str(host_package), "--device", "loop1")) == 8
    err = capsys.readouterr().err
    assert "is not installed there" in err and "edge-sdk deploy" in err


def test_shell_metacharacters_in_paths_stay_literal(fresh_fleet, known_hosts_for, host_package, tmp_path, capsys):
    """A package file named with shell syntax deploys fine: on the device it is stored by content
    (packages/<sha256>.edgepkg), so its name never reaches a remote command."""
    kh = known_hosts_for(fresh_fleet)
    odd = tmp_path / "x;touch pwned;$(id)`id`.edgepkg"
    odd.write_bytes(host_package.read_bytes())
    assert cli_main(_args(fresh_fleet, kh, "deploy", str(odd), "--device", "loop1")) == 0
    home = fresh_fleet["loop1"].home
    assert not any(p.name == "pwned" for p in home.rglob("*")) and not os.path.exists("pwned")
