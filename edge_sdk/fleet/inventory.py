"""`fleet inventory --format ansible`: the same install as `edge-sdk deploy`, run by Ansible.

For a fleet with hundreds of Pis, Ansible's engine (forks, retries, reporting, AWX) is the better
driver. write_ansible() writes a self-contained folder:

    inventory.ini (or inventory.yml)   every device, the fleet's groups, the connection settings
    known_hosts                        the host keys edge-sdk trusts for these devices (strict checking)
    artifacts.yml                      bundle and package ids, sha256s, checklists, and the device scripts
    playbook.yml, package.yml          the steps; package.yml runs once per package
    files/                             the runtime archive(s) and the packages (hard links when possible)

    ansible-playbook -i inventory.ini playbook.yml

The playbook runs the very shell scripts deploy.py runs (EXTRACT_*_SH, SWITCH_SH): same layout,
same checks (sha256 on the device, the package's signature by a key this machine trusts checked by
the bundle's verifier on the device, golden pair with edge-runner --expect), same atomic switch; a
failed package is removed and the previous version stays current. The play holds deploy's device lock
(device_lock.py's flock file) from its first step to its last, so a deploy, rollback, tune or a second
Ansible run on the same device waits instead of sweeping its files; a run that dies lets go after
lock.stale seconds (artifacts.yml; override with -e). The hold is renewed before each package and again
after its upload, and a lapsed hold fails the host before anything is extracted or switched. The copy module skips a file
whose checksum already matches, so an unchanged re-run transfers no package bytes either.
"""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import paramiko
import yaml

from edge_sdk.errors import UsageError
from edge_sdk.fleet.config import Device, Fleet
from edge_sdk.fleet.deploy import (EXTRACT_PACKAGE_SH, EXTRACT_RUNTIME_SH, PLACE_RUNTIME_SH, SWITCH_SH, LocalBundle,
                                   LocalPackage)
from edge_sdk.fleet.device_lock import LOCK
from edge_sdk.fleet.device_scripts import (HOLD_LOCK_SH, RELEASE_LOCK_SH, RENEW_LOCK_SH, VERIFY_PACKAGE_SH,
                                           WAIT_LOCK_SH)
from edge_sdk.fleet.paths import REMOTE_ROOT
from edge_sdk.fleet.ssh import known_hosts_name
from edge_sdk.package import MANIFEST, MEMBERS
from edge_sdk.signing import trusted_file_bytes
from edge_sdk.targets import get_target

_GROUP = re.compile(r"[^A-Za-z0-9_]")
LOCK_WAIT_S, LOCK_STALE_S = 600, 1800  # override per run: ansible-playbook -e '{"lock": {...}}'

