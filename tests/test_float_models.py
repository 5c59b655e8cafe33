"""Float models against LiteRT on converter-written .tflite files (tests/data, see its README).

Each file is compiled with our schedules for the host, packaged, run with the runtime bundle's runner,
and compared with LiteRT (ai-edge-litert, XNNPACK) on the same input: within 1e-4 relative.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.compiler.build import compile_model
from edge_sdk.models.importers import load_model_file
from edge_sdk.models.zoo import build_zoo_model
from edge_sdk.run import run_package
from edge_sdk.runtime.litert import run_tflite
from edge_sdk.targets import get_target
from edge_sdk.variants import get_variant

DATA = Path(__file__).parent / "data"
FLOAT_FILES = sorted(p.stem for p in DATA.glob("*_float.tflite"))


def _compare(ours: np.ndarray, litert: np.ndarray) -> None:
    assert ours.shape == litert.shape
    np.testing.assert_allclose(ours, litert, rtol=1e-4, atol=1e-6)
    assert int(np.argmax(ours)) == int(np.argmax(litert))


@pytest.mark.parametrize("name", FLOAT_FILES)
def test_tflite_float_compiled_matches_litert(name, tmp_path):
    path = DATA / f"{name}.tflite"
    model = load_model_file(path)
    pkg = tmp_path / f"{name}.edgepkg"
    res = compile_model(model, variant=get_variant("float32"), target=get_target("host"), out=pkg)
    assert res.manifest["golden"]["reference"] == "litert"
    x = model.example_input(seed=7)
    np.save(tmp_path / "x.npy", x)
    run = run_package(pkg, input_path=tmp_path / "x.npy", repeat=1)
    assert run.golden_ok
    _compare(run.output, run_tflite(path, x))


@pytest.mark.parametrize("zoo,name,alpha", [("mobilenet_v1", "mobilenet_v1_0.25_64_float", 0.25),
                                            ("mobilenet_v2", "mobilenet_v2_0.1_64_float", 0.1),
                                            ("resnet18", "resnet18_w8_64_float", 0.125)])
def test_zoo_with_keras_weights_matches_the_converted_keras_model(zoo, name, alpha, tmp_path):
    """Our Relax zoo, given the Keras model's weights (.npz), computes what the TFLite converter wrote."""
    weights = DATA / f"{name}.npz"
    classes = int(np.load(weights)["fc.bias"].shape[0])
    model = build_zoo_model(zoo, alpha=alpha, resolution=64, classes=classes, weights=weights)
    pkg = tmp_path / f"{zoo}.edgepkg"
    compile_model(model, variant=get_variant("float32"), target=get_target("host"), out=pkg)
    x = model.example_input(seed=5)
    np.save(tmp_path / "x.npy", x)
    run = run_package(pkg, input_path=tmp_path / "x.npy", repeat=1)
    assert run.golden_ok
    _compare(run.output, run_tflite(DATA / f"{name}.tflite", x))


def test_test_models_are_present():
    """A missing file must fail loudly, not shrink the parametrized list above to nothing."""
    assert len(FLOAT_FILES) >= 4


def test_onnx_model_matches_onnxruntime(tmp_path):
    """An NCHW ONNX file written by torch.onnx.export, compiled for the host, vs ONNX Runtime."""
    ort = pytest.importorskip("onnxruntime")
    path = DATA / "small_cnn.onnx"
    model = load_model_file(path)
    assert model.layout == "NCHW" and model.input_shape == (1, 3, 32, 32)
    pkg = tmp_path / "small_cnn.edgepkg"
    compile_model(model, variant=get_variant("float32"), target=get_target("host"), out=pkg)
    x = model.example_input(seed=3)
    np.save(tmp_path / "x.npy", x)
    run = run_package(pkg, input_path=tmp_path / "x.npy", repeat=1)
    assert run.golden_ok
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    _compare(run.output, want)
