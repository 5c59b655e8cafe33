"""Shared fixtures: small compiled packages (built once per session) and the tests/data folder."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import suite_timeline
import wheel_venv
import xdist_units

DATA = Path(__file__).parent / "data"

# compile's per-layer schedule choice on Pi targets (compile/choice): the suite compiles with what a user
# gets by default, whatever the shell says: the shipped choice records (tune/records/choice), nothing priced
# at compile time (a test that prices asks: tests/test_choice.py choose=True)
os.environ.pop("EDGE_SDK_CHOICE", None)
os.environ.pop("EDGE_SDK_CHOICE_RECORDS", None)

# Fixtures that compile a model or start an emulated Pi: a test that uses one is slow whatever its own
# body does, so it is marked here rather than in every file (the quick lane is `pytest -m "not slow"`).
SLOW_FIXTURES = {"host_package", "pi3_package", "emulated_pis", "v1", "v2", "variant_package"}
# Tests that compile a model in their own body: each took more than 2.5 s in the quick lane
# (`pytest -m "not slow" --durations=0` on the 2-core CI machine, 2026-12-01). New compile-heavy
# tests mark themselves with @pytest.mark.slow instead of growing this list.
SLOW_TESTS = {
    "tests/test_bench.py::test_json_schema_store_and_missing_peers",
    "tests/test_bench.py::test_rows_have_statuses_golden_check_and_table",
    "tests/test_bench.py::test_wrong_output_is_a_status",
    "tests/test_bitserial_net.py::test_cli_compile_and_run_w1a2",
    "tests/test_bitserial_net.py::test_float_stem_still_builds_and_matches_its_reference",
    "tests/test_bitserial_net.py::test_host_build_matches_reference",
    "tests/test_bitserial_net.py::test_int8_stem_rows_have_their_own_kernels",
    "tests/test_bitserial_net.py::test_mobilenet_v1_float_depthwise_bitserial_pointwise_matches_reference",
    "tests/test_bitserial_net.py::test_unfused_build_equals_fused_build_and_reference",
    "tests/test_bitserial_properties.py::test_compiled_conv2d_equals_integer_reference",
    "tests/test_bitserial_properties.py::test_compiled_fused_glue_conv_equals_numpy_glue",
    "tests/test_cli.py::test_int8_tflite_compile_run_is_bit_exact_with_tflite",
    "tests/test_cli.py::test_int8_variant_quantizes_a_float_model_with_a_warning",
    "tests/test_compiler_int8.py::test_compiled_model_equals_tflite_reference",
    "tests/test_compiler_int8.py::test_distance_to_xnnpack_is_within_the_measured_bound",
    "tests/test_compiler_ops.py::test_small_network_round_trip",
    "tests/test_compiler_ops.py::test_tflite_matches_litert",
    "tests/test_dashboard.py::test_served_page_in_chromium",
    "tests/test_float_models.py::test_onnx_model_matches_onnxruntime",
    "tests/test_float_models.py::test_tflite_float_compiled_matches_litert",
    "tests/test_float_models.py::test_zoo_with_keras_weights_matches_the_converted_keras_model",
    "tests/test_lce_import.py::test_cli_compile_w1a1_and_run",
    "tests/test_lce_import.py::test_compiled_host_matches_lce_interpreter",
    "tests/test_models.py::test_numpy_reference_agrees_with_tvm_stock_lowering",
    "tests/test_profile.py::test_unfused_bitserial_glue_is_measured",
    "tests/test_ptq.py::test_compile_cli_calibrates_on_a_folder",
    "tests/test_ptq.py::test_compiled_ptq_model_equals_numpy_int8_reference",
    "tests/test_ptq.py::test_float_tflite_is_quantized_and_compiles_exactly",
    "tests/test_trust_signing.py::test_sign_key_on_compile",
    "tests/test_tune_device.py::test_broken_crashing_and_hanging_candidates_fail_naming_the_device",
    "tests/test_tune_device.py::test_good_candidates_are_timed_on_the_device_and_removed",
}


def pytest_configure(config):
    # the README's `-n 2 --dist loadgroup`: which tests share a worker, and in which order (tests/xdist_units.py)
    config.pluginmanager.register(xdist_units, "edge-sdk-xdist-units")
    # EDGE_SDK_TEST_TIMELINE=DIR: each test's wall / CPU time and qemu lock turns (tests/suite_timeline.py)
    config.pluginmanager.register(suite_timeline, "edge-sdk-suite-timeline")


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = item.nodeid.split("[")[0]
        if (item.get_closest_marker("qemu") or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
                or where in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
    xdist_units.write_units(config, items)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def small_mobilenet():
    from edge_sdk.models.zoo import build_zoo_model

    return build_zoo_model("mobilenet_v1", alpha=0.25, resolution=64, classes=10, seed=3)


def _compile(model, target_name: str, out: Path) -> Path:
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    compile_model(model, variant=get_variant("float32"), target=get_target(target_name), out=out)
    return out


@pytest.fixture(scope="session")
def host_package(tmp_path_factory, small_mobilenet) -> Path:
    return _compile(small_mobilenet, "host", tmp_path_factory.mktemp("pkg") / "mbv1_host.edgepkg")


@pytest.fixture(scope="session")
def pi3_package(tmp_path_factory, small_mobilenet) -> Path:
    if shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user (tools/setup.sh installs them)")
    return _compile(small_mobilenet, "pi3", tmp_path_factory.mktemp("pkg") / "mbv1_pi3.edgepkg")


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    """Bench packages and peer models in tmp_path (the runtime bundle cache stays shared): the bench tests'
    (tests/bench_driver.py drives `edge-sdk bench` for them)."""
    from edge_sdk.bench import bench as B
    from edge_sdk.bench import peers as P

    monkeypatch.setattr(B, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(P, "peers_root", lambda: tmp_path / "peers")
    return tmp_path


def netns() -> set[str]:
    """The network namespaces that exist now (the emulated Pi makes one per run)."""
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> dict:
    """The built wheel in a fresh venv outside the checkout (tests/wheel_venv.py): tests/test_wheel.py's, and
    the reduced demo's CLI."""
    return wheel_venv.install_wheel(tmp_path_factory.mktemp("wheel"))


