"""Lean int8 packages (issue 13): the params an int8 package ships are its weights at 1 byte each plus the
per-channel int32 constants (bias, requantize multiplier and shift), not int16 copies of the weights.

A package compiled by the CLI's path (compile_model, int8 PTQ of a zoo MobileNetV1 0.25/64 with 1000
classes); the weights are counted from its manifest's layer table (the Int8Graph's constant shapes)."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

WEIGHTED = ("conv2d", "depthwise_conv2d", "dense")


def _compile(target: str, tmp_path: Path) -> tuple[dict, int]:
    """(manifest, params.bin bytes) of an int8 package for `target`."""
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.package import open_package
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    out = tmp_path / f"m_{target}.edgepkg"
    model = build_zoo_model("mobilenet_v1", alpha=0.25, resolution=64, classes=1000, seed=1)
    compile_model(model, variant=get_variant("int8"), target=get_target(target), out=out)
    pkg = open_package(out, tmp_path / target)
    return pkg.manifest, pkg.member("params.bin").stat().st_size


@pytest.mark.slow
@pytest.mark.parametrize("target", ["host", "pi3"])
def test_int8_package_params_are_one_byte_a_weight(tmp_path, target):
    if target == "pi3" and shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs g++-aarch64-linux-gnu")
    manifest, size = _compile(target, tmp_path)
    layers = [r for r in manifest["layers"] if r["op"] in WEIGHTED]
    n_w = sum(math.prod(r["weights"][0]) for r in layers)
    chans = sum(r["output"][-1] for r in layers)
    assert n_w > 400_000 and chans > 2000
    at_precision = n_w + 3 * 4 * chans  # int8 weights + int32 bias, multiplier, shift per channel
    assert size <= 1.05 * at_precision, (size, n_w, chans)
    assert size < 1.25 * n_w  # int16 weights alone would be 2 bytes a weight