PLAYBOOK = """\
# written by `edge-sdk fleet inventory`: installs what `edge-sdk deploy` installs
- name: edge-sdk runtime and packages
  hosts: edge_sdk
  gather_facts: false
  vars_files: [artifacts.yml]
  vars:
    bundle: "{{ bundles[edge_arch] }}"
  tasks:
    - name: a token for this run's hold on the device lock
      ansible.builtin.set_fact: {lock_token: "{{ 2**48 | random }}"}
    - name: take the device lock (the one deploy, rollback and tune take), held until the play ends
      ansible.builtin.command:
        argv: [sh, -c, "{{ scripts.hold_lock }}", sh, "{{ lock.file }}", "{{ edge_root }}/.ansible-lock-{{ lock_token }}",
               "{{ lock.wait }}", "{{ lock.stale }}"]
        chdir: "~"
      async: 86400  # the holder ends itself: the play lets go, or its hold lapses after lock.stale seconds
      poll: 0
      changed_when: false
    - name: wait for the device lock
      ansible.builtin.command:
        argv: [sh, -c, "{{ scripts.wait_lock }}", sh, "{{ edge_root }}/.ansible-lock-{{ lock_token }}", "{{ lock.wait }}"]
        chdir: "~"
      changed_when: false
    - name: install under the device lock
      block:
        - name: layout
          ansible.builtin.file: {path: "~/{{ edge_root }}/{{ item }}", state: directory, mode: "0755"}
          loop: [runtime, packages, models]
        - name: runtime bundle installed?
          ansible.builtin.stat: {path: "~/{{ edge_root }}/runtime/{{ bundle.id }}/bundle.json", checksum_algorithm: sha256}
          register: runtime_json
        - name: runtime bundle
          when: not (runtime_json.stat.exists and runtime_json.stat.checksum == bundle.manifest_sha256)
          block:
            - name: upload the runtime archive
              ansible.builtin.copy: {src: "files/{{ bundle.file }}", dest: "~/{{ edge_root }}/runtime/.{{ bundle.id }}.tar.gz", mode: "0644"}
            - name: sha256 of the uploaded archive
              ansible.builtin.stat: {path: "~/{{ edge_root }}/runtime/.{{ bundle.id }}.tar.gz", checksum_algorithm: sha256}
              register: archive
            - name: archive arrived intact
              ansible.builtin.assert:
                that: archive.stat.checksum == bundle.sha256
                fail_msg: "runtime archive damaged in transit on {{ inventory_hostname }}"
            - name: extract and check every file's sha256
              ansible.builtin.command:
                argv: [sh, -c, "{{ scripts.extract_runtime }}", sh, "{{ edge_root }}/runtime/.{{ bundle.id }}.tar.gz",
                       "{{ edge_root }}/runtime/.{{ bundle.id }}.tmp-ansible", "{{ bundle.id }}"]
                chdir: "~"
                stdin: "{{ bundle.checklist }}"
                stdin_add_newline: false
            - name: put it in place, runtime/current -> it
              ansible.builtin.command:
                argv: [sh, -c, "{{ scripts.place_runtime }}", sh, "{{ edge_root }}/runtime/.{{ bundle.id }}.tmp-ansible",
                       "{{ edge_root }}/runtime/{{ bundle.id }}", "{{ edge_root }}/runtime/.{{ bundle.id }}.tar.gz", ansible,
                       "{{ bundle.id }}"]
                chdir: "~"
          rescue:
            - name: remove the partial runtime
              ansible.builtin.command:
                argv: [rm, -rf, "{{ edge_root }}/runtime/.{{ bundle.id }}.tmp-ansible", "{{ edge_root }}/runtime/.{{ bundle.id }}.tar.gz"]
                chdir: "~"
            - name: runtime failed
              ansible.builtin.fail: {msg: "runtime {{ bundle.id }} could not be installed on {{ inventory_hostname }}"}
        - name: the package signers this machine trusts (what the device's verifier accepts)
          ansible.builtin.copy: {src: files/trusted-keys.json, dest: "~/{{ edge_root }}/runtime/trusted-keys.json", mode: "0644"}
        - name: packages
          ansible.builtin.include_tasks: package.yml
          loop: "{{ packages | selectattr('arch', 'equalto', edge_arch) | list }}"
          loop_control: {loop_var: pkg, label: "{{ pkg.name }} {{ pkg.sha256[:12] }}"}
      always:
        - name: let go of the device lock
          ansible.builtin.command:
            argv: [sh, -c, "{{ scripts.release_lock }}", sh, "{{ edge_root }}/.ansible-lock-{{ lock_token }}"]
            chdir: "~"
          changed_when: false
"""

