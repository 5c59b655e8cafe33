"""Fleet logic over the stand-in connection (edge_sdk/devices/folders.py): each device is a local folder,
commands run by subprocess there. No sshd, so these are quick; SSH itself is tested against real
servers in test_ssh.py, test_deploy.py and test_deploy_faults.py.

What is checked here: per-device results and the group error, the order of deploy's steps, the
decisions rollback takes, and what a failure reports. The device's files are read back with os and
hashlib here (the independent reference), never through the stand-in. The tests that deploy need
the compiled host package (a session fixture that compiles for ~15 s), so they are marked slow.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from edge_sdk.errors import DeviceError, EdgeError, UsageError
from edge_sdk.fleet.config import parse_fleet
from edge_sdk.fleet.deploy import LocalPackage, deploy
from edge_sdk.fleet.group import GroupError, for_each_device
from edge_sdk.fleet.remote import RemoteRun, rollback, run_remote
from edge_sdk.devices.folders import StandInDevices
from edge_sdk.fleet.trust import fleet_status

FLEET = """\
defaults: {target: host}
devices:
  cam1: {host: pi@10.9.0.1}
  cam2: {host: pi@10.9.0.2}
  cam3: {host: pi@10.9.0.3}
"""


@pytest.fixture
def devices():
    return parse_fleet(FLEET).select()


@pytest.fixture
def stand_in(tmp_path):
    return StandInDevices(tmp_path / "devices")


def _model_dir(stand_in, name: str, pkg: LocalPackage) -> Path:
    return stand_in.home(name) / ".edge-sdk" / "models" / pkg.name


def _link(path: Path) -> str | None:
    return os.readlink(path) if path.is_symlink() else None


def _leftovers(home: Path) -> list[str]:
    root = home / ".edge-sdk"
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if ".part-" in p.name or ".tmp-" in p.name)


# -- group results ------------------------------------------------------------------------------
def test_group_records_every_device_in_order_and_raises_with_all_results(devices, stand_in):
    stand_in.down.add("cam2")

    def whoami(device):
        with stand_in.connect(device) as c:
            if device.name == "cam3":
                raise KeyError("a bug, not an EdgeError")
            return c.run(["sh", "-c", 'printf %s "$HOME"']).stdout

    seen = []
    results = for_each_device(devices, whoami, max_workers=3, on_done=lambda r: seen.append(r.device.name))
    assert [r.device.name for r in results] == ["cam1", "cam2", "cam3"]
    assert [r.ok for r in results] == [True, False, False]
    assert results[0].value == str(stand_in.home("cam1"))
    assert isinstance(results[1].error, DeviceError) and "cam2" in str(results[1].error)
    assert isinstance(results[2].error, KeyError)
    assert sorted(seen) == ["cam1", "cam2", "cam3"]
    with pytest.raises(GroupError, match="whoami failed on 2 of 3 devices") as e:
        results.raise_if_failed("whoami")
    assert isinstance(e.value, DeviceError) and e.value.exit_code == DeviceError.exit_code
    assert e.value.results is results and [r.device.name for r in e.value.failed] == ["cam2", "cam3"]
    assert "cam2: " in str(e.value) and "cam3: " in str(e.value) and "cam1" not in str(e.value)


def test_an_empty_group_and_an_all_ok_group_raise_nothing(devices, stand_in):
    assert for_each_device([], lambda d: 1) == []
    results = for_each_device(devices, lambda d: d.name.upper())
    results.raise_if_failed("upper")
    assert results.all_ok and [r.value for r in results] == ["CAM1", "CAM2", "CAM3"]


def test_a_failed_command_names_the_device_the_command_and_its_output(devices, stand_in):
    with stand_in.connect(devices[0]) as c, pytest.raises(DeviceError) as e:
        c.run(["sh", "-c", 'echo "no room for $1" >&2; exit 5', "sh", "model.so"])
    assert "device cam1" in str(e.value) and "exited with 5" in str(e.value) and "no room for model.so" in str(e.value)


# -- deploy ---------------------------------------------------------------------------------------
def _steps(stand_in, name: str, pkg: LocalPackage) -> list[str]:
    """deploy's steps on one device, named from the commands it ran (in order)."""
    steps = []
    for op, args in ((op, args) for dev, op, args in stand_in.log if dev == name):
        text = " ".join(args)
        if op == "put":
            steps.append("upload package" if pkg.sha256 in args[1] else "upload runtime")
        elif "--expect" in args:
            steps.append("golden")
        elif "mv -T \".current.tmp-$tag\" current" in text:  # SWITCH_SH's one rename of current
            steps.append("switch")
        elif "tar -xf" in text:
            steps.append("extract package")
        elif "tar -xzf" in text:
            steps.append("extract runtime")
    return steps


@pytest.mark.slow
def test_deploy_order_golden_before_switch_and_an_unchanged_redeploy(devices, stand_in, v1):
    results = deploy(devices[:2], [v1], connection_factory=stand_in.connect)
    assert results.all_ok, [str(r.error) for r in results.failed]
    for name in ("cam1", "cam2"):
        assert _steps(stand_in, name, v1) == ["upload runtime", "extract runtime", "upload package",
                                              "extract package", "golden", "switch"]
        model = _model_dir(stand_in, name, v1)
        assert _link(model / "current") == v1.sha256
        stored = stand_in.home(name) / ".edge-sdk" / "packages" / f"{v1.sha256}.edgepkg"
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == v1.sha256
        assert _leftovers(stand_in.home(name)) == []
    assert [r.value.packages[0].action for r in results] == ["installed", "installed"]
    assert all(r.value.package_bytes_sent == v1.size for r in results)

    stand_in.log.clear()
    again = deploy(devices[:1], [v1], connection_factory=stand_in.connect)
    report = again[0].value
    assert (report.runtime, report.packages[0].action, report.bytes_sent) == ("present", "unchanged", 0)
    assert "golden" not in _steps(stand_in, "cam1", v1) and not [1 for _, op, _ in stand_in.log if op == "put"]


