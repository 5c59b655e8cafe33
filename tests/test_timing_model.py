"""The A53 timing model on a real package: its figures add up, agree with the instruction counter,
follow each target's clock, name the package's layers, and are the same twice.

The package is the session's small pi3 MobileNetV1 (conftest); our runner runs it under qemu with
libinsn.so and libtiming.so (timing/session.timing_session over qemu/runner.py's counted runs). No test asserts a speed.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from edge_sdk.timing import api


@pytest.fixture(scope="module")
def profile(pi3_package):
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing.session import timing_session
    from edge_sdk.package import open_package

    with tempfile.TemporaryDirectory() as tmp:
        pkg = open_package(pi3_package, Path(tmp))
        lib = pkg.member("model.so")
        with timing_session() as seen:
            count = E.count_runner(lib=lib, params=pkg.member("params.bin"), input=pkg.golden_input)
        priced = api.price(seen[str(lib)], "pi3", files={"model.so": lib})
    return seen[str(lib)], count, priced


@pytest.mark.qemu
def test_counts_agree_with_the_instruction_counter(profile):
    pi, count, m = profile
    # libtiming's per-block counts x block lengths are libinsn's count, to the instruction
    assert m["instructions"] == count.per_inference
    assert m["modelled_cycles"] > m["instructions"] / 2  # never faster than two instructions a cycle


@pytest.mark.qemu
def test_fields_and_split_add_up(profile):
    _pi, _count, m = profile
    for key in ("modelled_cycles", "modelled_ms", "instructions", "cycles_split", "misses", "dram_bytes",
                "functions", "target", "clock_ghz", "threads", "model"):
        assert key in m
    split = m["cycles_split"]
    one_thread = sum(v for k, v in split.items() if k not in ("fork_join", "parallel_wait", "shared_bandwidth"))
    assert one_thread == pytest.approx(m["modelled_cycles"], rel=1e-9)
    assert m["modelled_ms"] == pytest.approx(m["modelled_cycles"] / (1.2 * 1e6))
    assert set(m["model"]["sources"]) >= {"l2_hit", "dram", "mispredict", "fp_mac"}


@pytest.mark.qemu
def test_functions_are_the_packages_layers(profile):
    _pi, _count, m = profile
    names = [f["function"] for f in m["functions"]]
    assert any(n.startswith("edge_gemm_") for n in names) and any(n.startswith("edge_dw_") for n in names)
    assert sum(f["share"] for f in m["functions"]) <= 1.0 + 1e-9


@pytest.mark.qemu
def test_each_target_at_its_clock(profile):
    pi, _count, _m = profile
    ms = {t: api.price(pi, t)["modelled_ms"] for t in ("pi3plus", "pi3", "pi-zero2w")}
    assert ms["pi3plus"] < ms["pi3"] < ms["pi-zero2w"]
    cycles = {t: api.price(pi, t)["modelled_cycles"] for t in ms}
    # the core's cycles are the clock's business only through the memory bandwidth (bytes per cycle)
    assert cycles["pi3"] == pytest.approx(cycles["pi3plus"], rel=0.1)


@pytest.mark.qemu
def test_same_model_twice(pi3_package, profile):
    _pi, _count, m = profile
    again = api.model_package(pi3_package)
    assert again["modelled_cycles"] == m["modelled_cycles"]
    assert again["instructions_counted"] == m["instructions"]


@pytest.mark.qemu
def test_run_reports_modelled_pi_ms_next_to_qemu_wall_time(pi3_package):
    from edge_sdk.run import run_package

    res = run_package(pi3_package, repeat=1, threads=1)
    js = res.to_json()
    assert js["emulated"] and js["modelled_ms"] > 0 and js["modelled_cycles"] > 0
    assert js["model_version"].startswith("a53-") and "QEMU wall time" in js["latency_is"]
    text = str(res)
    assert "modelled Pi 3 ms" in text and "QEMU wall time (emulator speed, not a Pi)" in text
    # the roofline's peak is that of the cores the run's threads use: one of the Pi 3's four
    assert res.peak_gflops == pytest.approx(4 * 1.2 * 8 / 4)
    assert "modelled_ms" not in run_package(pi3_package, repeat=1, model=False).to_json()
