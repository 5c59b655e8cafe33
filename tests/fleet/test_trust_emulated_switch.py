"""Issue 15 item 1 on the emulated Pi (arm64 Debian, its own sshd under qemu): a pi3 package is
deployed, its install is signature-checked by the aarch64 bundle's own PyNaCl, and the switch
script -- and the install scripts (prepare and its sweep, package extract, runtime extract and
placement) -- stopped after each of their commands in turn, always leave `current` naming a complete
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


def _cut_runs(conn, cuts, argv_for, *, check, stdin=None) -> int:
    """Run each cut script on the device with its arguments; after each, `check()`. Returns the stops."""
    stopped = 0
    for n, script in cuts:
        r = conn.run(["sh", "-c", script, "sh", *argv_for(n)], input=stdin, check=False, timeout=600)
        stopped += r.exit_code == 97
        check(n)
    return stopped


def test_install_scripts_stopped_anywhere_on_the_emulated_pi(emulated_pis, pi3_package, variant_package, tmp_path):
    """The install side on the arm64 guest (its sh, coreutils, tar, flock): prepare and its sweep, the
    package extract, the runtime extract and the runtime placement (a repair of the live runtime, the
    riskiest path) each stopped after each command in turn; after every stop `current` names a complete
    install that passes its golden pair with runtime/current's runner, and a deploy then completes."""
    from edge_sdk.fleet.paths import PACKAGES, REMOTE_ROOT, RUNTIME, package_file
    from edge_sdk.fleet.runtime_install import install_runtime
    from edge_sdk.package import MANIFEST, MEMBERS

    devices = load_fleet(emulated_pis.fleet_yaml).select()
    kh = emulated_pis.root / "known_hosts"
    v1 = LocalPackage.load(pi3_package)
    v2 = LocalPackage.load(variant_package(pi3_package, tmp_path / "v2.edgepkg", note="v2"))
    for pkg in (v2, v1):  # current v1, previous v2: both package files stay on the device
        res = deploy(devices, [pkg], known_hosts=kh)
        assert res.all_ok, [str(r.error) for r in res.failed]
    folder, bundle = model_dir(v1.name), D.LocalBundle.for_arch(v1.arch)
    with Connection(devices[0], known_hosts=kh) as conn:
        def runs_v1(n, *leftovers):  # v1 still current and passing; then remove what the cut run left
            assert _current_runs(conn, [v1]) is v1, f"line {n}"
            if leftovers:
                conn.run(["rm", "-rf", *leftovers])

        def litter(n):  # what a cut run leaves, for the sweep to take (never current)
            conn.run(["sh", "-c", 'mkdir -p "$1/.x.tmp-$3" "$2/.x.tmp-$3" && : > "$4/.y.part-$3"', "sh", folder,
                      RUNTIME, f"cut{n}", PACKAGES])
            return [REMOTE_ROOT]
        stops = {"prepare": _cut_runs(conn, cut_variants(S.PREPARE_SH), litter, check=runs_v1)}

        tmp = lambda n: posixpath.join(folder, f".{v2.sha256}.tmp-cut{n}")  # noqa: E731
        stops["extract package"] = _cut_runs(
            conn, cut_variants(S.EXTRACT_PACKAGE_SH),
            lambda n: [package_file(v2.sha256), tmp(n), MANIFEST, *MEMBERS], stdin=v2.checklist(),
            check=lambda n: runs_v1(n, tmp(n)))

        keep = ".cut-runtime.tar.gz"  # the archive, outside the install root's sweeps
        conn.put(bundle.archive, keep, sha256=bundle.sha256)
        archive = posixpath.join(RUNTIME, f".{bundle.id}.tar.gz")
        rtmp = lambda n: posixpath.join(RUNTIME, f".{bundle.id}.tmp-cut{n}")  # noqa: E731

        def fresh_archive(n):
            conn.run(["cp", keep, archive])
            return [archive, rtmp(n), bundle.id]
        stops["extract runtime"] = _cut_runs(conn, cut_variants(S.EXTRACT_RUNTIME_SH), fresh_archive,
                                             stdin=bundle.checklist(),
                                             check=lambda n: runs_v1(n, rtmp(n), archive))

        def extracted(n):  # a checked copy of the live runtime, as _place has it before the placement
            conn.run(["sh", "-c", S.EXTRACT_RUNTIME_SH, "sh", *fresh_archive(n)], input=bundle.checklist(), timeout=600)
            return [rtmp(n), posixpath.join(RUNTIME, bundle.id), archive, f"cut{n}", bundle.id, "place"]

        def after_place(n):
            runs_v1(n)
            install_runtime(conn, bundle)  # deploy's own repair of what the stop left (raises if it cannot)
            runs_v1(n)
        stops["place runtime"] = _cut_runs(conn, cut_variants(S.PLACE_RUNTIME_SH), extracted, check=after_place)
        conn.run(["rm", "-f", keep])
    assert all(v >= 4 for v in stops.values()), stops
    again = deploy(devices, [v2], known_hosts=kh)  # the next deploy finds a working device and completes
    assert again.all_ok, [str(r.error) for r in again.failed]
    with Connection(devices[0], known_hosts=kh) as conn:
        assert _current_runs(conn, [v2]) is v2
        assert conn.readlink(CURRENT_RUNTIME) == bundle.id
