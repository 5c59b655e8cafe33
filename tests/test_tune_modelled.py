"""`edge-sdk tune --target pi3` with no device: MetaSchedule candidates timed by the modelled A53 clock
(tune/modelled_runner.py: each candidate's edge-runner --kernel under qemu with libtiming.so). One 2-trial
search of one kernel of a tiny MobileNetV1, end to end; the times are modelled Pi seconds, never asserted."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache (MetaSchedule databases, bundles) that still finds the built qemu plugins and runtime."""
    from edge_sdk.runtime.bundle import cache_root

    shared, own = cache_root(), tmp_path / "cache"
    own.mkdir()
    for name in ("qemu-plugins", "runtime", "wheels"):
        if (shared / name).exists():
            (own / name).symlink_to(shared / name)
    monkeypatch.setenv("EDGE_SDK_CACHE", str(own))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return own


def test_tune_pi3_without_a_device_runs_under_qemu(cache, tmp_path, capsys):
    from edge_sdk.cli import main

    out = tmp_path / "records"
    argv = ["tune", "mobilenet_v1", "--alpha", "0.25", "--resolution", "32", "--classes", "10", "--target", "pi3",
            "--trials", "2", "--kernel", "edge_dw_1", "--out", str(out), "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["target"] == "pi3"
    (row,) = res["kernels"]
    assert row["ours_ms"] > 0 and row["tuned_ms"] is not None and row["tuned_ms"] > 0
    recs = list((out / "pi3").glob("*.json"))
    assert len(recs) == 1 and json.loads(recs[0].read_text())["trials"] >= 2
    # ours is priced when the workload starts; the verdict's second pricing of it comes from the cache
    assert res["prices"]["run"] >= 3 and res["prices"]["cached"] >= 1


def _two_kernels():
    """Two small PrimFuncs that compute different things (so their libraries differ)."""
    import tvm
    from tvm import te

    a = te.placeholder((256,), "float32", name="a")
    double = te.compute((256,), lambda i: a[i] * 2.0, name="double")
    b = te.placeholder((256,), "float32", name="b")
    square = te.compute((256,), lambda i: b[i] * b[i] + 1.0, name="square")
    return [tvm.IRModule({"main": te.create_prim_func([x, y]).with_attr("global_symbol", "main")})
            for x, y in ((a, double), (b, square))]


def test_candidates_priced_at_once_match_one_at_a_time_and_are_then_served_from_the_cache(cache, tmp_path):
    """Two workers give the prices one worker gives (each run in its own qemu slot), and a second batch of
    the same libraries runs nothing under qemu: the cache answers with the same prices."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from edge_sdk.targets import get_target
    from edge_sdk.tune.device_runner import export_for
    from edge_sdk.tune.measure import PooledBuilder
    from edge_sdk.tune.modelled_runner import ModelledRunner, PriceCache

    target = get_target("pi3")
    mods = _two_kernels()
    builder = PooledBuilder(export_for(target))
    try:
        built = builder.build([BuilderInput(m, target.tvm_target()) for m in mods])
    finally:
        builder.close()
    assert all(b.error_msg is None for b in built), [b.error_msg for b in built]
    inputs = [RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(m["main"])) for b, m in zip(built, mods)]

    def secs(runner):
        results = [f.result() for f in runner.run(inputs)]
        assert all(r.error_msg is None for r in results), [r.error_msg for r in results]
        return [float(r.run_secs[0]) for r in results]

    prices = PriceCache(tmp_path / "prices")
    parallel = ModelledRunner(target, workers=2, cache=prices)
    first = secs(parallel)
    assert (prices.misses, prices.hits) == (2, 0)
    assert first[0] != first[1] and min(first) > 0
    assert secs(ModelledRunner(target, workers=1, cache=PriceCache(None))) == first
    assert secs(parallel) == first
    assert (prices.misses, prices.hits) == (2, 2)
    assert len(list((tmp_path / "prices").glob("*.json"))) == 2



def _same_signature_kernels():
    """Ours (a cheap kernel) and a candidate ~100x dearer on the same arguments (4096 floats in, 4096 out)."""
    import tvm
    from tvm import te

    a = te.placeholder((4096,), "float32", name="a")
    cheap = te.compute((4096,), lambda i: a[i] * 2.0, name="cheap")
    k = te.reduce_axis((0, 64), name="k")
    dear = te.compute((4096,), lambda i: te.sum(a[i] * k.astype("float32"), axis=k), name="dear")
    return [tvm.IRModule({"main": te.create_prim_func([a, out]).with_attr("global_symbol", "main")})
            for out in (cheap, dear)]


def test_a_candidate_far_dearer_than_ours_is_cut_after_its_first_run_with_a_close_estimate(cache, tmp_path):
    """Against ours, a candidate priced > CUT x ours by its first run is not run again: its price is that estimate
    (within 10 % of its exact price here), never cached; ours against itself is priced exactly."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from edge_sdk.targets import get_target
    from edge_sdk.tune.device_runner import export_for
    from edge_sdk.tune.measure import PooledBuilder
    from edge_sdk.tune.modelled_runner import CUT, ModelledRunner, PriceCache

    target = get_target("pi3")
    mods = _same_signature_kernels()
    builder = PooledBuilder(export_for(target))
    try:
        built = builder.build([BuilderInput(m, target.tvm_target()) for m in mods])
    finally:
        builder.close()
    assert all(b.error_msg is None for b in built), [b.error_msg for b in built]
    inputs = [RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(m["main"])) for b, m in zip(built, mods)]

    exact = ModelledRunner(target, workers=2, cache=PriceCache(None))
    [f.result() for f in exact.run(inputs)]
    ours, dear = exact.last
    assert not ours.estimated and not dear.estimated and dear.call > CUT * ours.call

    prices = PriceCache(tmp_path / "prices")
    searching = ModelledRunner(target, workers=2, cache=prices)
    searching.ours = ours
    results = [f.result() for f in searching.run(inputs)]
    again, cut = searching.last
    assert again == ours and not again.estimated
    assert cut.estimated and searching.cut == 1
    assert abs(cut.call - dear.call) < 0.1 * dear.call
    assert float(results[1].run_secs[0]) == cut.call / (target.clock_ghz * 1e9)
    assert len(list((tmp_path / "prices").glob("*.json"))) == 1  # ours only: an estimate is never a cached price
