"""The built wheel, installed into a fresh venv outside the checkout (tests/conftest.py installed_wheel).

The venv is fresh for edge_sdk only: the wheel is installed with --no-deps and a .pth file puts the test
process's own site-packages (TVM, numpy, ... as pip installed them) after the venv's, without running that
folder's .pth files, so the checkout's editable install is not on the path (tests/test_wheel.py asserts it).
That keeps it offline and quick; the dependencies' own install is what `pip install` of the pyproject does
in the README.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(argv, *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       check=False)
    assert p.returncode == 0, f"{argv}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def install_wheel(tmp: Path) -> dict:
    """{"bin": the fresh venv's bin folder, "work": an empty working folder outside the checkout,
    "env": the environment (no PYTHONPATH), "wheel": the .whl, "site": the venv's site-packages}."""
    src = tmp / "src"  # a copy, so the build's build/ and egg-info/ stay out of the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "edge_sdk", src / "edge_sdk", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src], cwd=tmp, env=env,
        timeout=600)
    (wheel,) = (tmp / "dist").glob("edge_sdk-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=env, timeout=120)
    py = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel], cwd=tmp,
        env=env, timeout=300)
    site = Path(run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp, env=env,
                    timeout=60).stdout.strip())
    (site / "_edge_sdk_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "work"
    work.mkdir()
    return {"bin": venv / "bin", "work": work, "env": env, "wheel": wheel, "site": site}
