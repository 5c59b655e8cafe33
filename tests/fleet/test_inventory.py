"""`fleet inventory --format ansible`, checked by running ansible-playbook (ansible-core) against
the loopback fleet: it installs what `edge-sdk deploy` installs, and deploy then finds nothing to do."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.deploy import LocalBundle, LocalPackage, deploy
from edge_sdk.fleet.device_lock import LOCK, device_lock
from edge_sdk.fleet.ssh import Connection

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _ansible(tool: str) -> str:
    exe = BIN / tool
    if not exe.exists():
        pytest.skip(f"{tool} not installed (pip install ansible-core; it is in the 'test' extra)")
    return os.fspath(exe)


def _playbook(out: Path, inventory: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=os.fspath(out / ".ansible-local"),
               ANSIBLE_RETRY_FILES_ENABLED="0")
    return subprocess.run([_ansible("ansible-playbook"), "-i", inventory, "playbook.yml", *extra], cwd=out,
                          capture_output=True, text=True, env=env, timeout=600)


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    out = {}
    for line in stdout.split("PLAY RECAP")[-1].splitlines():
        if ":" in line and "ok=" in line:
            host, _, counts = line.partition(":")
            out[host.strip()] = {k: int(v) for k, v in (kv.split("=") for kv in counts.split())}
    return out


def test_ansible_playbook_installs_the_same_artifacts(fresh_fleet, known_hosts_for, host_package, tmp_path):
    kh = known_hosts_for(fresh_fleet)
    out = tmp_path / "ansible"
    code = cli_main(["fleet", "inventory", "--format", "ansible", "--fleet", str(fresh_fleet.fleet_yaml),
                           "--known-hosts", str(kh), "--package", str(host_package), "-o", str(out)])
    assert code == 0
    pkg, bundle = LocalPackage.load(host_package), LocalBundle.for_arch("x86_64")

    first = _playbook(out, "inventory.ini")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert all(r["failed"] == 0 and r["unreachable"] == 0 and r["changed"] > 0 for r in _recap(first.stdout).values())
    for loop in fresh_fleet.devices:
        root = loop.home / ".edge-sdk"
        stored = root / "packages" / f"{pkg.sha256}.edgepkg"
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == pkg.sha256
        assert os.readlink(root / "models" / pkg.name / "current") == pkg.sha256
        assert os.readlink(root / "runtime" / "current") == bundle.id
        assert (root / "runtime" / bundle.id / "bin" / "edge-runner").stat().st_mode & 0o111
        assert stored.stat().st_uid == os.stat(loop.home / ".ssh").st_uid  # written as the device user

    inode = (fresh_fleet.devices[0].home / ".edge-sdk" / "packages" / f"{pkg.sha256}.edgepkg").stat().st_ino
    again = _playbook(out, "inventory.ini")
    assert again.returncode == 0
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in _recap(again.stdout).values())
    assert (fresh_fleet.devices[0].home / ".edge-sdk" / "packages" / f"{pkg.sha256}.edgepkg").stat().st_ino == inode

    # edge-sdk deploy recognises the Ansible install: nothing to send, nothing to change
    devices = load_fleet(fresh_fleet.fleet_yaml).select()
    results = deploy(devices, [pkg], known_hosts=kh)
    assert results.all_ok
    assert [(r.value.runtime, r.value.packages[0].action, r.value.bytes_sent) for r in results] == \
        [("present", "unchanged", 0)] * 3


def test_yaml_inventory_lists_the_same_hosts_and_groups(fresh_fleet, known_hosts_for, host_package, tmp_path):
    kh = known_hosts_for(fresh_fleet)
    listed = {}
    for fmt in ("ini", "yaml"):
        out = tmp_path / fmt
        assert cli_main(["fleet", "inventory", "--fleet", str(fresh_fleet.fleet_yaml), "--known-hosts", str(kh),
                               "--inventory-format", fmt, "--package", str(host_package), "-o", str(out)]) == 0
        inv = next(out.glob("inventory.*"))
        p = subprocess.run([_ansible("ansible-inventory"), "-i", str(inv), "--list"], capture_output=True, text=True,
                           check=True, env=dict(os.environ, ANSIBLE_LOCAL_TEMP=os.fspath(out / ".ansible-local")))
        listed[fmt] = json.loads(p.stdout)
    ini, yml = listed["ini"], listed["yaml"]
    assert ini["_meta"]["hostvars"] == yml["_meta"]["hostvars"]
    assert sorted(ini["loopback"]["hosts"]) == sorted(yml["loopback"]["hosts"]) == ["loop1", "loop2", "loop3"]
    loop2 = fresh_fleet["loop2"]
    hv = ini["_meta"]["hostvars"]["loop2"]
    assert (hv["ansible_host"], int(hv["ansible_port"]), hv["ansible_user"]) == (loop2.ip, loop2.port, loop2.user)
    assert "StrictHostKeyChecking=yes" in hv["ansible_ssh_common_args"]
    kh_lines = (tmp_path / "ini" / "known_hosts").read_text().splitlines()
    assert f"[{loop2.ip}]:{loop2.port} {loop2.public_host_key()}" in kh_lines


def test_ansible_refuses_a_package_the_device_does_not_trust(fresh_fleet, known_hosts_for, host_package, tmp_path):
    """The playbook checks the package's signature on the device (the bundle's verify_package.py) before
    the golden run and the switch: with no trusted key pushed, the package is refused, nothing of it
    stays installed, and no model becomes current."""
    kh = known_hosts_for(fresh_fleet)
    out = tmp_path / "ansible"
    assert cli_main(["fleet", "inventory", "--format", "ansible", "--fleet", str(fresh_fleet.fleet_yaml),
                     "--known-hosts", str(kh), "--package", str(host_package), "-o", str(out)]) == 0
    trusted = json.loads((out / "files" / "trusted-keys.json").read_text())
    assert trusted["keys"], "the folder carries the keys this machine trusts"
    (out / "files" / "trusted-keys.json").write_text(json.dumps({**trusted, "keys": []}))
    run = _playbook(out, "inventory.ini")
    assert run.returncode != 0
    assert "refused: untrusted" in run.stdout
    assert all(r["failed"] == 1 for r in _recap(run.stdout).values())
    pkg = LocalPackage.load(host_package)
    for loop in fresh_fleet.devices:
        models = loop.home / ".edge-sdk" / "models" / pkg.name
        assert not (models / "current").is_symlink()
        leftovers = [p.name for p in models.iterdir() if p.name.startswith(".")] if models.exists() else []
        assert leftovers == []


def test_ansible_takes_the_device_lock_deploy_takes(fresh_fleet, known_hosts_for, host_package, tmp_path):
    """The playbook holds the device lock deploy, rollback and tune take (device_lock.py) for the whole
    play: while edge-sdk holds it on one device, that device's play waits, gives up naming the lock and
    installs nothing there, and the other devices install; once let go, the play installs there too, leaves
    no lock files behind and lets go at its end (edge-sdk takes the lock again at once)."""
    kh = known_hosts_for(fresh_fleet)
    out = tmp_path / "ansible"
    assert cli_main(["fleet", "inventory", "--format", "ansible", "--fleet", str(fresh_fleet.fleet_yaml),
                     "--known-hosts", str(kh), "--package", str(host_package), "-o", str(out)]) == 0
    pkg = LocalPackage.load(host_package)
    held = load_fleet(fresh_fleet.fleet_yaml).select()[0]
    short = json.dumps({"lock": {"file": LOCK, "wait": 3, "stale": 1800}})
    with Connection(held, known_hosts=kh) as conn, device_lock(conn, "test"):
        run = _playbook(out, "inventory.ini", "-e", short)
    assert run.returncode != 0
    assert "held the device lock for 3 s" in run.stdout, run.stdout[-3000:]
    recap = _recap(run.stdout)
    assert recap[held.name]["failed"] == 1 and all(r["failed"] == 0 for n, r in recap.items() if n != held.name)
    for loop in fresh_fleet.devices:
        current = loop.home / ".edge-sdk" / "models" / pkg.name / "current"
        assert current.is_symlink() == (loop.name != held.name), loop.name

    again = _playbook(out, "inventory.ini", "-e", short)
    assert again.returncode == 0, again.stdout[-3000:]
    for loop in fresh_fleet.devices:
        root = loop.home / ".edge-sdk"
        assert os.readlink(root / "models" / pkg.name / "current") == pkg.sha256
        assert sorted(p.name for p in root.glob(".ansible-lock-*")) == []
    with Connection(held, known_hosts=kh) as conn, device_lock(conn, "test", wait=5):
        pass  # the play let go


def test_an_ansible_hold_not_renewed_lapses(tmp_path):
    """The playbook's holder (run here by the local sh, as the device's sh runs it): it has the lock once
    .locked exists, keeps it while .hold is renewed, and lets go when .hold goes stale (an Ansible run that
    died without its `always` step), so a dead run never keeps a device locked for good."""
    import time

    from edge_sdk.fleet.device_scripts import HOLD_LOCK_SH, RENEW_LOCK_SH, WAIT_LOCK_SH

    lock, token = tmp_path / "rt" / "lock", tmp_path / ".ansible-lock-1"
    holder = subprocess.Popen(["sh", "-c", HOLD_LOCK_SH, "sh", str(lock), str(token), "5", "3"])
    try:
        subprocess.run(["sh", "-c", WAIT_LOCK_SH, "sh", str(token), "5"], check=True, timeout=60)
        for _ in range(3):  # renewed: still held after more than `stale` seconds in all
            assert subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0
            subprocess.run(["sh", "-c", RENEW_LOCK_SH, "sh", str(token)], check=True)  # the play's renewal
            time.sleep(1.5)
        holder.wait(timeout=30)  # not renewed: lapses
    finally:
        holder.kill()
    assert subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 0
    assert not list(tmp_path.glob(".ansible-lock-1*"))
    renew = subprocess.run(["sh", "-c", RENEW_LOCK_SH, "sh", str(token)], capture_output=True, text=True)
    assert renew.returncode != 0 and "lapsed" in renew.stderr  # the play's next step fails the host
