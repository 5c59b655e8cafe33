"""Shared fixtures: small compiled packages (built once per session) and the tests/data folder."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

# Fixtures that compile a model or start an emulated Pi: a test that uses one is slow whatever its own
# body does, so it is marked here rather than in every file (the quick lane is `pytest -m "not slow"`).
SLOW_FIXTURES = {"host_package", "pi3_package", "emulated_pis", "v1", "v2", "variant_package"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("qemu") or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


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
