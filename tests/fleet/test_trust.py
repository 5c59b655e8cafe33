"""`fleet trust` and `fleet status` against real OpenSSH servers."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.ssh import Connection
from edge_sdk.fleet.trust import fleet_status, status, trust


def keygen_fingerprint(pub_file) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", os.fspath(pub_file)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def test_trust_records_keys_then_connections_work(loopback_fleet, tmp_path):
    kh = tmp_path / "edge-sdk" / "known_hosts"  # parent does not exist yet
    devices = load_fleet(loopback_fleet.fleet_yaml).select()
    results = trust(devices, kh)
    assert [r.value.state for r in results] == ["added"] * 3
    for r in results:
        loop = loopback_fleet[r.device.name]
        assert r.value.fingerprint == keygen_fingerprint(loop.host_key_file.with_suffix(".pub"))
        assert r.value.fingerprint in str(r.value)
    lines = set(kh.read_text().splitlines())
    assert lines == {f"[{d.ip}]:{d.port} {d.public_host_key()}" for d in loopback_fleet.devices}
    assert kh.stat().st_mode & 0o077 == 0
    with Connection(devices[0], known_hosts=kh) as c:
        assert c.run(["true"]).ok
    before = kh.read_text()
    assert [r.value.state for r in trust(devices, kh)] == ["known"] * 3
    assert kh.read_text() == before


def test_trust_changed_key_needs_replace(fresh_fleet, tmp_path):
    kh = tmp_path / "known_hosts"
    devices = load_fleet(fresh_fleet.fleet_yaml).select()
    trust(devices, kh)
    fresh_fleet.stop_device("loop2")
    fresh_fleet.start_device("loop2", new_host_key=True)
    before = kh.read_text()
    results = trust(devices, kh)
    assert [r.ok for r in results] == [True, False, True]
    assert "CHANGED" in str(results[1].error) and "--replace" in str(results[1].error)
    assert kh.read_text() == before  # the old key stays until the user says otherwise
    results = trust(devices, kh, replace=True)
    assert [r.value.state for r in results] == ["known", "replaced", "known"]
    with Connection(devices[1], known_hosts=kh) as c:
        assert c.run(["true"]).ok


def test_trust_with_a_device_down_records_the_others(fresh_fleet, tmp_path):
    kh = tmp_path / "known_hosts"
    devices = load_fleet(fresh_fleet.fleet_yaml).select()
    fresh_fleet.stop_device("loop3")
    results = trust(devices, kh, timeout=5)
    assert [r.ok for r in results] == [True, True, False]
    assert "unreachable" in str(results[2].error)
    assert len(kh.read_text().splitlines()) == 2


def test_trust_checks_a_pinned_key_without_recording_it(loopback_fleet, tmp_path):
    kh = tmp_path / "known_hosts"
    dev = load_fleet(loopback_fleet.fleet_yaml).devices["loop1"]
    pinned = dataclasses.replace(dev, host_key=loopback_fleet["loop1"].public_host_key())
    wrong = dataclasses.replace(dev, host_key=loopback_fleet["loop2"].public_host_key())
    results = trust([pinned, wrong], kh)
    assert results[0].value.state == "pinned"
    assert results[1].failed and "does not match" in str(results[1].error)
    assert not kh.exists()


def test_status_reads_the_device_layout(loopback_fleet, known_hosts_for):
    kh = known_hosts_for(loopback_fleet)
    dev = load_fleet(loopback_fleet.fleet_yaml).devices["loop2"]
    sha = hashlib.sha256(b"package").hexdigest()
    empty = status(dev, known_hosts=kh)
    assert empty.reachable and empty.runtime_versions == () and empty.packages == () and empty.models == {}
    with Connection(dev, known_hosts=kh) as c:
        c.run(["mkdir", "-p", ".edge-sdk/runtime/0.1.0", ".edge-sdk/packages", ".edge-sdk/models/mobilenet_v1"])
        c.run(["ln", "-s", "0.1.0", ".edge-sdk/runtime/current"])
        c.run(["touch", f".edge-sdk/packages/{sha}.edgepkg", ".edge-sdk/packages/junk.txt"])
        c.run(["ln", "-s", f"../../packages/{sha}.edgepkg", ".edge-sdk/models/mobilenet_v1/current"])
    try:
        s = status(dev, known_hosts=kh)
    finally:
        with Connection(dev, known_hosts=kh) as c:
            c.run(["rm", "-rf", ".edge-sdk"])
    assert s.reachable and s.error is None
    assert s.arch == os.uname().machine
    assert s.runtime_versions == ("0.1.0",) and s.runtime_current == "0.1.0"
    assert s.packages == (sha,)
    assert s.models["mobilenet_v1"].package_sha256 == sha
    assert s.models["mobilenet_v1"].current == f"../../packages/{sha}.edgepkg"
    st = os.statvfs(loopback_fleet["loop2"].home)  # same machine: the independent reference
    assert s.free_bytes == pytest.approx(st.f_bavail * st.f_frsize, rel=0.01)
    temp = Path("/sys/class/thermal/thermal_zone0/temp")
    assert s.temperature_c == (round(int(temp.read_text()) / 1000, 1) if temp.exists() else None)
    assert s.as_dict()["device"] == "loop2"


def test_fleet_status_reports_an_unreachable_device(fresh_fleet, known_hosts_for, tmp_path):
    kh = known_hosts_for(fresh_fleet)
    devices = load_fleet(fresh_fleet.fleet_yaml).select()
    fresh_fleet.stop_device("loop1")
    results = fleet_status(devices, known_hosts=kh, timeout=5)
    assert [r.value.reachable for r in results] == [False, True, True]
    assert "loop1" in results[0].value.error
    refused = status(devices[1], known_hosts=tmp_path / "empty")  # unknown key: not reachable for us
    assert not refused.reachable and "unknown host key" in refused.error
