"""End to end on an emulated Raspberry Pi: arm64 Debian, its own arm64 sshd under qemu (cortex-a53),
in its own network namespace, for both suites Raspberry Pi OS 64-bit is built on: bookworm (Python 3.11)
and trixie (Python 3.13). A pi3 package is deployed there (the device's python3 checks its signature),
its golden check runs there with the aarch64 runtime bundle, the bundle's Python loader runs it with the
device's python3, and a remote run gives the package's golden output.
"""
from __future__ import annotations

import json
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
DEVICE_PYTHON = {"bookworm": [3, 11], "trixie": [3, 13]}

# The bundle's Python loader, run by the device's own python3 (-I: nothing but the bundle on the path).
_LOADER_RUN = r"""
import json, sys
runtime, pkg = sys.argv[1:]
sys.path[:0] = [runtime, runtime + "/python"]
import numpy as np
from edge_sdk_runtime.loader import load
y = load(pkg + "/model.so", pkg + "/params.bin").run(np.load(pkg + "/golden_input.npy"))
print(json.dumps({"python": list(sys.version_info[:2]), "out": y.reshape(-1).tolist()}))
"""


def _loader_on_device(ssh: list[str]) -> dict:
    cmd = f"cd .edge-sdk && exec python3 -I -c '{_LOADER_RUN}' runtime/current models/*/current"
    p = subprocess.run([*ssh, cmd], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("emulated_pis", ["bookworm", "trixie"], indirect=True)
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

    golden = open_package(pi3_package, Path(tempfile.mkdtemp())).golden_output.reshape(-1)
    loaded = _loader_on_device(ssh)  # tvm_ffi's extension for this Python: cp311 or cp313 from one bundle
    assert loaded["python"] == DEVICE_PYTHON[pi.suite]
    np.testing.assert_allclose(loaded["out"], golden, rtol=1e-4, atol=1e-5)

    res = run_remote(devices[0], pi3_package, RemoteRun(repeat=2), known_hosts=kh)
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
