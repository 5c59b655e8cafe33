"""Deploy against real OpenSSH servers (the loopback fleet, x86: `host` packages).

The device's files are read back directly from the loopback users' homes (not through edge-sdk),
and checksums are recomputed here with hashlib: the independent reference.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.fleet.deploy import LocalBundle, LocalPackage, deploy
from edge_sdk.fleet.remote import RemoteRun, rollback, run_remote
from edge_sdk.fleet.ssh import Connection
from edge_sdk.package import open_package
from edge_sdk.runtime.bundle import ensure_bundle

pytestmark = pytest.mark.slow


def _model_dir(loop, pkg) -> Path:
    return loop.home / ".edge-sdk" / "models" / pkg.name


def _current(loop, pkg) -> str | None:
    link = _model_dir(loop, pkg) / "current"
    return os.readlink(link) if link.is_symlink() else None


def _leftovers(loop) -> list[str]:
    root = loop.home / ".edge-sdk"
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if ".part-" in p.name or ".tmp-" in p.name)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


class Recording(Connection):
    made: list[Connection] = []

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        Recording.made.append(self)


def test_deploy_then_unchanged_redeploy_sends_no_package_bytes(fleet, v1):
    loops, devices, kh = fleet
    Recording.made = []
    results = deploy(devices, [v1], known_hosts=kh, connection_factory=Recording)
    assert results.all_ok, [str(r.error) for r in results.failed]
    bundle = LocalBundle.for_arch("x86_64")
    for r in results:
        loop, rep = loops[r.device.name], r.value
        assert rep.runtime == "installed" and rep.packages[0].action == "installed"
        assert rep.packages[0].bytes_sent == v1.size and rep.runtime_bytes_sent == bundle.size
        assert rep.packages[0].golden["ok"] and rep.packages[0].golden["count"] == 10
        stored = loop.home / ".edge-sdk" / "packages" / f"{v1.sha256}.edgepkg"
        assert _sha(stored) == _sha(v1.path)
        assert _current(loop, v1) == v1.sha256 and not (_model_dir(loop, v1) / "previous").exists()
        rt = loop.home / ".edge-sdk" / "runtime"
        assert os.readlink(rt / "current") == bundle.id
        local = ensure_bundle("x86_64")
        for rel in json.loads((local / "bundle.json").read_text())["files"]:
            assert _sha(rt / bundle.id / rel) == _sha(local / rel), rel
        assert _leftovers(loop) == []
    assert sum(c.bytes_sent for c in Recording.made) == 3 * (v1.size + bundle.size)

    Recording.made = []
    again = deploy(devices, [v1], known_hosts=kh, connection_factory=Recording)
    assert again.all_ok
    assert [(r.value.runtime, r.value.packages[0].action) for r in again] == [("present", "unchanged")] * 3
    assert sum(c.bytes_sent for c in Recording.made) == 0  # measured on the connections themselves


def test_new_version_keeps_previous_then_rollback_and_remote_run(fleet, v1, v2, host_package):
    loops, devices, kh = fleet
    dev, loop = devices[0], loops[devices[0].name]
    assert deploy([dev], [v1], known_hosts=kh).all_ok
    r = deploy([dev], [v2], known_hosts=kh)
    assert r.all_ok and r[0].value.runtime == "present"
    assert _current(loop, v2) == v2.sha256 and os.readlink(_model_dir(loop, v2) / "previous") == v1.sha256
    stored = sorted(p.name for p in (loop.home / ".edge-sdk" / "packages").iterdir())
    assert stored == sorted(f"{v.sha256}.edgepkg" for v in (v1, v2))  # current and previous, nothing else

    res = run_remote(dev, v2.path, RemoteRun(repeat=3), known_hosts=kh)
    want = open_package(host_package, Path(tempfile.mkdtemp())).golden_output
    assert res["golden"]["ok"] and res["repeats"] == 3 and res["arch"] == "x86_64"
    assert res["top_k"][0]["class"] == int(np.argmax(want))
    lat = res["latency_ms"]  # the latency dict every run JSON carries (runtime/result.py latency_stats)
    assert set(lat) == {"median", "p10", "p90", "min", "max"}
    assert 0 < lat["min"] <= lat["p10"] <= lat["median"] <= lat["p90"] <= lat["max"]

    back = rollback(dev, v1.name, known_hosts=kh)
    assert back["current"] == v1.sha256 and back["golden"]["ok"]
    assert _current(loop, v1) == v1.sha256 and os.readlink(_model_dir(loop, v1) / "previous") == v2.sha256


def test_stopped_device_does_not_stop_the_others(fleet, v1, capsys):
    loops, devices, kh = fleet
    loops.stop_device("loop2")
    code = cli_main(["deploy", str(v1.path), "--fleet", str(loops.fleet_yaml), "--known-hosts", str(kh),
                           "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 8
    assert [d["ok"] for d in out] == [True, False, True]
    assert "loop2" in out[1]["error"] and "unreachable" in out[1]["error"]
    assert _current(loops["loop1"], v1) == v1.sha256 and _current(loops["loop3"], v1) == v1.sha256


def test_upload_damaged_in_transit_is_removed_and_previous_stays(fleet, v1, v2, tmp_path):
    loops, devices, kh = fleet
    dev, loop = devices[0], loops[devices[0].name]
    assert deploy([dev], [v1], known_hosts=kh).all_ok

    class Tampering(Connection):
        def put(self, local, remote_path, **kw):
            if not str(local).endswith(".edgepkg"):
                return super().put(local, remote_path, **kw)
            data = bytearray(Path(local).read_bytes())
            data[len(data) // 2] ^= 0xFF  # one bit flipped on the way
            bad = tmp_path / "in-transit.edgepkg"
            bad.write_bytes(bytes(data))
            return super().put(bad, remote_path, **kw)

    r = deploy([dev], [v2], known_hosts=kh, connection_factory=Tampering)
    assert not r.all_ok
    err = str(r[0].error)
    assert "arrived damaged" in err and v2.sha256 in err
    assert _current(loop, v1) == v1.sha256
    assert not (loop.home / ".edge-sdk" / "packages" / f"{v2.sha256}.edgepkg").exists()
    assert _leftovers(loop) == []


def test_bad_file_at_the_content_path_is_detected_and_replaced(fleet, v1):
    loops, devices, kh = fleet
    dev, loop = devices[0], loops[devices[0].name]
    store = loop.home / ".edge-sdk" / "packages"
    store.mkdir(parents=True)
    (store / f"{v1.sha256}.edgepkg").write_bytes(b"not the package")
    for p in (store.parent, store, store / f"{v1.sha256}.edgepkg"):
        shutil.chown(p, loop.user, loop.user)  # as the device user would have left it
    r = deploy([dev], [v1], known_hosts=kh)
    assert r.all_ok and "damaged copy" in r[0].value.packages[0].note
    assert r[0].value.packages[0].bytes_sent == v1.size
    assert _sha(store / f"{v1.sha256}.edgepkg") == v1.sha256


def test_golden_check_failure_on_the_device_keeps_previous(fleet, v1, host_package, tmp_path, variant_package):
    loops, devices, kh = fleet
    dev, loop = devices[0], loops[devices[0].name]
    assert deploy([dev], [v1], known_hosts=kh).all_ok
    bad = LocalPackage.load(variant_package(host_package, tmp_path / "bad.edgepkg", note="bad", golden_shift=0.5))
    r = deploy([dev], [bad], known_hosts=kh)
    assert not r.all_ok
    assert "golden check FAILED" in str(r[0].error) and "10 of 10" in str(r[0].error)
    assert _current(loop, v1) == v1.sha256
    assert not (loop.home / ".edge-sdk" / "packages" / f"{bad.sha256}.edgepkg").exists()
    assert not (_model_dir(loop, v1) / bad.sha256).exists() and _leftovers(loop) == []


def test_package_for_another_architecture_is_refused(fleet, host_package, tmp_path, variant_package):
    loops, devices, kh = fleet
    arm = LocalPackage.load(variant_package(host_package, tmp_path / "arm.edgepkg", note="arm", arch="aarch64"))
    r = deploy(devices[:1], [arm], known_hosts=kh)
    assert "it is x86_64, but the packages are built for aarch64" in str(r[0].error)
    assert not (loops["loop1"].home / ".edge-sdk" / "packages").exists() or \
        not list((loops["loop1"].home / ".edge-sdk" / "packages").iterdir())


def test_runner_expect_reports_mismatch_with_exit_code_3(v1, tmp_path):
    """The C++ golden check the device runs, against numpy's allclose as the reference."""
    pkg = open_package(v1.path, tmp_path / "pkg")
    runner = ensure_bundle("x86_64") / "bin" / "edge-runner"
    base = [str(runner), "--lib", str(pkg.member("model.so")), "--params", str(pkg.member("params.bin")),
            "--input", str(pkg.member("golden_input.npy")), "--repeat", "1", "--output", str(tmp_path / "o.npy")]
    ok = subprocess.run([*base, "--expect", str(pkg.member("golden_output.npy")), "--rtol", "1e-4", "--atol", "1e-5"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["golden"]["ok"]
    out = np.load(tmp_path / "o.npy")
    near = out.astype(np.float64).copy()
    near[0, 0] += 3e-4  # outside atol + rtol*|x| for any |x| < 2.9
    np.save(tmp_path / "near.npy", near)
    assert not np.allclose(out, near, rtol=1e-4, atol=1e-5)
    bad = subprocess.run([*base, "--expect", str(tmp_path / "near.npy"), "--rtol", "1e-4", "--atol", "1e-5"],
                         capture_output=True, text=True)
    assert bad.returncode == 3 and "golden check FAILED: 1 of 10" in bad.stderr
    assert json.loads(bad.stdout)["golden"]["mismatches"] == 1