@dataclass
class DemoRun:
    rc: int
    out: str  # stdout: the table, then the --json document
    err: str
    db: Path
    html: Path
    pkgs: Path
    netns_before: set
    netns_after: set
    mounts_after: str
    frames: int
    cli: Path  # the installed wheel's edge-sdk
    left_in_cwd: list  # what the demo wrote into the (empty) folder it ran in


@pytest.fixture(scope="session")
def reduced_demo(tmp_path_factory, installed_wheel) -> DemoRun:
    """One reduced `edge-sdk demo` (tiny MobileNetV1, 3 frames, 20 held-out digits), run once as a user runs
    it: the installed wheel's CLI in its own process, from an empty folder outside the checkout. Shared by the
    tests that check its table, JSON, store, dashboard, modelled column and clean-up (tests/test_demo.py,
    tests/test_demo_modelled.py, tests/test_dashboard_per_layer.py) and the wheel's demo check
    (tests/test_wheel.py): each demo run costs minutes of emulated Pi."""
    if os.geteuid() != 0:
        pytest.skip("the demo starts an emulated Pi and a loopback sshd (root)")
    from edge_sdk.devices import stand_in_module

    try:
        stand_in_module("emulated_pi").check_host()
    except RuntimeError as e:
        pytest.skip(str(e))
    tmp = tmp_path_factory.mktemp("demo")
    db, html, pkgs, cwd = tmp / "results.sqlite", tmp / "dash.html", tmp / "pkgs", tmp / "cwd"
    cwd.mkdir()
    cli, frames = installed_wheel["bin"] / "edge-sdk", 3
    before = netns()
    proc = subprocess.run([cli, "demo", "--alpha", "0.25", "--resolution", "64", "--classes", "10", "--frames",
                           str(frames), "--accuracy-images", "20", "--db", db, "--dashboard", html, "--out-dir", pkgs,
                           "--json"], cwd=cwd, env=installed_wheel["env"], capture_output=True, text=True,
                          timeout=3600, check=False)
    return DemoRun(proc.returncode, proc.stdout, proc.stderr, db, html, pkgs, before, netns(),
                   Path("/proc/self/mountinfo").read_text(), frames, cli, sorted(os.listdir(cwd)))
