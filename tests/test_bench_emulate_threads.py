"""`bench --emulate pi3 --threads 1,2`: each row modelled at its own thread count (the Cortex-A53 timing
model over every vCPU's blocks); LiteRT only at one thread, saying why. No speed is
asserted: the figures have to exist, be per thread, and the per-thread instruction count be libtiming's."""
from __future__ import annotations

import pytest

from edge_sdk.bench import bench as B
from edge_sdk.bench import peers as P
from bench_driver import bench_json
from edge_sdk.errors import UsageError

TINY = ["mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "10"]


def _bench(argv, capsys) -> dict:
    code, js = bench_json([*argv, "--json", "--no-store"], capsys)
    assert code == 0
    return js


@pytest.mark.slow
@pytest.mark.qemu
def test_emulate_models_each_thread_count(isolated, capsys):
    # ours only: ncnn's rows at N threads take the same path (count_ncnn's OpenMP threads, priced per vCPU;
    # tests/test_timing_calibration.py prices its 4-thread profiles) and would triple this test's qemu time
    db = isolated / "results.sqlite"  # stored as well: each row's per-layer split goes into the run's extra
    code, js = bench_json([*TINY, "--variants", "float32", "--target", "pi3", "--emulate", "pi3", "--threads", "1,2",
                           "--json", "--db", str(db)], capsys)
    assert code == 0
    rows = {(r["engine"], r["variant"], r["threads"]): r for r in js["rows"]}
    assert set(rows) == {("edge-sdk", "float32", 1), ("edge-sdk", "float32", 2)}
    for key in rows:
        r = rows[key]
        assert r["status"] == "ok", r
        assert r["modelled_ms"] > 0 and r["modelled_cycles"] > 0
        assert r["timing"]["threads"] == key[2]
        assert r["instructions"] > 0
        # the same per-layer split as run --profile (timing/per_layer.py), at either thread count
        split = r["per_layer_modelled_ms"]
        assert sum(x["ms"] for x in split) == pytest.approx(r["modelled_ms"], rel=0.03)
        assert {x["name"] for x in split} >= {"conv1", "fc"}
    from edge_sdk.results.store import ResultsStore

    with ResultsStore(db, read_only=True) as store:
        stored = {r["threads"]: r["extra"]["per_layer_modelled_ms"] for r in store.query()}
    assert stored == {t: rows[("edge-sdk", "float32", t)]["per_layer_modelled_ms"] for t in (1, 2)}
    two = rows[("edge-sdk", "float32", 2)]
    assert set(two["timing"]["cycles_split"]) >= {"fork_join"}


@pytest.mark.parametrize("threads", [1, 4])
def test_litert_is_counted_with_one_thread_only(threads):
    litert = next(p for p in P.PEERS if p.engine == "litert" and p.variant == "float32")
    ncnn = next(p for p in P.PEERS if p.engine == "ncnn" and p.variant == "float32")
    why = P.emulate_unavailable(litert, threads)
    assert (why is None) if threads == 1 else ("1 thread" in why)
    assert P.emulate_unavailable(ncnn, threads) is None


def test_memory_stays_one_thread(isolated):
    with pytest.raises(UsageError, match="--threads 1"):
        B.run_bench(object(), variants=["float32"], target="pi3", emulate="pi3", memory=True, threads=[1, 4])
