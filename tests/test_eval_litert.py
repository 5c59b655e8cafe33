"""edge-sdk eval against LiteRT, on a trained classifier and real labelled images.

The model is the digits ResNet18 (tools/train_digits.py trained it on scikit-learn's handwritten digits);
tools/make_digits_eval.py converted it with TFLite's converter to tests/data/digits/digits_float.tflite and
digits_int8_io.tflite (int8 input and output). The images are the 360 held-out digits written as PNGs of
40..96 px (edge_sdk/evaluation/samples.py), larger than the 32x32 input, so the package's resize runs.
LiteRT gets the same preprocessed images; for int8 it quantizes them with the file's own input parameters
and runs its reference kernels (our int8 backend is bit-exact against those).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.cli import main
from edge_sdk.evaluation.dataset import read_image, scan
from edge_sdk.evaluation.samples import DIGITS_LABELS, write_digits
from edge_sdk.runtime.device.preprocess import Preprocess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    return write_digits(tmp_path_factory.mktemp("eval") / "digits")


@pytest.fixture(scope="module")
def labels(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("labels") / "digits.txt"
    p.write_text("\n".join(DIGITS_LABELS) + "\n")
    return p


def _compile(src: Path, out: Path, labels: Path, *extra: str) -> Path:
    assert main(["compile", str(src), "-o", str(out), "--labels", str(labels), "--mean", "127.5", "--std", "127.5",
                 *extra]) == 0
    return out


def _eval(capsys, pkg: Path, images: Path, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["eval", str(pkg), "--images", str(images), "--json", "--no-record", *extra]) == 0
    return json.loads(capsys.readouterr().out)[0]


def _litert(tflite: Path, images: Path) -> tuple[np.ndarray, np.ndarray]:
    """(LiteRT's predicted classes, labels): our preprocessing's float input (Pillow-checked in
    test_preprocess.py), quantized by the interpreter's own input parameters when the input is int8."""
    from edge_sdk.quant.int8 import quantize
    from edge_sdk.runtime.litert import make_interpreter

    it = make_interpreter(tflite, reference_kernels=True)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    pre = Preprocess(32, 32)  # bilinear, mean = std = 127.5: the options _compile passes
    folder = scan(images, labels=DIGITS_LABELS, classes=10)
    preds = []
    for s in folder.samples:
        x = pre.apply(read_image(s.path))
        if inp["dtype"] == np.int8:
            scale, zp = inp["quantization"]
            x = quantize(x, scale, zp)
        it.set_tensor(inp["index"], x)
        it.invoke()
        preds.append(int(np.argmax(it.get_tensor(out["index"]).reshape(-1))))
    return np.array(preds), np.array([s.label for s in folder.samples])


def test_float32_accuracy_within_one_image_of_litert(tmp_path, digits, labels, data_dir, capsys):
    src = data_dir / "digits" / "digits_float.tflite"
    res = _eval(capsys, _compile(src, tmp_path / "f.edgepkg", labels), digits)
    preds, y = _litert(src, digits)
    assert res["images"] == len(y) == 360
    assert abs(res["top1_correct"] - int((preds == y).sum())) <= 1
    assert res["top1"] > 0.9  # a trained model on real digits, not chance (0.1)
    assert res["preprocess"]["interpolation"] == "bilinear"
    per_class = {c["label"]: c["images"] for c in res["per_class"]}
    assert per_class == {str(c): int((y == c).sum()) for c in range(10)}


@pytest.mark.qemu
def test_int8_accuracy_equals_litert_and_qemu_agrees(tmp_path, digits, labels, data_dir, capsys):
    src = data_dir / "digits" / "digits_int8_io.tflite"
    host = _compile(src, tmp_path / "q.edgepkg", labels, "--variant", "int8")
    res = _eval(capsys, host, digits)
    preds, y = _litert(src, digits)
    assert res["top1_correct"] == int((preds == y).sum()) and res["images"] == 360
    wrong = {Path(w["image"]).name for w in res["misclassified"]}
    assert wrong == {p.name for p, ok in zip(sorted_samples(digits), preds == y) if not ok}
    first = sorted_samples(digits)[0]  # `edge-sdk run --input IMAGE` quantizes the input as eval does
    capsys.readouterr()
    assert main(["run", str(host), "--input", str(first), "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["top_k"][0]["class"] == preds[0]
    if shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    pi3 = _compile(src, tmp_path / "q_pi3.edgepkg", labels, "--variant", "int8", "--target", "pi3")
    emu = _eval(capsys, pi3, digits, "--limit", "10")
    assert emu["emulated"] and emu["where"].startswith("qemu") and emu["images"] == 10
    assert emu["top1_correct"] == int((preds[:10] == y[:10]).sum())  # --limit takes the same round-robin order


def sorted_samples(images: Path) -> list[Path]:
    return [s.path for s in scan(images, labels=DIGITS_LABELS, classes=10).samples]
