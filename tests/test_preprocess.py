"""edge_sdk/runtime/device/preprocess.py against Pillow (the independent reference) on real photographs.

The photographs are scikit-learn's sample images (china.jpg, flower.jpg, 427x640, shipped in its wheel);
sizes larger and smaller than the model input come from crops and Pillow downscales of them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edge_sdk.runtime.device import preprocess as pp
from edge_sdk.runtime.device.preprocess import Preprocess, PreprocessError, model_input, quantize, resize

FILTERS = {"bilinear": Image.BILINEAR, "area": Image.BOX, "nearest": Image.NEAREST}


def _photos() -> dict[str, np.ndarray]:
    datasets = pytest.importorskip("sklearn.datasets")
    china, flower = datasets.load_sample_images().images
    small = np.asarray(Image.fromarray(flower).resize((47, 33), Image.LANCZOS))
    return {"china 427x640": china, "flower crop 301x199": flower[60:361, 200:399],
            "china crop 97x130": china[150:247, 300:430], "flower 33x47": small,
            "china strip 24x500": china[200:224, 50:550]}


PHOTOS = _photos() if pytest.importorskip("sklearn") else {}
SIZES = [(224, 224), (64, 64), (32, 48)]


@pytest.mark.parametrize("name", list(PHOTOS))
@pytest.mark.parametrize("method", list(FILTERS))
def test_resize_matches_pillow_within_one_step(name, method):
    img = PHOTOS[name]
    for h, w in SIZES:
        ours = resize(img, (h, w), method)
        theirs = np.asarray(Image.fromarray(img).resize((w, h), FILTERS[method])).astype(np.float32)
        assert ours.shape == (h, w, 3) and ours.dtype == np.float32
        err = np.abs(ours - theirs).max()
        if method == "nearest":
            assert err == 0, f"{name} -> {h}x{w}"
        else:  # Pillow rounds to uint8 after each pass; we do not
            assert err <= 1.0, f"{name} -> {h}x{w}: {err}"
            assert np.abs(ours - theirs).mean() < 0.4  # final rounding alone: 0.25


@pytest.mark.parametrize("method", ["bilinear", "area"])
def test_resize_equals_pillow_float_mode(method):
    """Pillow's "F" images resample in double without rounding: the same arithmetic as ours."""
    img = PHOTOS["china 427x640"]
    for h, w in SIZES + [(500, 700)]:
        ours = resize(img, (h, w), method)
        theirs = np.stack([np.asarray(Image.fromarray(img[..., c].astype(np.float32), mode="F")
                                      .resize((w, h), FILTERS[method])) for c in range(3)], axis=-1)
        np.testing.assert_allclose(ours, theirs, atol=2e-3, err_msg=f"{h}x{w}")


def test_shrinking_is_antialiased():
    """A 1-pixel checkerboard shrunk 4x averages to grey with bilinear/area; nearest keeps one phase."""
    board = (np.indices((64, 64)).sum(axis=0) % 2 * 255).astype(np.uint8)
    img = np.repeat(board[..., None], 3, axis=2)
    for method in ("bilinear", "area"):
        out = resize(img, (16, 16), method)
        assert np.abs(out - 127.5).max() < 1.0, method
    assert set(np.unique(resize(img, (16, 16), "nearest"))) <= {0.0, 255.0}


def test_apply_crop_normalise_order_layout_against_pillow():
    img = PHOTOS["flower crop 301x199"]
    pre = Preprocess(40, 56, mean=(123.7, 116.3, 103.5), std=(58.4, 57.1, 57.4), channel_order="BGR",
                     interpolation="bilinear", crop=0.875)
    h, w = img.shape[:2]
    top, left = int((h - h * 0.875) / 2), int((w - w * 0.875) / 2)
    ref = np.stack([np.asarray(Image.fromarray(img[top:h - top, left:w - left, c].astype(np.float32), mode="F")
                               .resize((56, 40), Image.BILINEAR)) for c in range(3)], axis=-1)
    ref = (ref - np.array(pre.mean, np.float32)) / np.array(pre.std, np.float32)
    ref = ref[..., ::-1][None]
    nhwc = pre.apply(img)
    np.testing.assert_allclose(nhwc, ref, atol=1e-4)
    np.testing.assert_array_equal(pre.apply(img, layout="NCHW"), nhwc.transpose(0, 3, 1, 2))
    assert nhwc.dtype == np.float32 and nhwc.flags.c_contiguous


def test_quantize_rounds_half_away_from_zero_like_tflite():
    x = np.array([-1.5, -0.5, 0.5, 1.5, 2.49, 200.0, -300.0], np.float32)
    q = quantize(x, {"scale": 1.0, "zero_point": 0}, "int8")
    np.testing.assert_array_equal(q, [-2, -1, 1, 2, 2, 127, -128])
    q = quantize(np.array([-1.0, 0.0, 1.0], np.float32), {"scale": 1 / 128, "zero_point": 128}, "uint8")
    np.testing.assert_array_equal(q, [0, 128, 255])  # 256 clipped
    with pytest.raises(PreprocessError, match="no input quantization"):
        quantize(x, None, "int8")


def test_model_input_follows_the_manifest():
    img = PHOTOS["china crop 97x130"]
    spec = {"preprocess": Preprocess(32, 32).to_json(), "layout": "NHWC", "dtype": "int8",
            "quantization": {"scale": 2 / 255, "zero_point": 0}}
    x = model_input(img, spec)
    assert x.shape == (1, 32, 32, 3) and x.dtype == np.int8
    want = quantize(Preprocess(32, 32).apply(img), spec["quantization"], "int8")
    np.testing.assert_array_equal(x, want)


def test_json_round_trip_and_old_manifests():
    pre = Preprocess(24, 32, (1, 2, 3), (4, 5, 6), "BGR", "area", 0.5)
    assert Preprocess.from_json(pre.to_json()) == pre
    old = {"resize": [24, 32], "mean": [127.5] * 3, "std": [127.5] * 3, "channel_order": "RGB"}
    assert Preprocess.from_json(old).interpolation == "nearest"  # what packages were made with before


@pytest.mark.parametrize("kwargs, match", [
    ({"std": (1.0, 0.0, 1.0)}, "std"), ({"mean": (1.0, 2.0)}, "mean"), ({"channel_order": "RBG"}, "channel_order"),
    ({"interpolation": "cubic"}, "interpolation"), ({"crop": 0.0}, "crop"), ({"crop": 1.5}, "crop")])
def test_bad_specs_name_the_field(kwargs, match):
    with pytest.raises(PreprocessError, match=match):
        Preprocess(8, 8, **kwargs)


def test_bad_images_are_clear_errors():
    with pytest.raises(PreprocessError, match="uint8"):
        Preprocess(8, 8).apply(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(PreprocessError, match="shape"):
        Preprocess(8, 8).apply(np.zeros((4, 4, 2), np.uint8))


def test_module_imports_only_numpy_and_the_stdlib():
    """It ships in the runtime bundle: the device has python3 and numpy, nothing of edge_sdk. Pillow is
    imported only inside read_image_file (reading an image file), never at import time."""
    tree = ast.parse(Path(pp.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "math", "dataclasses", "numpy", "struct", "warnings", "zlib", "PIL"}, names
    top = {getattr(n, "module", None) or n.names[0].name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    assert "PIL" not in top, top
