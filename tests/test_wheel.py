"""`pip install` of the built wheel works outside the checkout: the wheel is built from the package's files,
installed into a fresh venv in a temporary folder, and its `edge-sdk` runs compile, run --json (modelled Pi
ms of a pi3 package), bench --emulate pi3 and a reduced demo from another folder, with no PYTHONPATH.

The venv is fresh for edge_sdk only: the wheel is installed with --no-deps and a .pth file puts this test's
own site-packages (TVM, numpy, ... as pip installed them) after the venv's, without running that folder's
.pth files, so the checkout's editable install is not on the path (asserted). That keeps the test offline
and quick; the dependencies' own install is what `pip install` of the pyproject does in the README.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(argv, *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       check=False)
    assert p.returncode == 0, f"{argv}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh venv's bin folder, an empty working folder outside the checkout, the environment)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy, so the build's build/ and egg-info/ stay out of the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "edge_sdk", src / "edge_sdk", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src], cwd=tmp, env=env,
         timeout=600)
    (wheel,) = (tmp / "dist").glob("edge_sdk-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=env, timeout=120)
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel], cwd=tmp,
         env=env, timeout=300)
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp, env=env,
                     timeout=60).stdout.strip())
    (site / "_edge_sdk_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "work"
    work.mkdir()
    return {"bin": venv / "bin", "work": work, "env": env, "wheel": wheel, "site": site}


def test_the_wheel_carries_what_the_cli_reads_at_run_time(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for need in ("edge_sdk/runtime/device/runner.cc", "edge_sdk/runtime/device/runner_profile.h", "edge_sdk/runtime/device/runner_kernel.h",
                 "edge_sdk/qemu/plugins/timing.c", "edge_sdk/qemu/build_plugins.sh",
                 "edge_sdk/apps/classify/classify.py", "edge_sdk/apps/classify/sources.py",
                 "edge_sdk/devices/emulated_pi.py", "edge_sdk/devices/loopback.py"):
        assert need in names, need
    where = _run([installed["bin"] / "python", "-c", "import edge_sdk; print(edge_sdk.__file__)"],
                 cwd=installed["work"], env=installed["env"], timeout=60).stdout.strip()
    assert Path(where).is_relative_to(installed["site"]), where  # the wheel's copy, not the checkout's
    # the shipped per-layer choice records (compile applies them by default on Pi targets), and the installed
    # package finds them
    shipped = sorted((ROOT / "edge_sdk/tune/records/choice").glob("*.json"))
    assert shipped
    for p in shipped:
        assert f"edge_sdk/tune/records/choice/{p.name}" in names, p.name
    n = _run([installed["bin"] / "python", "-c", "from edge_sdk.tune import choice_records as R; "
              "print(len(R.load('cortex-a53')), R.root())"], cwd=installed["work"], env=installed["env"],
             timeout=60).stdout.split()
    assert int(n[0]) > 0 and Path(n[1]).is_relative_to(installed["site"]), n


def test_compile_run_and_bench_from_the_installed_wheel(installed):
    from edge_sdk.timing.package_figures import model_version

    cli, work, env = installed["bin"] / "edge-sdk", installed["work"], installed["env"]
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
def test_reduced_demo_from_the_installed_wheel(installed, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the demo starts an emulated Pi and a loopback sshd (root)")
    from edge_sdk.devices import stand_in_module

    try:
        stand_in_module("emulated_pi").check_host()
    except RuntimeError as e:
        pytest.skip(str(e))
    cli, work, env = installed["bin"] / "edge-sdk", installed["work"], installed["env"]
    db, html = tmp_path / "results.sqlite", tmp_path / "dash.html"
    p = _run([cli, "demo", "--alpha", "0.25", "--resolution", "64", "--classes", "10", "--frames", "2",
              "--accuracy-images", "0", "--no-ablation", "--db", db, "--dashboard", html, "--json"],  # packages: $EDGE_SDK_CACHE/demo
             cwd=work, env=env, timeout=3600)
    doc = json.loads(p.stdout[p.stdout.index('{\n  "latency"'):])
    rows = doc["latency"]
    assert {(r["device"], r["target"]) for r in rows} == {("pi1", "pi3"), ("loop1", "host")}
    assert all(r["frames"] == 2 and r["golden_ok"] and r["median_ms"] > 0 for r in rows), rows
    assert html.is_file() and db.is_file()