PACKAGE_TASKS = """\
# one package: upload unless present, check on the device, golden run, atomic switch
- name: "{{ pkg.name }}: the device lock is still ours (a hold not renewed for lock.stale seconds lapses)"
  ansible.builtin.command:
    argv: [sh, -c, "{{ scripts.renew_lock }}", sh,
           "{{ edge_root }}/.ansible-lock-{{ lock_token }}"]
    chdir: "~"
  changed_when: false
- name: "{{ pkg.name }}: current version"
  ansible.builtin.stat: {path: "~/{{ edge_root }}/models/{{ pkg.name }}/current", follow: false}
  register: cur
- name: "{{ pkg.name }}: install {{ pkg.sha256[:12] }}"
  when: not (cur.stat.islnk | default(false) and cur.stat.lnk_target == pkg.sha256)
  block:
    - name: "{{ pkg.name }}: upload (skipped when the same bytes are there)"
      ansible.builtin.copy: {src: "files/{{ pkg.file }}", dest: "~/{{ edge_root }}/packages/{{ pkg.sha256 }}.edgepkg", mode: "0644"}
    - name: "{{ pkg.name }}: sha256 on the device"
      ansible.builtin.stat: {path: "~/{{ edge_root }}/packages/{{ pkg.sha256 }}.edgepkg", checksum_algorithm: sha256}
      register: stored
    - name: "{{ pkg.name }}: arrived intact"
      ansible.builtin.assert:
        that: stored.stat.checksum == pkg.sha256
        fail_msg: "{{ pkg.file }} damaged in transit on {{ inventory_hostname }}"
    - name: "{{ pkg.name }}: the device lock is still ours after the upload"
      ansible.builtin.command:
        argv: [sh, -c, "{{ scripts.renew_lock }}", sh,
               "{{ edge_root }}/.ansible-lock-{{ lock_token }}"]
        chdir: "~"
      changed_when: false
    - name: "{{ pkg.name }}: extract and check members"
      ansible.builtin.command:
        argv: [sh, -c, "{{ scripts.extract_package }}", sh, "{{ edge_root }}/packages/{{ pkg.sha256 }}.edgepkg",
               "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible", "{{ members[0] }}", "{{ members[1] }}",
               "{{ members[2] }}", "{{ members[3] }}", "{{ members[4] }}"]
        chdir: "~"
        stdin: "{{ pkg.checklist }}"
        stdin_add_newline: false
    - name: "{{ pkg.name }}: signature by a trusted key, checked on the device"
      ansible.builtin.command:
        argv: [sh, -c, "{{ scripts.verify_package }}", sh, "{{ edge_root }}/runtime/{{ bundle.id }}",
               "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible", "{{ edge_root }}/runtime/trusted-keys.json"]
        chdir: "~"
    - name: "{{ pkg.name }}: golden check with the device runtime"
      ansible.builtin.command:
        argv: ["{{ edge_root }}/runtime/{{ bundle.id }}/bin/edge-runner",
               --lib, "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible/model.so",
               --params, "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible/params.bin",
               --input, "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible/golden_input.npy",
               --expect, "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible/golden_output.npy",
               --rtol, "{{ pkg.rtol }}", --atol, "{{ pkg.atol }}", --warmup, "0", --repeat, "1"]
        chdir: "~"
    - name: "{{ pkg.name }}: switch current (previous kept)"
      ansible.builtin.command:
        argv: [sh, -c, "{{ scripts.switch }}", sh, "{{ edge_root }}/models/{{ pkg.name }}", "{{ pkg.sha256 }}",
               "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible", ansible]
        chdir: "~"
  rescue:
    - name: "{{ pkg.name }}: remove what this attempt wrote"
      ansible.builtin.command:
        argv: [sh, -c, 'rm -rf "$1"; [ "$(readlink "$3" || true)" = "$4" ] || [ "$(readlink "$5" || true)" = "$4" ] || rm -f "$2"',
               sh, "{{ edge_root }}/models/{{ pkg.name }}/.{{ pkg.sha256 }}.tmp-ansible",
               "{{ edge_root }}/packages/{{ pkg.sha256 }}.edgepkg", "{{ edge_root }}/models/{{ pkg.name }}/current", "{{ pkg.sha256 }}",
               "{{ edge_root }}/models/{{ pkg.name }}/previous"]
        chdir: "~"
    - name: "{{ pkg.name }}: failed"
      ansible.builtin.fail: {msg: "{{ pkg.name }} {{ pkg.sha256[:12] }} failed on {{ inventory_hostname }}; the previous version stays current"}
"""


