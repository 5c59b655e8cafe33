"""ncnn as a bench peer: the engine (edge_sdk/bench/peers/ncnn.py, run as benchncnn runs a .param), our
Relax -> ncnn writer (edge_sdk/bench/ncnn_convert.py), the int8 rule, the bench rows on the host, and
the instruction count under qemu (edge_sdk/qemu/runner.count_ncnn).

Numerics are checked against independent references: our writer's nets with real weights against the
numpy Relax interpreter (quant/relax_ref.py), benchncnn's own nets with DataReaderFromEmpty's zero
weights against softmax(0) = 1/classes, the int8 rule against benchncnn's own int8 files.
No test asserts a speed.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.bench import peers as P
from edge_sdk.errors import MissingDependency

ncnn = pytest.importorskip("ncnn", reason="ncnn is in the test extras (pip install -e '.[test]')")

TIME_ENGINE = Path(P.time_engine.__file__)
SHIPPED = P.NCNN_SHIPPED


def _tokens(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip()]


@pytest.mark.parametrize("name,alpha,res", [("mobilenet_v1", 0.25, 64), ("mobilenet_v2", 0.35, 64),
                                            ("resnet18", 0.25, 63)])
def test_written_net_with_real_weights_matches_numpy(tmp_path, name, alpha, res):
    """Our .param + .bin, run by the engine as bench runs it, against the numpy interpreter of the same graph."""
    from edge_sdk.bench.ncnn_convert import write_zoo_model
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.quant.relax_ref import evaluate

    model = build_zoo_model(name, alpha=alpha, resolution=res, classes=10, seed=3)
    write_zoo_model(model.mod, tmp_path / "m.param", tmp_path / "m.bin")
    run, shape, dtype, _version = P.ncnn.load(str(tmp_path / "m.param"), 1, weights=str(tmp_path / "m.bin"))
    assert shape == [1, 3, res, res] and dtype == "float32"
    x = np.random.default_rng(0).uniform(-1, 1, (1, res, res, 3)).astype(np.float32)
    y = run(x.transpose(0, 3, 1, 2))  # not contiguous: the engine must copy and keep the copy alive
    ref = evaluate(model.mod, x)
    run.close()
    assert y.shape == ref.shape == (1, 10)
    np.testing.assert_allclose(y, ref, atol=1e-3, rtol=1e-2)
    assert int(y.argmax()) == int(ref.argmax())


@pytest.mark.parametrize("param", ["mobilenet.param", "mobilenet_int8.param", "resnet18_int8.param"])
def test_benchncnn_net_with_zero_weights_gives_uniform_softmax(param):
    """benchncnn's way: DataReaderFromEmpty (all weights, biases and int8 scales zero) -> every logit 0."""
    run, shape, _dtype, _version = P.ncnn.load(str(SHIPPED / param), 1)
    x = P.time_engine.make_input(shape, "float32", 0, None)
    y = run(x)
    run.close()
    assert shape == [1, 3, 224, 224] and y.shape == (1, 1000)
    np.testing.assert_allclose(y, np.full((1, 1000), 1 / 1000), rtol=1e-5)


