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

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _ansible(tool: str) -> str:
    exe = BIN / tool
    if not exe.exists():
        pytest.skip(f"{tool} not installed (pip install ansible-core; it is in the 'test' extra)")
    return os.fspath(exe)


def _playbook(out: Path, inventory: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=os.fspath(out / ".ansible-local"),
               ANSIBLE_RETRY_FILES_ENABLED="0")
    return subprocess.run([_ansible("ansible-playbook"), "-i", inventory, "playbook.yml"], cwd=out,
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
