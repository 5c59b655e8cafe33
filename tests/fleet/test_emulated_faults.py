"""A network cut on an emulated Pi: its veth is taken down from the host side while a package is
being uploaded. No RST or FIN ever arrives (the link is just silent, as when Wi-Fi drops), so only
edge-sdk's own timeouts (Connection io_timeout / connect_timeout) can end the deploy; it must end
with a clear error, the previous version must still be current and run, and once the link is back
a re-deploy must succeed and leave no leftovers. One device only (CI time).
"""
from __future__ import annotations

import functools
import hashlib
import subprocess
import time
from pathlib import Path

import pytest

from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.deploy import LocalPackage, deploy
from edge_sdk.fleet.remote import RemoteRun, run_remote
from edge_sdk.fleet.ssh import Connection
from edge_sdk.package import MEMBERS

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


def _link(veth: str, state: str) -> None:
    subprocess.run(["ip", "link", "set", veth, state], check=True, capture_output=True)


@pytest.mark.timeout(1200)
def test_link_down_mid_upload_times_out_and_keeps_previous(emulated_pis, pi3_package, variant_package, tmp_path):
    pi = emulated_pis.devices[0]
    devices = load_fleet(emulated_pis.fleet_yaml).select()
    kh = emulated_pis.root / "known_hosts"
    home = Path(pi.dir) / "upper" / "home" / "pi" / ".edge-sdk"  # the overlay's upper layer, read from the host
    v1 = LocalPackage.load(pi3_package)
    v2 = LocalPackage.load(variant_package(pi3_package, tmp_path / "v2.edgepkg", note="v2", pad=4 << 20))
    assert deploy(devices, [v1], known_hosts=kh).all_ok

    down: list[float] = []

    def progress(name, text, done, total):
        if "upload" in text and 0 < done < total and done > total // 4 and not down:
            _link(pi.veth, "down")
            down.append(time.monotonic())

    short = functools.partial(Connection, io_timeout=10)
    try:
        r = deploy(devices, [v2], known_hosts=kh, progress=progress, connect_timeout=5, connection_factory=short)
        ended = time.monotonic()
    finally:
        _link(pi.veth, "up")
    assert down, "the upload ended before the link could be taken down"
    err = str(r[0].error)
    assert not r.all_ok and pi.name in err, err
    assert "connection broke" in err or "timed out" in err or "unreachable" in err, err
    print(f"\nlink down {ended - down[0]:.1f} s before the deploy gave up: {err[:300]}")

    model = home / "models" / v1.name
    assert (model / "current").readlink().name == v1.sha256
    for name in MEMBERS:
        assert hashlib.sha256((model / v1.sha256 / name).read_bytes()).hexdigest() == v1.members[name]
    res = run_remote(devices[0], pi3_package, RemoteRun(repeat=1), known_hosts=kh)
    assert res["golden"]["ok"] and res["arch"] == "aarch64"

    again = deploy(devices, [v2], known_hosts=kh)
    assert again.all_ok, str(again[0].error)
    assert (model / "current").readlink().name == v2.sha256
    left = [p.name for p in home.rglob(".*") if ".part-" in p.name or ".tmp-" in p.name]
    assert left == []
