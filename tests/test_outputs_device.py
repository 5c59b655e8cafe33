"""Several outputs on the device side (issue 21 item 1): edge-runner's per-output golden check
(--segments, what deploy / remote run / the runtime re-check pass), the device loader's split of the flat
output into named arrays, eval ranking the first or the `--output NAME` output; and a 1-channel classifier
through eval (item 5). Packages: the two-output converter file of tests/data/trained (boxes x 200, sigmoid
scores) and fer's emotion classifier (64x64 grayscale), checked against LiteRT on Pillow's preprocessing.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

DATA = Path(__file__).parent / "data" / "trained"
TWO = DATA / "two_heads_32_float.tflite"
FER = DATA / "fer_emotion_64x64_1ch_float.tflite"


def test_split_outputs_by_the_manifest_and_refuse_a_wrong_size():
    from edge_sdk.runtime.device.loader import LoaderError, split_outputs

    outputs = [{"name": "boxes", "shape": [1, 2, 2], "dtype": "float32", "offset": 0, "size": 4},
               {"name": "n", "shape": [1], "dtype": "int32", "offset": 4, "size": 1}]
    got = split_outputs(np.arange(5, dtype=np.float32), outputs)
    assert list(got) == ["boxes", "n"] and got["boxes"].shape == (1, 2, 2) and got["n"].dtype == np.int32
    np.testing.assert_array_equal(got["boxes"].reshape(-1), [0, 1, 2, 3])
    assert list(split_outputs(np.zeros(3, np.float32), None)) == ["output"]
    with pytest.raises(LoaderError, match="6 values, the manifest's outputs 5"):
        split_outputs(np.zeros(6, np.float32), outputs)


def _compile(path: Path, out: Path) -> Path:
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    compile_model(load_model_file(path), variant=get_variant("float32"), target=get_target("host"), out=out)
    return out


@pytest.fixture(scope="module")
def two_package(tmp_path_factory) -> Path:
    return _compile(TWO, tmp_path_factory.mktemp("two") / "two.edgepkg")


def _runner(pkg_dir: Path, expect: Path, extra: list[str]) -> subprocess.CompletedProcess:
    from edge_sdk.runtime import ensure_bundle
    from edge_sdk.runtime.execute import host_arch

    runner = ensure_bundle(host_arch()) / "bin" / "edge-runner"
    return subprocess.run([str(runner), "--lib", str(pkg_dir / "model.so"), "--params", str(pkg_dir / "params.bin"),
                           "--input", str(pkg_dir / "golden_input.npy"), "--expect", str(expect), "--repeat", "1",
                           "--warmup", "0", *extra], capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_runner_checks_each_output_with_its_own_atol(two_package, tmp_path):
    """Scores in [0, 1] off by 10x their atol (but within the boxes' atol, the loosest): the flat check passes
    it, the per-output check the device now runs (--segments from the manifest) fails it, exit 3."""
    from edge_sdk.package import open_package
    from edge_sdk.runtime.result import runner_segments

    pkg = open_package(two_package, tmp_path / "open")
    m, d = pkg.manifest, tmp_path / "open"
    boxes, scores = m["outputs"]
    assert scores["atol"] * 20 < boxes["atol"]
    seg = runner_segments(m)
    assert seg == ["--segments", f"{boxes['size']}:{boxes['atol']!r},{scores['size']}:{scores['atol']!r}"]
    tol = ["--rtol", repr(m["golden"]["rtol"]), "--atol", repr(m["golden"]["atol"])]
    ok = _runner(d, d / "golden_output.npy", [*tol, *seg])
    assert ok.returncode == 0, ok.stderr
    golden = json.loads(ok.stdout.strip().splitlines()[-1])["golden"]
    assert golden["ok"] and [s["mismatches"] for s in golden["segments"]] == [0, 0]
    bad = pkg.golden_output.copy()
    bad[scores["offset"]] += 10 * scores["atol"]
    np.save(tmp_path / "bad.npy", bad)
    assert _runner(d, tmp_path / "bad.npy", tol).returncode == 0  # the loosest atol hides it
    r = _runner(d, tmp_path / "bad.npy", [*tol, *seg])
    assert r.returncode == 3 and "golden check FAILED: 1 of" in r.stderr
    assert [s["mismatches"] for s in json.loads(r.stdout.strip().splitlines()[-1])["golden"]["segments"]] == [0, 1]
    r = _runner(d, d / "golden_output.npy", [*tol, "--segments", f"{boxes['size']}:0.1"])
    assert r.returncode == 2 and "the slices hold 256 values, the output 320" in r.stderr


def _pillow_input(path: Path, size: tuple[int, int], channels: int) -> np.ndarray:
    """Pillow's preprocessing (the independent one): convert L / RGB, float bilinear resize, (x - 127.5) / 127.5."""
    img = Image.open(path).convert("L" if channels == 1 else "RGB")
    bands = [img] if channels == 1 else list(img.split())
    x = np.stack([np.asarray(b.convert("F").resize(size, Image.Resampling.BILINEAR), np.float32) for b in bands], -1)
    return ((x - 127.5) / 127.5)[None].astype(np.float32)


def _folder(root: Path, classes: list[int], per: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    for c in classes:
        (root / str(c)).mkdir(parents=True)
        for i in range(per):
            Image.fromarray(rng.integers(0, 256, (41, 37, 3), dtype=np.uint8)).save(root / str(c) / f"{i}.png")
    return root


def _litert_top1(path: Path, folder: Path, size, channels: int, output: int) -> int:
    from edge_sdk.runtime.litert import run_tflite_outputs

    hits = 0
    for d in sorted(folder.iterdir()):
        for p in sorted(d.iterdir()):
            scores = run_tflite_outputs(path, _pillow_input(p, size, channels))[output].reshape(-1)
            hits += int(np.argmax(scores) == int(d.name))
    return hits


def _eval(capsys, *argv) -> tuple[int, list]:
    from edge_sdk.cli import main

    capsys.readouterr()
    code = main(["eval", *map(str, argv), "--json", "--no-record"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


@pytest.mark.slow
def test_eval_ranks_the_first_or_the_named_output(two_package, tmp_path, capsys):
    images = _folder(tmp_path / "imgs", [0, 3, 5], 3, seed=2)
    code, res = _eval(capsys, two_package, "--images", images, "--output", "scores")
    assert code == 0 and res[0]["images"] == 9 and res[0]["top5_k"] == 5 and res[0]["output"] == "scores"
    assert res[0]["top1_correct"] == _litert_top1(TWO, images, (32, 32), 3, 1)
    code, res = _eval(capsys, two_package, "--images", images)  # the first output: boxes, 256 "classes"
    assert code == 0 and res[0]["output"] == "boxes"
    assert res[0]["top1_correct"] == _litert_top1(TWO, images, (32, 32), 3, 0)
    code, err = _eval(capsys, two_package, "--images", images, "--output", "nosuch")
    assert code == 2 and "no such output (outputs: boxes, scores)" in err


@pytest.mark.slow
def test_eval_of_a_grayscale_classifier(tmp_path, capsys):
    """fer's emotion classifier (64x64, 1 channel): eval converts each image to luma as the package says and
    ranks as LiteRT does on Pillow's convert("L")."""
    pkg = _compile(FER, tmp_path / "fer.edgepkg")
    images = _folder(tmp_path / "imgs", [0, 3, 6], 3, seed=5)
    code, res = _eval(capsys, pkg, "--images", images)
    assert code == 0 and res[0]["images"] == 9 and res[0]["preprocess"]["channels"] == 1
    assert res[0]["top1_correct"] == _litert_top1(FER, images, (64, 64), 1, 0)
    code, err = _eval(capsys, pkg, "--images", images, "--output", "scores")
    assert code == 2 and "the model has one output" in err


@pytest.mark.slow
def test_classify_app_on_a_grayscale_classifier(tmp_path):
    """The device app (apps/classify) on fer's 1-channel package: its top-3 per frame is LiteRT's on Pillow's
    convert("L") + float bilinear resize of the same frame."""
    import sys

    from edge_sdk.package import open_package
    from edge_sdk.runtime import ensure_bundle
    from edge_sdk.runtime.execute import host_arch
    from edge_sdk.runtime.litert import run_tflite

    app = Path(__file__).resolve().parents[1] / "edge_sdk" / "apps" / "classify" / "classify.py"
    pkg = _compile(FER, tmp_path / "fer.edgepkg")
    cur = tmp_path / "models" / "fer-float32" / "current"
    m = open_package(pkg, cur).manifest
    (cur / "manifest.json").write_text(json.dumps(m))
    (tmp_path / "frames").mkdir()
    frames = [np.random.default_rng(s).integers(0, 256, (50, 70, 3), dtype=np.uint8) for s in (1, 2)]
    for i, f in enumerate(frames):
        Image.fromarray(f).save(tmp_path / "frames" / f"f{i}.png")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, str(app), "--model", "fer", "--models", str(tmp_path / "models"),
                           "--runtime", str(ensure_bundle(host_arch())), "--source", str(tmp_path / "frames"),
                           "--out", str(out), "--top-k", "3"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    for row, i in zip(rows, range(2)):
        want = run_tflite(FER, _pillow_input(tmp_path / "frames" / f"f{i}.png", (64, 64), 1)).reshape(-1)
        assert [t["class"] for t in row["top_k"]] == list(np.argsort(-want, kind="stable")[:3])
        np.testing.assert_allclose([t["score"] for t in row["top_k"]], np.sort(want)[::-1][:3], rtol=1e-4, atol=1e-5)
