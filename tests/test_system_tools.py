"""The system programs pip cannot bring: a missing one is a clear error naming it and its Debian package
(MissingDependency, exit 9), before any work starts and with nothing half-written."""
from __future__ import annotations

import shutil

import pytest

from edge_sdk.cli import main
from edge_sdk.errors import MissingDependency
from edge_sdk.system_tools import DEMO, TOOLS, require


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """PATH with only python's own folder: the apt-installed programs are not found."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def test_every_tool_names_a_package_and_the_readme_lists_them():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for tool, (package, why) in TOOLS.items():
        assert package and why, tool
        assert package in readme, f"README's pip install section does not name {package} ({tool})"
    assert set(DEMO) <= set(TOOLS)


def test_require_names_each_missing_program_with_its_package(bare_path):
    with pytest.raises(MissingDependency) as e:
        require(("qemu-aarch64", "llvm-mc-14", "no-such-tool-xyz"), why="testing")
    text = str(e.value)
    assert e.value.exit_code == 9
    assert "'qemu-aarch64' (qemu-user)" in text and "'llvm-mc-14' (llvm-14)" in text and "no-such-tool-xyz" in text
    assert "apt-get install qemu-user llvm-14" in e.value.hint


def test_require_passes_when_present():
    present = [t for t in ("sh", "ls") if shutil.which(t)]
    require(present, why="testing")  # no error


# compile for a Pi without the cross compiler: tests/test_cli.py (exit 9, the package named, nothing written)


def test_demo_checks_its_programs_before_it_compiles(bare_path, tmp_path, capsys):
    rc = main(["demo", "--alpha", "0.25", "--resolution", "32", "--frames", "1", "--accuracy-images", "0",
               "--out-dir", str(tmp_path / "pkgs"), "--db", str(tmp_path / "r.sqlite")])
    err = capsys.readouterr().err
    assert rc == 9, err
    assert "debootstrap" in err and "qemu-user-static" in err and "Traceback" not in err
    assert not (tmp_path / "pkgs").exists()  # nothing compiled