def test_time_engine_cli_times_and_counts_ncnn():
    base = [sys.executable, str(TIME_ENGINE), "--engine", "ncnn", "--model", str(SHIPPED / "mobilenet.param")]
    timed = json.loads(subprocess.run(base + ["--warmup", "0", "--repeat", "2", "--min-time-ms", "0"],
                                      capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    assert timed["engine"] == "ncnn" and timed["version"] == ncnn.__version__
    assert timed["input_shape"] == [1, 3, 224, 224] and timed["output_shape"] == [1, 1000]
    assert len(timed["latencies_ms"]) >= 2 and min(timed["latencies_ms"]) > 0
    counted = subprocess.run(base + ["--count", "2"], capture_output=True, text=True, check=True)
    assert json.loads(counted.stdout) == {"engine": "ncnn", "inferences": 2, "output_shape": [1, 1000]}
    assert counted.stderr == ""  # net.clear() before the pool allocators: no "destroyed too early" abort


def test_int8_rule_reproduces_benchncnns_int8_files():
    from edge_sdk.bench.ncnn_convert import int8_param

    mine = _tokens(int8_param((SHIPPED / "mobilenet.param").read_text()))
    assert mine == _tokens((SHIPPED / "mobilenet_int8.param").read_text())
    mine = _tokens(int8_param((SHIPPED / "resnet18.param").read_text()))
    want = _tokens((SHIPPED / "resnet18_int8.param").read_text())
    differ = [(m[1], w[1]) for m, w in zip(mine, want) if m != w]
    assert len(mine) == len(want) and differ == [("fc1000", "fc1000")]  # ncnn's table left ResNet18's fc in float
    assert "8=2" in mine[-2] and not any(t.startswith("8=") for t in want[-2])


def test_written_param_shape_and_splits(tmp_path):
    from edge_sdk.bench.ncnn_convert import from_relax, param_text
    from edge_sdk.models.zoo import build_zoo_model

    text = param_text(from_relax(build_zoo_model("resnet18", alpha=0.25, resolution=40, classes=7).mod))
    rows = _tokens(text)
    assert rows[0] == ["7767517"] and rows[2][:4] == ["Input", "data", "0", "1"]
    (tmp_path / "r.param").write_text(text)
    assert P.ncnn.input_shape(str(tmp_path / "r.param")) == [1, 3, 40, 40]
    kinds = [r[0] for r in rows[2:]]
    assert kinds.count("Split") == 8 and kinds.count("BinaryOp") == 8 and kinds[-1] == "Softmax"
    assert rows[-1][5] == "output" and int(rows[1][0]) == len(rows) - 2
    readers = [b for r in rows[2:] for b in r[4:4 + int(r[2])]]
    assert len(readers) == len(set(readers))  # every blob has one reader (the Splits' job)


def test_ncnn_definition_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "peers_root", lambda: tmp_path / "peers")
    f32, i8 = (p for p in P.PEERS if p.engine == "ncnn")
    assert "benchncnn's mobilenet.param" in P.prepare_ncnn("mobilenet_v1_1.0_224", f32)
    assert P.peer_file("mobilenet_v1_1.0_224", f32).read_text() == (SHIPPED / "mobilenet.param").read_text()
    assert "mobilenet_v2.param" in P.prepare_ncnn("mobilenet_v2_1.0_224", i8)  # no benchncnn int8 file: the rule
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "resnet18.param").write_text((SHIPPED / "mobilenet.param").read_text())
    assert str(mine) in P.prepare_ncnn("resnet18_1.0_224", f32, mine)  # --ncnn-models wins, by name
    assert "zoo model" in P.prepare_ncnn("resnet18_0.5_96_c10", f32)
    assert P.prepare_ncnn("not_a_key", f32) is None and P.prepare_ncnn("squeezenet_1.0_224", f32) is None


@pytest.mark.slow
def test_bench_peers_rows_on_host(tmp_path, monkeypatch):
    """`bench --peers` on a tiny zoo model: ncnn float32 and int8 rows, timed, ok, naming their definition."""
    from edge_sdk.bench import bench as B
    from edge_sdk.models.zoo import build_zoo_model

    monkeypatch.setattr(B, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(P, "peers_root", lambda: tmp_path / "peers")
    model = build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=10, seed=1)
    res = B.run_bench(model, variants=["float32"], peers=True, warmup=0, repeat=2, min_time_ms=0, rounds=2)
    rows = {r.variant: r for r in res.rows if r.engine == "ncnn"}
    assert set(rows) == {"float32", "int8"}
    for r in rows.values():
        assert r.status == "ok", r.detail
        assert r.latency_ms["median"] > 0 and r.repeats >= 3  # round 1 (repeat 2) and round 2 (one more)
        assert "zoo model written as an ncnn .param" in r.detail and r.package.endswith(".param")


def _guest_or_skip():
    from edge_sdk.qemu import runner as E

    try:
        E.plugin_dir()
        g = E.guest_python_dir()
    except MissingDependency as e:
        pytest.skip(str(e))
    if not (g / "site" / "ncnn").is_dir():
        pytest.skip("the guest Python has no ncnn (bash tools/build_qemu_plugins.sh --guest-python)")
    return E


@pytest.mark.qemu
@pytest.mark.slow
def test_emulated_bench_rows_count_ncnn_deterministically(tmp_path, monkeypatch):
    """Under --emulate: ncnn rows with an instruction count, the same as a second count of the same file."""
    E = _guest_or_skip()
    from edge_sdk.targets import get_target

    monkeypatch.setattr(P, "peers_root", lambda: tmp_path / "peers")
    run = P.PeerRun((1,), get_target("pi3"), "cortex-a53", say=lambda _m: None)
    rows = [r for r in P.peer_rows("mobilenet_v1_0.25_32_c10", run) if r.engine == "ncnn"]
    assert [(r.variant, r.status) for r in rows] == [("float32", "ok"), ("int8", "ok")], [r.detail for r in rows]
    f32 = rows[0]
    assert f32.instructions > 0 and f32.counts[E.K_HIGH] > f32.counts[E.K_LOW]
    again = E.count_ncnn(Path(f32.package), 1, ks=(E.K_HIGH,))
    # deterministic to a few instructions: ncnn's count moved by 2 of 1.96 G between two runs once (CI,
    # 2026-12-01; guest heap addresses under qemu-user may differ), ours is exact (test_bench)
    assert abs(again.counts[E.K_HIGH] - f32.counts[E.K_HIGH]) <= 1e-6 * f32.counts[E.K_HIGH]
