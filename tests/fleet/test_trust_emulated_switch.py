"""Issue 15 item 1 on the emulated Pi (arm64 Debian, its own sshd under qemu): a pi3 package is
deployed, its install is signature-checked by the aarch64 bundle's own PyNaCl, and the switch
script, stopped after each of its commands in turn, always leaves `current` naming a complete
install that passes its golden check with the device's runner (run on the device, emulated)."""
from __future__ import annotations

import importlib
import json
import posixpath
import sys
from pathlib import Path

import pytest

from edge_sdk.fleet import device_scripts as S
from edge_sdk.fleet.config import load_fleet
from edge_sdk.fleet.deploy import LocalPackage, deploy
from edge_sdk.fleet.paths import CURRENT_RUNTIME, model_dir, runner
from edge_sdk.fleet.ssh import Connection

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_trust_switch import cut_variants  # noqa: E402

pytestmark = [pytest.mark.qemu, pytest.mark.slow]
D = importlib.import_module("edge_sdk.fleet.deploy")


def _current_runs(conn, pkgs: list[LocalPackage]) -> LocalPackage:
    """current names a complete install of one of pkgs that passes its golden pair on the device."""
    folder = model_dir(pkgs[0].name)
    cur = conn.readlink(posixpath.join(folder, "current")) or ""
    match = [p for p in pkgs if cur == p.sha256 or cur.startswith(f".{p.sha256}.tmp-")]
    assert match, f"current -> {cur!r}"
    pkg, d = match[0], posixpath.join(folder, "current")
    ok = conn.run(["sh", "-c", 'cd "$1" && sha256sum -c --quiet --strict -', "sh", d], input=pkg.checklist(),
                  check=False)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    j = lambda n: posixpath.join(d, n)  # noqa: E731
    r = conn.run([runner(CURRENT_RUNTIME), "--lib", j("model.so"), "--params", j("params.bin"), "--input",
                  j("golden_input.npy"), "--expect", j("golden_output.npy"), "--rtol", repr(pkg.rtol), "--atol",
                  repr(pkg.atol), "--warmup", "0", "--repeat", "1"], check=False, timeout=600)
    assert r.exit_code == 0 and json.loads(r.stdout.strip().splitlines()[-1])["golden"]["ok"], r.stderr
    return pkg


def test_switch_stopped_anywhere_on_the_emulated_pi(emulated_pis, pi3_package, variant_package, tmp_path):
    devices = load_fleet(emulated_pis.fleet_yaml).select()
    kh = emulated_pis.root / "known_hosts"
    v1 = LocalPackage.load(pi3_package)
    v2 = LocalPackage.load(variant_package(pi3_package, tmp_path / "v2.edgepkg", note="v2"))
    for pkg in (v2, v1):  # both installed: current v1, previous v2
        res = deploy(devices, [pkg], known_hosts=kh)
        assert res.all_ok, [str(r.error) for r in res.failed]
    folder = model_dir(v1.name)
    with Connection(devices[0], known_hosts=kh) as conn:
        stopped = 0
        for n, script in cut_variants(S.SWITCH_SH):
            target = v2 if _current_runs(conn, [v1, v2]) is v1 else v1
            tmp = posixpath.join(folder, f".{target.sha256}.tmp-cut{n}")
            # a checked copy of the target (its install, or what the last switch left of it)
            src = posixpath.join(folder, target.sha256)
            conn.run(["sh", "-c", 'if [ -d "$1" ]; then cp -a "$1" "$2"; fi', "sh", src, tmp])
            if conn.run(["test", "-d", tmp], check=False).exit_code != 0:
                continue  # swept as neither current nor previous: switch the other way next time
            r = conn.run(["sh", "-c", script, "sh", folder, target.sha256, tmp, f"cut{n}"], check=False)
            stopped += r.exit_code == 97
            _current_runs(conn, [v1, v2])
        assert stopped >= 12
    again = deploy(devices, [v1], known_hosts=kh)  # the next deploy finds a working device, and tidies up
    assert again.all_ok, [str(r.error) for r in again.failed]
    with Connection(devices[0], known_hosts=kh) as conn:
        assert _current_runs(conn, [v1]) is v1
        left = set(conn.run(["sh", "-c", 'ls -A "$1"', "sh", folder]).stdout.split())
    assert left <= {"current", "previous", v1.sha256, v2.sha256} and not any(n.startswith(".") for n in left)
