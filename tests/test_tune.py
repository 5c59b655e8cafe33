"""edge-sdk tune: records written, a second tune skips them, compile applies them (manifest + numerics
against the numpy reference), --no-tuning ignores them, bad records and bad requests fail clearly.

One small tune (two kernels of a tiny MobileNetV1, 4 trials each) is shared by the slow tests. It
keeps the tuned schedule whatever the timings say (margin=-inf), so the apply path is exercised on
any machine; whether tuning wins is a measurement, never asserted here.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from edge_sdk.cli import main

MODEL = ["mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "10"]
KERNELS = ["edge_dw_5", "edge_gemm_6"]
TRIALS = 4


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    """No user records of this machine, and a private MetaSchedule cache, in every test."""
    root = tmp_path_factory.getbasetemp() / "tune-env"
    monkeypatch.setenv("XDG_DATA_HOME", str(root / "xdg"))
    monkeypatch.setenv("EDGE_SDK_CACHE", str(root / "cache"))


@pytest.fixture(scope="module")
def tiny():
    from edge_sdk.models.zoo import build_zoo_model

    return build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=10, seed=0)


@pytest.fixture(scope="module")
def records(tmp_path_factory, tiny):
    """A records root with tuned-schedule records for KERNELS (host)."""
    import os

    from edge_sdk.targets import get_target
    from edge_sdk.tune.session import Search, tune_model

    root = tmp_path_factory.getbasetemp() / "tune-env"
    old = os.environ.get("EDGE_SDK_CACHE")
    os.environ["EDGE_SDK_CACHE"] = str(root / "cache")
    try:
        out = tmp_path_factory.mktemp("records")
        result = tune_model(tiny, get_target("host"), search=Search(TRIALS, margin=float("-inf")), out_root=out,
                            kernels=KERNELS)
    finally:
        os.environ.pop("EDGE_SDK_CACHE") if old is None else os.environ.__setitem__("EDGE_SDK_CACHE", old)
    return out, result


@pytest.mark.slow
def test_tune_writes_records(records):
    out, result = records
    assert [r.workload.name for r in result.rows] == KERNELS
    files = sorted((out / "host").glob("*.json"))
    assert len(files) == 2
    for f in files:
        d = json.loads(f.read_text())
        assert d["winner"] == "tuned" and isinstance(d["trace"], list)
        assert d["trials"] >= TRIALS and d["ours_ms"] > 0 and d["tuned_ms"] > 0
        assert d["tvm"] and d["date"] and d["machine"]["cpu"] is not None
        assert f.name == f"{d['kind']}-{d['workload_hash']}.json"


@pytest.mark.slow
def test_second_tune_skips_recorded(capsys, records):
    out, _ = records
    before = {f: f.read_bytes() for f in (out / "host").glob("*.json")}
    argv = ["tune", *MODEL, "--trials", str(TRIALS), "--out", str(out), "--json"]
    for k in KERNELS:
        argv += ["--kernel", k]
    code, stdout, err = _run(capsys, argv)
    assert code == 0, err
    rows = json.loads(stdout)["kernels"]
    assert [r["status"] for r in rows] == ["recorded", "recorded"]
    assert {f: f.read_bytes() for f in (out / "host").glob("*.json")} == before


@pytest.mark.slow
def test_interrupted_search_resumes_from_its_database(records, tiny, tmp_path):
    """A workload without a record but with trials in its MetaSchedule database runs no new trials."""
    from tvm.s_tir import meta_schedule as ms

    from edge_sdk.targets import get_target
    from edge_sdk.tune.session import Search, tune_model, work_dir

    out, result = records
    wl = result.rows[0].workload
    db_dir = work_dir(get_target("host"), wl)
    assert len(ms.database.JSONDatabase(work_dir=str(db_dir))) >= TRIALS
    shutil.copytree(out, tmp_path / "r")
    (tmp_path / "r" / "host" / result.rows[0].record.name).unlink()  # as if cut before the record was written
    res = tune_model(tiny, get_target("host"), search=Search(TRIALS), out_root=tmp_path / "r", kernels=[wl.name])
    assert res.rows[0].status in ("tuned", "ours") and res.rows[0].trials == len(
        ms.database.JSONDatabase(work_dir=str(db_dir)))
    assert (tmp_path / "r" / "host" / result.rows[0].record.name).is_file()


@pytest.mark.slow
def test_compile_applies_records_and_matches_reference(capsys, records, tiny, tmp_path):
    import tvm
    from tvm import relax

    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.targets import get_target
    from edge_sdk.tune.store import RecordSet

    out, _ = records
    pkg = tmp_path / "m.edgepkg"
    code, _, err = _run(capsys, ["compile", *MODEL, "--tuning-records", str(out), "-o", str(pkg)])
    assert code == 0, err
    code, stdout, _ = _run(capsys, ["inspect", str(pkg), "--json"])
    tuning = json.loads(stdout)["tuning"]
    assert tuning["enabled"] and sorted(k["kernel"] for k in tuning["kernels"]) == KERNELS
    # the same compile, run here against the numpy reference
    tuned: list = []
    target = get_target("host")
    ex, params = compile_relax(tiny.mod, target, tuning=RecordSet([out], target), tuned=tuned)
    assert len(tuned) == 2
    x = tiny.example_input(seed=1)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    y = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    np.testing.assert_allclose(y, evaluate(tiny.mod, x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_no_tuning_ignores_records(capsys, records, tmp_path, monkeypatch):
    out, _ = records
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    shutil.copytree(out, tmp_path / "xdg" / "edge-sdk" / "tuning")  # the user's records, used by default
    pkg = tmp_path / "m.edgepkg"
    assert _run(capsys, ["compile", *MODEL, "--no-tuning", "-o", str(pkg)])[0] == 0
    m = json.loads(_run(capsys, ["inspect", str(pkg), "--json"])[1])
    assert m["tuning"] == {"enabled": False, "roots": [], "records_read": 0, "kernels": []}
    assert _run(capsys, ["compile", *MODEL, "-o", str(pkg)])[0] == 0
    m = json.loads(_run(capsys, ["inspect", str(pkg), "--json"])[1])
    assert len(m["tuning"]["kernels"]) == 2  # the default search path found them


@pytest.mark.slow
def test_record_of_another_workload_does_not_match(records, tiny, tmp_path):
    """A record whose stored workload differs (same hash, as after a collision or a hand edit) is no match."""
    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.targets import get_target
    from edge_sdk.tune.store import RecordSet

    out, _ = records
    files = sorted((out / "host").glob("*.json"))
    a, b = (json.loads(f.read_text()) for f in files)
    (tmp_path / "host").mkdir()
    a["workload"] = b["workload"]
    (tmp_path / "host" / files[0].name).write_text(json.dumps(a))
    tuned: list = []
    target = get_target("host")
    compile_relax(tiny.mod, target, tuning=RecordSet([tmp_path], target), tuned=tuned)
    assert tuned == []


def test_corrupt_record_names_the_file(capsys, tmp_path):
    (tmp_path / "host").mkdir()
    bad = tmp_path / "host" / "dw-0123456789abcdef.json"
    bad.write_text('{"format": "edge-sdk-tuning-record/1", "kernel": ')
    code, _, err = _run(capsys, ["compile", *MODEL, "--tuning-records", str(tmp_path), "-o", str(tmp_path / "m.edgepkg")])
    assert code == 3
    assert str(bad) in err
    assert not (tmp_path / "m.edgepkg").exists()


@pytest.mark.parametrize("argv,needle", [
    (["--variant", "int8"], "tuning supports float32 only"),
    (["--variant", "w1a2"], "tuning supports float32 only"),
    (["--target", "pi4"], "--device NAME --fleet FLEET"),  # pi3 tunes by the modelled A53 clock (test_tune_modelled)
    (["--trials", "0"], "--trials 0"),
    (["--device", "pi"], "--device and --fleet go together"),
    (["--kernel", "edge_nope_1"], "--kernel edge_nope_1: not a kernel of this model"),
])
def test_tune_usage_errors(capsys, argv, needle):
    code, _, err = _run(capsys, ["tune", *MODEL, *argv])
    assert code == 2
    assert needle in err


@pytest.mark.slow
def test_tune_on_a_device_of_the_fleet(capsys, tmp_path):
    """--device/--fleet: candidates and ours are timed on a loopback device (real sshd, host arch)."""
    import os
    import tempfile

    from edge_sdk.devices import stand_in_module

    lb = stand_in_module("loopback")
    if os.geteuid() != 0:
        pytest.skip("the loopback fleet creates Unix users and needs root")
    if not os.access(lb.SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        pytest.skip("needs openssh-server (/usr/sbin/sshd) and ssh-keygen")
    fleet = lb.LoopbackFleet.start(1, tempfile.mkdtemp(prefix="edge-sdk-tune-"))
    try:
        kh = fleet.write_known_hosts(tmp_path / "known_hosts")
        dev = fleet.devices[0]
        code, out, err = _run(capsys, ["tune", *MODEL, "--kernel", "edge_dw_5", "--trials", "2", "--device", dev.name,
                                       "--fleet", str(fleet.fleet_yaml), "--known-hosts", str(kh),
                                       "--out", str(tmp_path / "rec"), "--json"])
    finally:
        fleet.stop()
    assert code == 0, err
    (row,) = json.loads(out)["kernels"]
    assert row["status"] in ("tuned", "ours") and row["ours_ms"] > 0
    assert json.loads((tmp_path / "rec" / "host" / row["record"].rsplit("/", 1)[1]).read_text())["runner"] \
        == f"device {dev.name}"


def test_shipped_records_are_valid():
    """Every record in the repo reads, names its own workload (hash and file name) and, when the tuned
    schedule won, replays on that workload."""
    import tvm_ffi

    from edge_sdk.tune.store import read_record, replay, repo_root, workload_hash

    from edge_sdk.tune import choice_records

    for path in sorted(repo_root().glob("*/*.json")):
        if path.parent == choice_records.root():  # compile/choice's records (their own format)
            assert choice_records.read_file(path)["records"], path
            continue
        rec = read_record(path)
        wl = rec.workload()
        assert workload_hash(wl) == rec.data["workload_hash"], path
        assert path.name == f"{rec.data['kind']}-{rec.data['workload_hash']}.json"
        assert path.parent.name == rec.data["target"]["name"]
        if rec.tuned:
            assert not tvm_ffi.structural_equal(replay(wl, rec.data["trace"]), wl), path


def test_a_price_is_keyed_by_the_library_bytes(tmp_path):
    """The same bytes at another path share a key; one byte more does not; an unreadable cache file is a miss."""
    from edge_sdk.targets import get_target
    from edge_sdk.tune.modelled_runner import Price, PriceCache, price_key

    target, runner = get_target("pi3"), tmp_path / "bundle-x" / "bin" / "edge-runner"
    one, same, other = tmp_path / "a.so", tmp_path / "b.so", tmp_path / "c.so"
    one.write_bytes(b"\x7fELF" + bytes(100))
    same.write_bytes(one.read_bytes())
    other.write_bytes(one.read_bytes() + b"\0")
    args = [[[256], "float32"], [[256], "float32"]]
    k = price_key(str(one), args, target, runner)
    assert price_key(str(same), args, target, runner) == k
    assert price_key(str(other), args, target, runner) != k
    assert price_key(str(one), [[[128], "float32"], [[128], "float32"]], target, runner) != k
    cache = PriceCache(tmp_path / "prices")
    assert cache.get(k) is None
    cache.put(k, Price(1.8e6, 9.5e6))
    assert cache.get(k) == Price(1.8e6, 9.5e6)
    cache.put(k + "e", Price(1.0e6, 5.0e6, estimated=True))  # a first-run estimate is never kept
    assert not (tmp_path / "prices" / f"{k}e.json").exists()
    (tmp_path / "prices" / f"{k}.json").write_text("{not json")
    assert cache.get(k) is None and (cache.hits, cache.misses) == (1, 2)
