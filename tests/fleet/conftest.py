"""Fixtures that start real OpenSSH servers (edge_sdk/devices/loopback.py) for the fleet tests,
and emulated arm64 Pis (edge_sdk/devices/emulated_pi.py) for the one qemu test.

`loopback_fleet` (one per session, 3 devices) is for tests that leave the devices as they found
them; `fresh_fleet` (per test) is for tests that stop a device or change its host key.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.devices import stand_in_module



loopback = stand_in_module("loopback")
emulated = stand_in_module("emulated_pi")


def _require_sshd():
    if os.geteuid() != 0:
        pytest.skip("the loopback fleet creates Unix users and needs root")
    if not os.access(loopback.SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        pytest.skip("needs openssh-server (/usr/sbin/sshd) and ssh-keygen")


def _start(n: int):
    root = tempfile.mkdtemp(prefix="edge-sdk-loopback-")  # under /tmp: device users must reach their homes
    return loopback.LoopbackFleet.start(n, root)


@pytest.fixture(scope="session")
def loopback_fleet():
    _require_sshd()
    fleet = _start(3)
    yield fleet
    fleet.stop()


@pytest.fixture
def fresh_fleet():
    _require_sshd()
    fleet = _start(3)
    yield fleet
    fleet.stop()


@pytest.fixture
def known_hosts_for(tmp_path):
    """known_hosts listing a loopback fleet's keys, written from the servers' own .pub files
    (not through edge-sdk's trust code, which is what some tests check)."""
    def write(fleet):
        return fleet.write_known_hosts(tmp_path / "known_hosts")
    return write


@pytest.fixture
def emulated_pis(request):
    """One emulated Pi (arm64 sshd under qemu in its own namespaces); builds the cached rootfs
    on first use (minutes). Its Debian suite: the default (bookworm), or the one a test gives with
    @pytest.mark.parametrize("emulated_pis", ["trixie"], indirect=True)."""
    suite = getattr(request, "param", None)
    if os.geteuid() != 0:
        pytest.skip("emulated Pis need root (namespaces, mounts)")
    try:
        emulated.check_host()
    except emulated.EmulatedError as e:
        pytest.skip(str(e))
    root = tempfile.mkdtemp(prefix="edge-sdk-pis-")
    fleet = emulated.EmulatedFleet.start(1, root, trust=True, suite=suite)
    yield fleet
    fleet.stop()


def _variant(src: Path, out: Path, *, note: str, golden_shift: float = 0.0, arch: str | None = None,
             pad: int = 0) -> Path:
    """Another package of the same model: a different sha256 (manifest note), optionally with a
    golden output the model cannot meet, claiming another architecture, or `pad` bytes bigger."""
    from edge_sdk.package import open_package, write_package

    with tempfile.TemporaryDirectory() as tmp:
        pkg = open_package(src, Path(tmp))
        m = {k: v for k, v in pkg.manifest.items() if k not in ("members", "format")}
        m["note"] = note + " " * pad
        if arch:
            m["target"] = dict(m["target"], arch=arch)
        if golden_shift:
            np.save(pkg.member("golden_output.npy"), pkg.golden_output + np.float32(golden_shift))
        return write_package(out, manifest=m, files={n: pkg.member(n) for n in
                                                     ("model.so", "params.bin", "golden_input.npy", "golden_output.npy")})


@pytest.fixture(scope="session")
def variant_package():
    return _variant


@pytest.fixture(scope="session")
def v1(host_package):
    from edge_sdk.fleet.deploy import LocalPackage

    return LocalPackage.load(host_package)


@pytest.fixture(scope="session")
def v2(host_package, tmp_path_factory):
    from edge_sdk.fleet.deploy import LocalPackage

    return LocalPackage.load(_variant(host_package, tmp_path_factory.mktemp("v2") / "v2.edgepkg", note="v2"))


@pytest.fixture
def fleet(fresh_fleet, known_hosts_for):
    """(the loopback fleet, its devices as the fleet file gives them, a known_hosts with their keys)"""
    from edge_sdk.fleet.config import load_fleet

    return fresh_fleet, load_fleet(fresh_fleet.fleet_yaml).select(), known_hosts_for(fresh_fleet)