def write_ansible(fleet: Fleet, devices: Sequence[Device], packages: Sequence[LocalPackage], out: Path, *,
                  known_hosts: str | os.PathLike, inventory_format: str = "ini") -> list[Path]:
    """Write the folder described above; returns [inventory, playbook, ...other files]."""
    out = Path(out)
    if inventory_format not in ("ini", "yaml"):
        raise UsageError(f"--inventory-format: expected ini or yaml, got {inventory_format!r}")
    names = [p.name for p in packages]
    if len(set(names)) != len(names):
        raise UsageError("two packages install the same model; give one version of each")
    arches = {d.name: get_target(d.target).arch for d in devices}
    bundles = {a: LocalBundle.for_arch(a) for a in sorted(set(arches.values()) | {p.arch for p in packages})}
    files = out / "files"
    files.mkdir(parents=True, exist_ok=True)
    for src in [b.archive for b in bundles.values()] + [p.path for p in packages]:
        _link_or_copy(src, files / (src.name if src.suffix == ".gz" else f"{_pkg_sha(src, packages)}.edgepkg"))
    _write(files / "trusted-keys.json", trusted_file_bytes().decode())
    scripts = {"extract_runtime": EXTRACT_RUNTIME_SH, "place_runtime": PLACE_RUNTIME_SH,
               "extract_package": EXTRACT_PACKAGE_SH, "verify_package": VERIFY_PACKAGE_SH, "switch": SWITCH_SH,
               "hold_lock": HOLD_LOCK_SH, "wait_lock": WAIT_LOCK_SH, "renew_lock": RENEW_LOCK_SH,
               "release_lock": RELEASE_LOCK_SH}
    for name, text in scripts.items():  # Ansible would template them otherwise
        if any(t in text for t in ("{{", "{%", "{#")):
            raise AssertionError(f"script {name} contains a Jinja delimiter")
    artifacts = {
        "edge_root": REMOTE_ROOT,  # fleet/paths.py's device layout, relative to the login home
        "members": [MANIFEST, *MEMBERS],
        # deploy's device lock (device_lock.py): waited for up to `wait` s; the play renews its hold before
        # each package, and a hold not renewed for `stale` s (an Ansible run that died) lapses
        "lock": {"file": LOCK, "wait": LOCK_WAIT_S, "stale": LOCK_STALE_S},
        "scripts": scripts,
        "bundles": {a: {"id": b.id, "file": b.archive.name, "sha256": b.sha256, "manifest_sha256": b.manifest_sha256,
                        "checklist": b.checklist().decode()} for a, b in bundles.items()},
        "packages": [{"name": p.name, "file": f"{p.sha256}.edgepkg", "sha256": p.sha256, "arch": p.arch,
                      "rtol": repr(p.rtol), "atol": repr(p.atol), "checklist": p.checklist().decode()}
                     for p in packages],
    }
    kh_out = out / "known_hosts"
    _write(kh_out, _known_hosts_lines(devices, Path(known_hosts)))
    conn_vars = {"ansible_python_interpreter": "/usr/bin/python3",
                 # relative to the folder, so it can be moved to the machine that runs Ansible
                 "ansible_ssh_common_args": "-o UserKnownHostsFile={{ inventory_dir }}/known_hosts "
                                            "-o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null"}
    hosts = {d.name: _host_vars(d, arches[d.name]) for d in devices}
    groups = {_GROUP.sub("_", g.name): [n for n in g.devices if n in hosts] for g in fleet.groups.values()}
    groups = {g: members for g, members in groups.items() if members and g != "edge_sdk"}
    inventory = out / ("inventory.ini" if inventory_format == "ini" else "inventory.yml")
    _write(inventory, _ini(hosts, groups, conn_vars) if inventory_format == "ini" else _yaml_inventory(hosts, groups, conn_vars))
    _write(out / "artifacts.yml", "# written by `edge-sdk fleet inventory`\n" + yaml.safe_dump(artifacts, sort_keys=False, width=1000))
    _write(out / "playbook.yml", PLAYBOOK)
    _write(out / "package.yml", PACKAGE_TASKS)
    return [inventory, out / "playbook.yml", out / "package.yml", out / "artifacts.yml", kh_out, files]


def _pkg_sha(src: Path, packages: Sequence[LocalPackage]) -> str:
    return next(p.sha256 for p in packages if p.path == src)


def _host_vars(d: Device, arch: str) -> dict:
    v = {"ansible_host": d.host, "ansible_port": d.port, "ansible_user": d.user, "edge_arch": arch,
         "edge_target": d.target}
    if d.key:
        v["ansible_ssh_private_key_file"] = d.key
    return v


def _known_hosts_lines(devices: Sequence[Device], path: Path) -> str:
    """OpenSSH known_hosts lines for the devices: pinned full keys, else edge-sdk's recorded ones."""
    known = paramiko.HostKeys()
    if path.exists():
        known.load(os.fspath(path))
    lines = []
    for d in devices:
        name = known_hosts_name(d)
        if d.host_key and not d.host_key.startswith("SHA256:"):
            lines.append(f"{name} {d.host_key}\n")
            continue
        for key_type, key in (known.lookup(name) or {}).items():
            lines.append(f"{name} {key_type} {key.get_base64()}\n")
    return "".join(lines)


def _ini(hosts: dict, groups: dict, conn_vars: dict) -> str:
    def fmt(v) -> str:
        s = str(v)
        return f"'{s}'" if " " in s else s

    lines = ["# written by `edge-sdk fleet inventory`", "[edge_sdk]"]
    lines += [f"{n} " + " ".join(f"{k}={fmt(v)}" for k, v in hv.items()) for n, hv in hosts.items()]
    for g, members in groups.items():
        lines += ["", f"[{g}]", *members]
    lines += ["", "[edge_sdk:vars]", *(f"{k}={fmt(v)}" for k, v in conn_vars.items()), ""]
    return "\n".join(lines)


def _yaml_inventory(hosts: dict, groups: dict, conn_vars: dict) -> str:
    children = {"edge_sdk": {"hosts": hosts, "vars": conn_vars}}
    children.update({g: {"hosts": {m: None for m in members}} for g, members in groups.items()})
    return "# written by `edge-sdk fleet inventory`\n" + yaml.safe_dump({"all": {"children": children}}, sort_keys=False)


def _link_or_copy(src: Path, dest: Path) -> None:
    if dest.exists():
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
