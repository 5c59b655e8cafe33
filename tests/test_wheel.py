"""`pip install` of the built wheel works outside the checkout: the wheel is built from the package's files,
installed into a fresh venv in a temporary folder, and its `edge-sdk` runs compile, run --json (modelled Pi
ms of a pi3 package), bench --emulate pi3 and a reduced demo from another folder, with no PYTHONPATH.

How the venv is made: tests/wheel_venv.py (the checkout's editable install is not on its path: asserted).
The reduced demo is the session's one (tests/conftest.py reduced_demo), run by the wheel's CLI.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from wheel_venv import run as _run

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_wheel_carries_what_the_cli_reads_at_run_time(installed_wheel):
    names = set(zipfile.ZipFile(installed_wheel["wheel"]).namelist())
    for need in ("edge_sdk/runtime/device/runner.cc", "edge_sdk/runtime/device/runner_profile.h", "edge_sdk/runtime/device/runner_kernel.h",
                 "edge_sdk/qemu/plugins/timing.c", "edge_sdk/qemu/build_plugins.sh",
                 "edge_sdk/apps/classify/classify.py", "edge_sdk/apps/classify/sources.py",
                 "edge_sdk/devices/emulated_pi.py", "edge_sdk/devices/loopback.py"):
        assert need in names, need
    where = _run([installed_wheel["bin"] / "python", "-c", "import edge_sdk; print(edge_sdk.__file__)"],
                 cwd=installed_wheel["work"], env=installed_wheel["env"], timeout=60).stdout.strip()
    assert Path(where).is_relative_to(installed_wheel["site"]), where  # the wheel's copy, not the checkout's
    # the shipped per-layer choice records (compile applies them by default on Pi targets), and the installed_wheel
    # package finds them
    shipped = sorted((ROOT / "edge_sdk/tune/records/choice").glob("*.json"))
    assert shipped
    for p in shipped:
        assert f"edge_sdk/tune/records/choice/{p.name}" in names, p.name
    n = _run([installed_wheel["bin"] / "python", "-c", "from edge_sdk.tune import choice_records as R; "
              "print(len(R.load('cortex-a53')), R.root())"], cwd=installed_wheel["work"], env=installed_wheel["env"],
             timeout=60).stdout.split()
    assert int(n[0]) > 0 and Path(n[1]).is_relative_to(installed_wheel["site"]), n


def test_compile_run_and_bench_from_the_installed_wheel(installed_wheel):
    from edge_sdk.timing.package_figures import model_version

    cli, work, env = installed_wheel["bin"] / "edge-sdk", installed_wheel["work"], installed_wheel["env"]
    tiny = ["--alpha", "0.25", "--resolution", "64", "--classes", "10"]
    _run([cli, "compile", "mobilenet_v1", *tiny, "--target", "pi3", "-o", "m.edgepkg"], cwd=work, env=env,
         timeout=1200)
    run = json.loads(_run([cli, "run", "m.edgepkg", "--json", "--repeat", "2"], cwd=work, env=env,
                          timeout=1200).stdout)
    assert run["target"] == "pi3" and run["emulated"] and run["golden"]["ok"], run["golden"]
    assert run["modelled_ms"] > 0 and run["modelled"]["target"] == "pi3"
    assert run["model_version"] == model_version()  # the wheel's timing model: the same sources, timing.c included
    bench = json.loads(_run([cli, "bench", "mobilenet_v1", *tiny, "--emulate", "pi3", "--no-store", "--json"],
                            cwd=work, env=env, timeout=1800).stdout)
    (row,) = bench["rows"]
    assert row["status"] == "ok" and row["instructions"] > 0 and row["modelled_ms"] > 0, row
    assert sorted(p.name for p in work.iterdir()) == ["m.edgepkg"]  # nothing else written where it ran


@pytest.mark.qemu
def test_reduced_demo_from_the_installed_wheel(installed_wheel, reduced_demo):
    """The session's reduced demo (tests/conftest.py) is the wheel's: its CLI, from an empty folder."""
    assert reduced_demo.cli == installed_wheel["bin"] / "edge-sdk"
    p = reduced_demo
    assert p.rc == 0, f"exit {p.rc}\n{p.out[-3000:]}\n{p.err[-3000:]}"
    doc = json.loads(p.out[p.out.index('{\n  "latency"'):])
    rows = doc["latency"]
    assert {(r["device"], r["target"]) for r in rows} == {("pi1", "pi3"), ("loop1", "host")}
    assert all(r["frames"] == p.frames and r["golden_ok"] and r["median_ms"] > 0 for r in rows), rows
    assert p.html.is_file() and p.db.is_file()
    assert p.left_in_cwd == []  # nothing written where it ran