@pytest.mark.slow
def test_a_failed_golden_check_keeps_current_and_reports_the_device(devices, stand_in, v1, host_package,
                                                                    variant_package, tmp_path):
    deploy(devices[:2], [v1], connection_factory=stand_in.connect).raise_if_failed("deploy")
    bad = LocalPackage.load(variant_package(host_package, tmp_path / "bad.edgepkg", note="bad", golden_shift=5.0))
    stand_in.down.add("cam3")
    results = deploy(devices, [bad], connection_factory=stand_in.connect)
    assert [r.ok for r in results] == [False, False, False]
    for r in results[:2]:
        report = r.error.report
        assert report.packages[0].action == "failed" and "golden check of bad.edgepkg failed" in report.packages[0].error
        assert f"device {r.device.name}" in report.packages[0].error
        assert _link(_model_dir(stand_in, r.device.name, v1) / "current") == v1.sha256
        assert _leftovers(stand_in.home(r.device.name)) == []
        assert not (stand_in.home(r.device.name) / ".edge-sdk" / "packages" / f"{bad.sha256}.edgepkg").exists()
    assert "unreachable" in results[2].error.report.error
    with pytest.raises(GroupError, match="deploy failed on 3 of 3 devices"):
        results.raise_if_failed("deploy")


@pytest.mark.slow
def test_a_package_for_another_architecture_is_refused_before_anything_is_sent(devices, stand_in, host_package,
                                                                               variant_package, tmp_path):
    arm = LocalPackage.load(variant_package(host_package, tmp_path / "arm.edgepkg", note="arm", arch="aarch64"))
    results = deploy(devices[:1], [arm], connection_factory=stand_in.connect)
    assert "it is x86_64, but the packages are built for aarch64" in results[0].error.report.error
    assert not [1 for _, op, _ in stand_in.log if op == "put"]


# -- status, run, rollback --------------------------------------------------------------------------
@pytest.mark.slow
def test_status_reads_what_deploy_wrote(devices, stand_in, v1):
    deploy(devices[:1], [v1], connection_factory=stand_in.connect).raise_if_failed("deploy")
    stand_in.down.add("cam2")
    results = fleet_status(devices[:2], connection_factory=stand_in.connect)
    st, down = results[0].value, results[1].value
    runtime = stand_in.home("cam1") / ".edge-sdk" / "runtime"
    assert st.reachable and st.runtime_current == os.readlink(runtime / "current")
    assert st.runtime_versions == (os.readlink(runtime / "current"),)
    assert st.packages == (v1.sha256,) and st.models[v1.name].package_sha256 == v1.sha256
    assert not down.reachable and "unreachable" in down.error


@pytest.mark.slow
def test_run_remote_refuses_a_package_that_is_not_installed(devices, stand_in, v1):
    with pytest.raises(DeviceError, match="is not installed there"):
        run_remote(devices[0], v1.path, RemoteRun(repeat=1), connection_factory=stand_in.connect)


@pytest.mark.slow
def test_rollback_decisions(devices, stand_in, v1, v2):
    dev = devices[0]
    with pytest.raises(UsageError, match="nothing is installed there"):
        rollback(dev, v1.name, connection_factory=stand_in.connect)
    deploy([dev], [v1], connection_factory=stand_in.connect).raise_if_failed("deploy")
    with pytest.raises(UsageError, match="did you mean"):
        rollback(dev, v1.name + "x", connection_factory=stand_in.connect)
    with pytest.raises(DeviceError, match="no previous version"):
        rollback(dev, v1.name, connection_factory=stand_in.connect)
    deploy([dev], [v2], connection_factory=stand_in.connect).raise_if_failed("deploy")
    model = _model_dir(stand_in, "cam1", v1)
    assert (_link(model / "current"), _link(model / "previous")) == (v2.sha256, v1.sha256)

    (model / v1.sha256 / "params.bin").write_bytes(b"damaged")
    with pytest.raises(DeviceError, match="fails its sha256 check; not rolling back"):
        rollback(dev, v1.name, connection_factory=stand_in.connect)
    assert _link(model / "current") == v2.sha256  # a refused rollback changes nothing

    deploy([dev], [v1], connection_factory=stand_in.connect).raise_if_failed("deploy")  # v1 again, intact
    back = rollback(dev, v1.name, connection_factory=stand_in.connect)
    assert (back["current"], back["previous"], back["golden"]["ok"]) == (v2.sha256, v1.sha256, True)
    assert (_link(model / "current"), _link(model / "previous")) == (v2.sha256, v1.sha256)
    assert _leftovers(stand_in.home("cam1")) == []


@pytest.mark.slow
def test_a_hook_can_fail_one_step_and_deploy_cleans_up(devices, stand_in, v1):
    def hook(name, op, args):
        if name == "cam2" and op == "run" and "--expect" in args:
            raise DeviceError(f"device {name}: [stand-in] the connection broke")

    stand_in.hook = hook
    results = deploy(devices[:2], [v1], connection_factory=stand_in.connect)
    assert [r.ok for r in results] == [True, False]
    assert "the connection broke" in results[1].error.report.packages[0].error
    assert _link(_model_dir(stand_in, "cam2", v1) / "current") is None
    assert _leftovers(stand_in.home("cam2")) == []
    assert isinstance(results[1].error, EdgeError)
