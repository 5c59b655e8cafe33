"""End to end on an emulated Raspberry Pi: arm64 Debian, its own arm64 sshd under qemu (cortex-a53),
in its own network namespace. A pi3 package is deployed there, its golden check runs there with
the aarch64 runtime bundle, and a remote run gives the package's golden output.
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.deploy import LocalPackage, deploy
from edge_sdk.fleet.remote import RemoteRun, run_remote
from edge_sdk.package import open_package

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


def test_deploy_and_run_a_pi3_package_on_an_emulated_pi(emulated_pis, pi3_package):
    pi = emulated_pis.devices[0]
    devices = load_fleet(emulated_pis.fleet_yaml).select()
    kh = emulated_pis.root / "known_hosts"
    pkg = LocalPackage.load(pi3_package)
    assert pkg.arch == "aarch64"

    results = deploy(devices, [pkg], known_hosts=kh)
    assert results.all_ok, [str(r.error) for r in results.failed]
    rep = results[0].value
    assert rep.runtime == "installed" and rep.packages[0].action == "installed"
    assert rep.packages[0].golden["ok"] and rep.packages[0].bytes_sent == pkg.size

    # the device really is an arm64 machine of its own, reached over its veth
    ssh = ["ssh", "-i", str(emulated_pis.client_key), "-o", f"UserKnownHostsFile={kh}",
           "-o", "StrictHostKeyChecking=yes", f"pi@{pi.ip}"]
    out = subprocess.run([*ssh, "uname -m; hostname; readlink .edge-sdk/models/*/current"],
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out == ["aarch64", pi.name, pkg.sha256]

    res = run_remote(devices[0], pi3_package, RemoteRun(repeat=2), known_hosts=kh)
    golden = open_package(pi3_package, Path(tempfile.mkdtemp())).golden_output.reshape(-1)
    assert res["golden"]["ok"] and res["arch"] == "aarch64"
    top = res["top_k"][0]
    assert top["class"] == int(np.argmax(golden))
    np.testing.assert_allclose(top["score"], golden[top["class"]], rtol=1e-4, atol=1e-5)

    again = deploy(devices, [pkg], known_hosts=kh)
    assert again.all_ok and again[0].value.bytes_sent == 0

    netns, dev_dir = pi.netns, pi.dir
    emulated_pis.stop()
    assert netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(dev_dir in line for line in Path("/proc/self/mountinfo").read_text().splitlines())
