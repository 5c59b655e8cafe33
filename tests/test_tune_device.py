"""edge_sdk/tune/device_runner.py and edge-runner --kernel.

The device tests use real OpenSSH servers on loopback addresses (device_images/loopback_fleet.py,
host-arch devices): candidates are built by MetaSchedule's LocalBuilder with export_for(host),
shipped over SSH and timed there by the runtime bundle's edge-runner. Nothing asserts a speed;
what is checked: times come back for good candidates, every failure is an error naming the
device (never a hang), and the device keeps nothing but the runtime bundle.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

tvm = pytest.importorskip("tvm")
from tvm import te  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402

from edge_sdk.devices import stand_in_module  # noqa: E402
from edge_sdk.targets import get_target  # noqa: E402
from edge_sdk.tune.device_runner import RunnerOptions, export_for, make_device_runner  # noqa: E402

N = 48  # a 48x48x48 matmul: milliseconds to build, microseconds to run
ARGS_JSON = json.dumps([[[N, N], "float32"]] * 3)


def _matmul():
    a = te.placeholder((N, N), name="A")
    b = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")


def _tiled(func):
    sch = tvm.s_tir.Schedule(func)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    _, ji = sch.split(j, factors=[None, 8])
    sch.vectorize(ji)
    return sch.mod["main"]


@pytest.fixture(scope="module")
def host():
    return get_target("host")


def _builder(host):
    """LocalBuilder with our f_export, and an f_build that is MetaSchedule's default_build minus its
    `import tvm.s_tir.tensor_intrin` (76 s on this machine, paid by every build() call's fresh
    worker); these candidates use no tensor intrinsics. A nested function: the builder's worker
    processes get it by value (cloudpickle), they cannot import this test module."""
    def build(mod, target, _params):
        import tvm as tvm_
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        return tvm_.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target)

    return ms.builder.LocalBuilder(f_build=build, f_export=export_for(host), max_workers=1, timeout_sec=120)


@pytest.fixture(scope="module")
def candidates(host):
    """Two good candidates (unscheduled, and j split by 8 and vectorized) built as tuning builds them."""
    builder = _builder(host)
    func = _matmul()
    mods = [tvm.IRModule({"main": func}), tvm.IRModule({"main": _tiled(func)})]
    built = builder.build([ms.builder.BuilderInput(m, host.tvm_target()) for m in mods])
    assert all(b.error_msg is None for b in built), [b.error_msg for b in built]
    yield [str(b.artifact_path) for b in built], list(ms.arg_info.ArgInfo.from_prim_func(func))
    _remove_artifacts(built)


def _remove_artifacts(built) -> None:
    """What MetaSchedule's RemoveBuildArtifact callback does after a tuning round."""
    for b in built:
        if b.artifact_path is not None:
            shutil.rmtree(Path(str(b.artifact_path)).parent, ignore_errors=True)


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """Two loopback devices with a known_hosts holding their keys (the fixtures in tests/fleet/
    conftest.py are not visible from here)."""
    lb = stand_in_module("loopback")
    if os.geteuid() != 0:
        pytest.skip("the loopback fleet creates Unix users and needs root")
    if not os.access(lb.SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        pytest.skip("needs openssh-server (/usr/sbin/sshd) and ssh-keygen")
    fleet = lb.LoopbackFleet.start(2, tempfile.mkdtemp(prefix="edge-sdk-tune-"))
    kh = fleet.write_known_hosts(tmp_path_factory.mktemp("tune-kh") / "known_hosts")
    yield fleet, kh
    fleet.stop()


def _inputs(paths, args_info):
    return [ms.runner.RunnerInput(p, "cpu", args_info) for p in paths]


def _results(runner, inputs):
    return [f.result() for f in runner.run(inputs)]


def _leftovers(home: Path) -> list[str]:
    """Files under ~/.edge-sdk other than installed runtime bundles, and any tune scratch folder."""
    root = home / ".edge-sdk"
    found = [p.relative_to(root).as_posix() for p in root.rglob("*")
             if (p.is_file() or p.is_symlink()) and p.relative_to(root).parts[0] != "runtime"]
    found += [p.name for p in root.glob(".tune-*")]
    return sorted(found)


def test_good_candidates_are_timed_on_the_device_and_removed(loop, candidates):
    fleet, kh = loop
    dev = fleet.devices[0]
    paths, args_info = candidates
    logins = lambda: dev.log.read_text().count("Accepted publickey")  # noqa: E731
    before = logins()
    runner = make_device_runner(device=dev.name, fleet=fleet.fleet_yaml, target="host", known_hosts=kh,
                                options=RunnerOptions(number=2, repeat=3, min_repeat_ms=1, threads=1, timeout_s=60))
    try:
        first = _results(runner, _inputs(paths, args_info))
        again = _results(runner, _inputs(paths[:1], args_info))  # a second batch: same connection
    finally:
        runner.close()
    for r in first + again:
        assert r.error_msg is None, r.error_msg
        secs = [float(s) for s in r.run_secs]
        assert len(secs) == 3 and all(0 < s < 1 for s in secs)
    home = dev.home
    assert (home / ".edge-sdk/runtime/current/bin/edge-runner").exists()  # deploy's layout, bundle installed
    assert _leftovers(home) == []
    assert logins() - before == 1, "one SSH connection serves every candidate and batch"


def test_broken_crashing_and_hanging_candidates_fail_naming_the_device(loop, candidates, tmp_path):
    fleet, kh = loop
    dev = fleet.devices[1]
    paths, args_info = candidates
    garbage = tmp_path / "garbage.so"
    garbage.write_bytes(b"\x7fELF not really a library")
    crash, hang = _c_kernel(tmp_path, "crash", "volatile int *p = 0; return *p;"), \
        _c_kernel(tmp_path, "hang", "for (;;) {}")
    runner = make_device_runner(device=dev.name, fleet=fleet.fleet_yaml, target="host", known_hosts=kh,
                                options=RunnerOptions(number=1, repeat=1, min_repeat_ms=0, threads=1, timeout_s=3))
    t0 = time.monotonic()
    try:
        res = _results(runner, _inputs([str(garbage), str(crash), str(hang), paths[0],
                                        str(tmp_path / "missing.so")], args_info))
    finally:
        runner.close()
    assert time.monotonic() - t0 < 60
    broken, crashed, hung, good, missing = res
    for r in (broken, crashed, hung, missing):
        assert r.run_secs is None and f"device {dev.name}" in r.error_msg, r.error_msg
    assert "failed on the device" in broken.error_msg and "candidate 0" in broken.error_msg
    assert "crashed on the device (SIGSEGV)" in crashed.error_msg
    assert "timed out after 3 s on the device" in hung.error_msg
    assert "cannot read the artifact" in missing.error_msg
    assert good.error_msg is None and len(good.run_secs) == 1  # a failure does not spoil the next one
    assert _leftovers(dev.home) == []
    user_procs = subprocess.run(["pgrep", "-u", dev.user, "-f", "edge-runner"], capture_output=True, text=True)
    assert user_procs.stdout.strip() == "", "the hanging candidate was killed on the device"


def _c_kernel(tmp_path: Path, name: str, body: str) -> Path:
    """A library exporting `main` the way TVM-built kernels do (__tvm_ffi_main), doing `body`."""
    src = tmp_path / f"{name}.c"
    src.write_text(f"int __tvm_ffi_main(void *self, const void *args, int n, void *rv) {{ {body} }}\n")
    out = tmp_path / f"{name}.so"
    subprocess.run(["gcc", "-O0", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out


def test_unreachable_device_and_unknown_host_key_fail_fast(loop, candidates, tmp_path):
    fleet, kh = loop
    paths, args_info = candidates
    silent = socket.socket()  # accepts TCP and never says a word: no SSH banner ever comes
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connection refused
    dev = fleet.devices[0]
    yaml = tmp_path / "fleet.yaml"
    yaml.write_text(f"defaults: {{key: {fleet.client_key}, target: host}}\ndevices:\n"
                    f"  gone-pi: {{host: pi@127.0.0.1:{closed_port}}}\n"
                    f"  mute-pi: {{host: pi@127.0.0.1:{silent.getsockname()[1]}}}\n"
                    f"  strange-pi: {{host: {dev.user}@{dev.ip}:{dev.port}}}\n")
    empty_kh = tmp_path / "empty_known_hosts"
    empty_kh.write_text("")
    try:
        for name, kh_file, why in (("gone-pi", kh, "unreachable"), ("mute-pi", kh, "unreachable"),
                                   ("strange-pi", empty_kh, "unknown host key")):
            runner = make_device_runner(device=name, fleet=yaml, target="host", known_hosts=kh_file,
                                        options=RunnerOptions(timeout_s=30, connect_timeout_s=2))
            t0 = time.monotonic()
            try:
                res = _results(runner, _inputs(paths, args_info))
            finally:
                runner.close()
            took = time.monotonic() - t0
            assert took < 10, f"{name}: {took:.1f} s"  # one bounded connect, not one per candidate
            for r in res:
                assert r.run_secs is None and f"device {name}" in r.error_msg and why in r.error_msg, r.error_msg
    finally:
        silent.close()
    assert _leftovers(dev.home) == []


def test_a_device_of_another_architecture_is_refused(loop, candidates):
    fleet, kh = loop
    paths, args_info = candidates
    runner = make_device_runner(device=fleet.devices[0].name, fleet=fleet.fleet_yaml, target="pi3", known_hosts=kh)
    try:
        (r,) = _results(runner, _inputs(paths[:1], args_info))
    finally:
        runner.close()
    assert r.run_secs is None and "it is x86_64, but the candidates are built for target pi3" in r.error_msg


@pytest.mark.slow
def test_tune_tir_runs_through_the_device_runner(loop, host, tmp_path):
    fleet, kh = loop
    dev = fleet.devices[0]
    runner = make_device_runner(device=dev.name, fleet=fleet.fleet_yaml, target=host, known_hosts=kh,
                                options=RunnerOptions(number=2, repeat=2, min_repeat_ms=1, threads=1, timeout_s=60))
    builder = _builder(host)
    from edge_sdk.tune.session import metaschedule_logging

    try:
        with metaschedule_logging():  # as edge-sdk tune calls it (pytest's unnamed log handlers otherwise break it)
            db = ms.tune_tir(tvm.IRModule({"main": _matmul()}), host.tvm_target(), str(tmp_path / "work"), 4,
                             num_trials_per_iter=2, builder=builder, runner=runner, strategy="replay-trace",
                             num_tuning_cores=1, seed=1)
    finally:
        runner.close()
    records = db.get_all_tuning_records()
    assert len(records) >= 2
    for rec in records:
        secs = [float(s) for s in rec.run_secs]
        assert secs and all(0 < s < 1e9 for s in secs), secs  # 1e10 is MetaSchedule's mark of a failed run
    assert _leftovers(dev.home) == []


# ---- edge-runner --kernel on the host, no SSH ---------------------------------------------------
@pytest.fixture(scope="module")
def host_runner():
    from edge_sdk.runtime.bundle import ensure_bundle

    return ensure_bundle("x86_64" if get_target("host").arch == "x86_64" else "aarch64") / "bin/edge-runner"


def test_kernel_mode_prints_per_repeat_seconds(host_runner, candidates):
    paths, _ = candidates
    p = subprocess.run([str(host_runner), "--kernel", paths[1], "--args", ARGS_JSON, "--warmup", "2",
                        "--number", "4", "--repeat", "5"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    js = json.loads(p.stdout)
    assert js["func"] == "main" and js["args"] == [[[N, N], "float32"]] * 3
    assert (js["warmup"], js["number"], js["repeat"], js["threads"]) == (2, 4, 5, 1)
    assert len(js["run_secs"]) == 5 and all(s > 0 for s in js["run_secs"])
    assert min(js["run_secs"]) <= js["median_secs"] <= max(js["run_secs"])


def test_kernel_mode_grows_number_to_min_repeat_ms(host_runner, candidates):
    paths, _ = candidates
    p = subprocess.run([str(host_runner), "--kernel", paths[1], "--args", ARGS_JSON, "--number", "1",
                        "--repeat", "2", "--min-repeat-ms", "20"], capture_output=True, text=True, timeout=60)
    js = json.loads(p.stdout)
    assert js["number"] > 1 and js["number"] * js["run_secs"][0] >= 0.005  # near 20 ms, loosely (noise)


@pytest.mark.parametrize("extra, code, message", [
    (["--func", "matmul"], 1, "no function 'matmul' in the library"),
    (["--args", '[[[48, 48], "float32"]]'], 1, "Expected 3 arguments"),
    (["--args", '[[[48, 48], "float33"]]'], 2, "unsupported dtype 'float33'"),
    (["--args", '[[[48, 48], "float32"]'], 2, "--args: expected ']'"),
    (["--number", "0"], 2, "--number: expected an integer >= 1"),
])
def test_kernel_mode_errors(host_runner, candidates, extra, code, message):
    paths, _ = candidates
    argv = [str(host_runner), "--kernel", paths[0], "--args", ARGS_JSON, *extra]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode == code and message in p.stderr, (p.returncode, p.stderr)
    assert p.stdout == ""


# ---- the aarch64 path: an emulated Pi (arm64 sshd under qemu, cortex-a53) -----------------------
@pytest.mark.qemu
@pytest.mark.slow
def test_pi3_candidates_are_timed_on_an_emulated_pi():
    from edge_sdk.fleet.config import load_fleet
    from edge_sdk.fleet.ssh import Connection

    emulated = stand_in_module("emulated_pi")
    if os.geteuid() != 0:
        pytest.skip("emulated Pis need root (namespaces, mounts)")
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs g++-aarch64-linux-gnu")
    try:
        emulated.check_host()
    except emulated.EmulatedError as e:
        pytest.skip(str(e))
    pi3 = get_target("pi3")
    builder = _builder(pi3)
    func = _matmul()
    built = builder.build([ms.builder.BuilderInput(tvm.IRModule({"main": m}), pi3.tvm_target())
                           for m in (func, _tiled(func))])
    assert all(b.error_msg is None for b in built), [b.error_msg for b in built]
    paths = [str(b.artifact_path) for b in built]
    assert all(Path(p).read_bytes()[18] == 183 for p in paths)  # ELF e_machine 183: EM_AARCH64

    fleet = emulated.EmulatedFleet.start(1, tempfile.mkdtemp(prefix="edge-sdk-tune-pis-"), trust=True)
    try:
        kh = fleet.root / "known_hosts"
        runner = make_device_runner(device=fleet.devices[0].name, fleet=fleet.fleet_yaml, target="pi3",
                                    known_hosts=kh, options=RunnerOptions(number=1, repeat=2, min_repeat_ms=0,
                                                                          threads=1, timeout_s=300))
        try:
            res = _results(runner, _inputs(paths, list(ms.arg_info.ArgInfo.from_prim_func(func))))
        finally:
            runner.close()
        for r in res:
            assert r.error_msg is None, r.error_msg
            assert len(r.run_secs) == 2 and all(float(s) > 0 for s in r.run_secs)
        dev = load_fleet(fleet.fleet_yaml).select()[0]
        with Connection(dev, known_hosts=kh) as c:
            arch = c.run(["uname", "-m"]).stdout.strip()
            left = c.run(["sh", "-c", 'find .edge-sdk -path .edge-sdk/runtime -prune -o '
                          '\\( -type f -o -name ".tune-*" \\) -print']).stdout.split()
        assert arch == "aarch64" and left == []
    finally:
        fleet.stop()
        _remove_artifacts(built)


def test_unknown_device_and_bad_options_are_usage_errors(loop):
    from edge_sdk.errors import UsageError

    fleet, kh = loop
    with pytest.raises(UsageError, match="no device 'loop9'"):
        make_device_runner(device="loop9", fleet=fleet.fleet_yaml, target="host", known_hosts=kh)
    with pytest.raises(UsageError, match="repeat must be an integer >= 1"):
        make_device_runner(device="loop1", fleet=fleet.fleet_yaml, target="host", known_hosts=kh, options=RunnerOptions(repeat=0))
