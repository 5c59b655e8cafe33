"""Issue 15 item 1: a deploy never loses the working version. Each device-side script (prepare and
its sweep, package extract, switch, runtime extract and placement) is stopped after each of its
commands in turn -- on real OpenSSH servers (the loopback fleet) -- and after every stop `current`
names a complete install whose members hash as its manifest says and whose golden pair passes with
the device's own runner; the next deploy then completes. Also: one device lock around every
mutating operation, damaged runtime files repaired, installed models re-checked before
runtime/current moves."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from edge_sdk.fleet import device_scripts as S
from edge_sdk.fleet import runtime_install as R
from edge_sdk.fleet.device_lock import device_lock
from edge_sdk.fleet.ssh import Connection
from edge_sdk.package import MEMBERS

D = importlib.import_module("edge_sdk.fleet.deploy")  # the module (edge_sdk.fleet.deploy is also its function)


def cut_variants(script: str):
    """(n, the script stopped before its line n) for every n where that is still valid sh."""
    lines = script.split("\n")
    for n in range(1, len(lines) + 1):
        variant = "\n".join([*lines[:n], "exit 97", *lines[n:]])
        if subprocess.run(["sh", "-n", "-c", variant], capture_output=True).returncode == 0:
            yield n, variant


def root(loop) -> Path:
    return loop.home / ".edge-sdk"


def live(loop, pkg_name: str) -> str:
    link = root(loop) / "models" / pkg_name / "current"
    assert link.is_symlink(), f"{link} is not a link"
    return os.readlink(link)


def assert_current_runs(loop, pkgs) -> str:
    """`current` names an install of one of `pkgs`, complete (every member's sha256) and passing its
    golden pair with the device's runtime/current runner. Returns the sha256 it runs."""
    name = pkgs[0].name
    d = root(loop) / "models" / name / "current"
    assert d.is_dir(), f"{name}: current ({live(loop, name)}) does not name a folder"
    got = {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in MEMBERS}
    sha = live(loop, name).lstrip(".").split(".tmp-")[0]  # <sha>, or .<sha>.tmp-<tag> mid-repair
    match = [p for p in pkgs if p.sha256 == sha and got == p.members]
    assert match, f"{name}: current holds no complete install ({got})"
    runner = root(loop) / "runtime" / "current" / "bin" / "edge-runner"
    r = subprocess.run([str(runner), "--lib", str(d / "model.so"), "--params", str(d / "params.bin"),
                        "--input", str(d / "golden_input.npy"), "--expect", str(d / "golden_output.npy"),
                        "--rtol", repr(match[0].rtol), "--atol", repr(match[0].atol), "--repeat", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["golden"]["ok"], r.stderr
    return match[0].sha256


def test_switch_stopped_after_each_command_keeps_a_working_current(fleet, v1, v2, monkeypatch):
    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    stopped = 0
    for n, script in cut_variants(S.SWITCH_SH):
        target = v2 if assert_current_runs(loop, [v1, v2]) == v1.sha256 else v1
        monkeypatch.setattr(D, "SWITCH_SH", script)
        res = D.deploy([dev], [target], known_hosts=kh)
        if not res.all_ok:  # else the stop was in a branch this state does not take (a repair's)
            assert "97" in str(res[0].error), f"line {n}: {res[0].error}"
            stopped += 1
        assert_current_runs(loop, [v1, v2])
    assert stopped >= 12
    monkeypatch.setattr(D, "SWITCH_SH", S.SWITCH_SH)
    target = v2 if assert_current_runs(loop, [v1, v2]) == v1.sha256 else v1
    assert D.deploy([dev], [target], known_hosts=kh).all_ok
    assert assert_current_runs(loop, [v1, v2]) == target.sha256
    folder = root(loop) / "models" / v1.name
    kept = {os.readlink(folder / "current"), os.readlink(folder / "previous")}
    assert {p.name for p in folder.iterdir()} == {"current", "previous", *kept}  # every leftover swept


def test_repair_of_the_live_copy_stopped_anywhere_keeps_it_running(fleet, v1, monkeypatch):
    """The same package again over a damaged live install: `current` is pointed at the checked new
    copy before the damaged one is moved, so no stop leaves it dangling or damaged-and-live."""
    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    repaired = 0
    for n, script in cut_variants(S.SWITCH_SH):
        cur = root(loop) / "models" / v1.name / "current"
        if os.readlink(cur) == v1.sha256:  # damage a member of the live copy (bit rot)
            with open(cur / "golden_input.npy", "r+b") as f:
                f.seek(-4, 2)
                f.write(b"\x7f\x7f\x7f\x7f")
        damaged = (cur / "golden_input.npy").stat().st_ino
        monkeypatch.setattr(D, "SWITCH_SH", script)
        D.deploy([dev], [v1], known_hosts=kh)
        target = os.readlink(cur)
        assert target == v1.sha256 or target.startswith(f".{v1.sha256}.tmp-"), f"line {n}: current -> {target}"
        if (cur / "golden_input.npy").stat().st_ino == damaged:
            assert n <= 25, f"line {n}: the stop came after current moved, yet current is the damaged copy"
            continue  # stopped before the repair touched anything: the damaged copy is as it was
        assert_current_runs(loop, [v1])
        repaired += 1
    assert repaired >= 10
    monkeypatch.setattr(D, "SWITCH_SH", S.SWITCH_SH)
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    assert os.readlink(root(loop) / "models" / v1.name / "current") == v1.sha256
    assert_current_runs(loop, [v1])


@pytest.mark.parametrize("script", ["PREPARE_SH", "EXTRACT_PACKAGE_SH"])
def test_prepare_and_extract_stopped_anywhere_leave_current_alone(fleet, v1, v2, monkeypatch, script):
    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    module = R if script == "PREPARE_SH" else D
    stopped = 0
    for n, variant in cut_variants(getattr(S, script)):
        monkeypatch.setattr(module, script, variant)
        res = D.deploy([dev], [v2], known_hosts=kh)
        stopped += not res.all_ok
        if res.all_ok:  # a stop in a branch not taken: the deploy went through; start again from v1
            assert_current_runs(loop, [v2])
            monkeypatch.setattr(module, script, getattr(S, script))
            assert D.deploy([dev], [v1], known_hosts=kh).all_ok
        assert assert_current_runs(loop, [v1, v2]) == v1.sha256, f"line {n}"
    assert stopped >= 4
    monkeypatch.setattr(module, script, getattr(S, script))
    assert D.deploy([dev], [v2], known_hosts=kh).all_ok
    assert assert_current_runs(loop, [v1, v2]) == v2.sha256


def test_runtime_repair_stopped_anywhere_keeps_a_working_runtime(fleet, v1, monkeypatch):
    """A damaged runtime file is found (every file hashed, not bundle.json alone) and repaired; the
    placement, stopped after each command, never leaves runtime/current without a working runner."""
    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    bundle = D.LocalBundle.for_arch(v1.arch)
    rt = root(loop) / "runtime"
    cuts = [("EXTRACT_RUNTIME_SH", n, v) for n, v in cut_variants(S.EXTRACT_RUNTIME_SH)] + \
        [("PLACE_RUNTIME_SH", n, v) for n, v in cut_variants(S.PLACE_RUNTIME_SH)] + [("PLACE_RUNTIME_SH", 0, None)]
    for name, n, script in cuts:
        live_rt = rt / "current"
        (live_rt / "edge_sdk_runtime" / "preprocess.py").write_text("# damaged\n")
        monkeypatch.setattr(R, "EXTRACT_RUNTIME_SH", S.EXTRACT_RUNTIME_SH)
        monkeypatch.setattr(R, name, script or getattr(S, name))
        res = D.deploy([dev], [v1], known_hosts=kh)
        assert (rt / "current").is_symlink(), f"{name} line {n}"
        assert_current_runs(loop, [v1])
        if n == 0:
            assert res.all_ok and res[0].value.runtime == "repaired", res[0].error
    assert os.readlink(rt / "current") == bundle.id
    files = {r: hashlib.sha256((rt / bundle.id / r).read_bytes()).hexdigest() for r in bundle.files}
    assert files == bundle.files  # repaired: every file as bundle.json lists it


def test_a_runtime_bundle_signed_by_an_untrusted_key_is_refused_on_the_device(fleet, v1, tmp_path, monkeypatch):
    """Sign the runtime bundle too: the device checks bundle.sig.json with the verifier it already runs."""
    from dataclasses import replace

    from edge_sdk import signing

    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    bundle = D.LocalBundle.for_arch(v1.arch)
    monkeypatch.setenv("EDGE_SDK_DATA", str(tmp_path / "stranger"))
    stranger = signing.signing_key()
    monkeypatch.delenv("EDGE_SDK_DATA")
    root_dir = Path(bundle.archive).with_suffix("").with_suffix("")
    forged = replace(bundle, signature=signing.sign_manifest((root_dir / "bundle.json").read_bytes(), stranger))
    monkeypatch.setattr(D.LocalBundle, "for_arch", classmethod(lambda cls, arch: forged))
    rt = root(loop) / "runtime"
    (rt / "current" / "edge_sdk_runtime" / "preprocess.py").write_text("# damaged\n")  # forces a reinstall
    res = D.deploy([dev], [v1], known_hosts=kh)
    assert not res.all_ok and "refused: untrusted" in str(res[0].error), res[0].error
    assert_current_runs(loop, [v1])


def _installed_with_a_broken_runtime(fleet, v1):
    """v1 deployed, and beside its runtime a "new" one, runtime/broken: a copy whose runner exits 3."""
    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    rt = root(loop) / "runtime"
    before = os.readlink(rt / "current")
    subprocess.run(["cp", "-a", str(rt / before), str(rt / "broken")], check=True)
    (rt / "broken" / "bin" / "edge-runner").write_text("#!/bin/sh\nexit 3\n")
    return loop, dev, kh, rt, before


def test_a_runtime_that_fails_an_installed_model_is_not_switched_to(fleet, v1, monkeypatch):
    loop, dev, kh, rt, before = _installed_with_a_broken_runtime(fleet, v1)
    with Connection(dev, known_hosts=kh) as conn, \
            pytest.raises(D.DeviceError, match=f"fails the golden check of installed model.*{v1.name}"):
        R.recheck_models(conn, ".edge-sdk/runtime/broken")
    assert os.readlink(rt / "current") == before
    assert_current_runs(loop, [v1])


def test_install_runtime_does_not_switch_to_a_runtime_that_fails_an_installed_model(fleet, v1, monkeypatch):
    """The same refusal through install_runtime itself: a runtime already on the device (its files taken as
    intact) whose runner fails the installed model's golden pair is not made runtime/current."""
    from dataclasses import replace

    loop, dev, kh, rt, before = _installed_with_a_broken_runtime(fleet, v1)
    monkeypatch.setattr(R, "runtime_intact", lambda conn, bundle: True)  # skip the hashes: the runner is broken
    broken = replace(D.LocalBundle.for_arch(v1.arch), id="broken")
    with Connection(dev, known_hosts=kh) as conn, \
            pytest.raises(D.DeviceError, match=f"fails the golden check of installed model.*{v1.name}"):
        R.install_runtime(conn, broken)
    assert os.readlink(rt / "current") == before
    assert_current_runs(loop, [v1])


def test_one_device_lock_serialises_mutating_operations(fleet, v1, v2):
    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    done = threading.Event()
    with Connection(dev, known_hosts=kh) as holder, device_lock(holder, "test"):
        t = threading.Thread(target=lambda: (D.deploy([dev], [v2], known_hosts=kh), done.set()), daemon=True)
        t.start()
        time.sleep(3)
        assert not done.is_set()  # waiting for the lock, not interleaving
        assert assert_current_runs(loop, [v1, v2]) == v1.sha256
    t.join(120)
    assert done.is_set() and assert_current_runs(loop, [v1, v2]) == v2.sha256
    # two deploys at once, from two connections: both finish, neither sweeps the other's files
    results = []
    threads = [threading.Thread(target=lambda p=p: results.append(D.deploy([dev], [p], known_hosts=kh)))
               for p in (v1, v2, v1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(results) == 3 and all(r.all_ok for r in results), [str(r[0].error) for r in results]
    assert_current_runs(loop, [v1, v2])


def test_a_silent_holder_lets_go_of_the_lock(fleet, monkeypatch):
    """A host that dies without closing its session (link gone) stops its heartbeat: the device lets go
    of the lock after SILENCE_S, while a beating holder keeps it."""
    from edge_sdk.errors import DeviceError
    from edge_sdk.fleet import device_lock as L

    loops, devices, kh = fleet
    dev = devices[0]
    monkeypatch.setattr(L, "SILENCE_S", 3)
    monkeypatch.setattr(L, "BEAT_S", 1)
    with Connection(dev, known_hosts=kh) as a, Connection(dev, known_hosts=kh) as b:
        holder = L._acquire(a, "test", wait=5)
        time.sleep(5)  # beating: still held
        with pytest.raises(DeviceError, match="held the device lock"):
            L._acquire(b, "test", wait=2).close()
        holder.heart.stop()  # the host goes silent, its channel stays open
        t0 = time.monotonic()
        second = L._acquire(b, "test", wait=30)
        waited = time.monotonic() - t0
        second.close()
        holder.close()
    assert waited < 25  # let go after the silence, long before the 30 s wait ran out


def test_rollback_refuses_a_previous_version_changed_on_the_device(fleet, v1, v2):
    """Other weights and recomputed sums in the previous install: its signature no longer matches, so the
    device refuses to roll back to it (checked by the bundle's verifier, as before a deploy's switch)."""
    from edge_sdk.fleet.remote import rollback

    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok and D.deploy([dev], [v2], known_hosts=kh).all_ok
    prev = root(loop) / "models" / v1.name / v1.sha256
    params = bytearray((prev / "params.bin").read_bytes())
    params[-64:] = bytes(64)
    (prev / "params.bin").unlink()  # a new file: the hard-linked copies elsewhere keep the real one
    (prev / "params.bin").write_bytes(bytes(params))
    m = json.loads((prev / "manifest.json").read_text())
    m["members"]["params.bin"] = {"sha256": hashlib.sha256(params).hexdigest(), "size": len(params)}
    (prev / "manifest.json").unlink()
    (prev / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))
    with pytest.raises(D.DeviceError, match="refused: tampered"):
        rollback(dev, v1.name, known_hosts=kh)
    assert assert_current_runs(loop, [v1, v2]) == v2.sha256


@pytest.mark.parametrize("how, reason, says", [
    ("keep", "tampered", "refused: tampered"), ("stranger", "untrusted", "refused: untrusted"),
    ("drop", "unsigned", "refusing the package: members missing or repeated (signature.json included)")])
def test_a_crafted_package_past_this_machines_check_is_refused_on_the_device(fleet, v1, tmp_path, monkeypatch,
                                                                              how, reason, says):
    """The probe's package (other weights, recomputed sums) handed to deploy as if this machine's check
    had passed (a LocalPackage made by hand): the device's own verifier refuses it before the golden run
    and the switch (an unsigned one already at extract: signature.json is a required member); current
    still runs v1 and nothing of the crafted package stays on the device."""
    import sys
    from dataclasses import replace

    from edge_sdk import signing
    from edge_sdk.errors import PackageError

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_trust_signing import craft, members_of

    loops, devices, kh = fleet
    dev = devices[0]
    loop = loops[dev.name]
    assert D.deploy([dev], [v1], known_hosts=kh).all_ok
    key = None
    if how == "stranger":
        with monkeypatch.context() as m:
            m.setenv("EDGE_SDK_DATA", str(tmp_path / "stranger"))
            key = signing.signing_key()  # valid, but not trusted on the device
    bad = craft(v1.path, tmp_path / "crafted.edgepkg", key=key, sign=how != "drop")
    with pytest.raises(PackageError, match=f"refused: {reason}"):
        D.LocalPackage.load(bad)  # this machine refuses it
    sums = {n: v["sha256"] for n, v in json.loads(members_of(bad)["manifest.json"])["members"].items()}
    forged = replace(v1, path=bad, sha256=hashlib.sha256(bad.read_bytes()).hexdigest(), size=bad.stat().st_size,
                     members=sums)
    res = D.deploy([dev], [forged], known_hosts=kh)
    err = str(res[0].error)
    assert not res.all_ok and says in err and dev.name in err, err
    assert res[0].error.report.packages[0].golden is None  # refused before the golden run
    assert assert_current_runs(loop, [v1]) == v1.sha256
    folder = root(loop) / "models" / v1.name
    assert {p.name for p in folder.iterdir()} <= {"current", "previous", v1.sha256}
    assert not (root(loop) / "packages" / f"{forged.sha256}.edgepkg").exists()
