"""edge-sdk eval: the ImageFolder layout and its errors, scoring, the CLI (exit codes, --json), the store.

The whole chain on the host (decode, preprocess, the runtime bundle's loader, ranking) is checked against
the numpy network evaluator (quant/relax_ref.py) fed Pillow-resized images: an independent reference.
tests/test_eval_litert.py checks trained models against LiteRT; tests/fleet/test_eval_device.py a device.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edge_sdk.cli import main
from edge_sdk.errors import UsageError
from edge_sdk.evaluation.dataset import ImageError, ImageFolder, Sample, read_image, scan
from edge_sdk.evaluation.engine import score


def _folder(root: Path, classes: dict[str, int], *, size=(50, 70), seed=0) -> Path:
    rng = np.random.default_rng(seed)
    for name, n in classes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


# ---- the folder layout ------------------------------------------------------------------------------

def test_folders_resolve_by_label_then_index_and_limit_is_round_robin(tmp_path):
    _folder(tmp_path, {"cat": 3, "dog": 1, "7": 2}, size=(4, 4))
    f = scan(tmp_path, labels=["bird", "cat", "dog"] + [f"c{i}" for i in range(3, 10)], classes=10)
    assert f.folders == {"7": 7, "cat": 1, "dog": 2}
    assert len(f.samples) == 6 and f.name_of(1) == "cat"
    short = scan(tmp_path, labels=["bird", "cat", "dog"] + [f"c{i}" for i in range(3, 10)], classes=10, limit=3)
    assert sorted(s.label for s in short.samples) == [1, 2, 7]  # one of each class first


def test_folder_errors_name_the_folder(tmp_path):
    with pytest.raises(UsageError, match="no such folder"):
        scan(tmp_path / "nope", labels=None, classes=10)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="empty: no class sub-folders"):
        scan(tmp_path / "empty", labels=None, classes=10)
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "empty" / "a.png")
    with pytest.raises(UsageError, match="1 images at the top level"):
        scan(tmp_path / "empty", labels=None, classes=10)
    _folder(tmp_path / "set", {"tabby": 1, "dgo": 1}, size=(4, 4))
    with pytest.raises(UsageError, match=r"set/dgo: class 'dgo' is not one the model knows.*did you mean 'dog'"):
        scan(tmp_path / "set", labels=["tabby", "dog"], classes=2)
    with pytest.raises(UsageError, match="the model has no labels: pass --labels"):
        scan(tmp_path / "set", labels=None, classes=2)
    (tmp_path / "set" / "dog").mkdir()
    with pytest.raises(UsageError, match="class folder has no images"):
        scan(tmp_path / "set", labels=["tabby", "dgo", "dog"], classes=3)
    _folder(tmp_path / "idx", {"12": 1}, size=(4, 4))
    with pytest.raises(UsageError, match="indices 0..9"):
        scan(tmp_path / "idx", labels=None, classes=10)


def test_unreadable_images_are_named(tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ImageError, match="broken.png: not a readable image"):
        read_image(bad)
    np.save(tmp_path / "f.npy", np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ImageError, match=r"f.npy: expected an \(h, w, 3\) uint8 image"):
        read_image(tmp_path / "f.npy")
    ppm = tmp_path / "a.ppm"
    ppm.write_bytes(b"P6 2 2 255\n" + bytes(range(12)))
    assert read_image(ppm).shape == (2, 2, 3)


# ---- scoring ------------------------------------------------------------------------------------------

def test_score_counts_top1_topk_and_per_class():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 6, 40)
    scores = rng.standard_normal((40, 1, 6)).astype(np.float32)
    folder = ImageFolder(Path("x"), {}, tuple(Sample(Path(f"{i}.png"), int(c)) for i, c in enumerate(labels)), None)
    top1, top3, per_class, wrong = score(scores, folder, 3)
    want1 = sum(int(np.argmax(s) == c) for s, c in zip(scores.reshape(40, 6), labels))
    want3 = sum(int(c in sorted(range(6), key=lambda j, s=s: -s[j])[:3]) for s, c in zip(scores.reshape(40, 6), labels))
    assert (top1, top3) == (want1, want3) and len(wrong) == 40 - want1
    assert sum(r["images"] for r in per_class) == 40 and sum(r["top1_correct"] for r in per_class) == want1
    assert {r["class"] for r in per_class} == set(labels.tolist())


def test_ties_go_to_the_lower_class_like_argmax():
    folder = ImageFolder(Path("x"), {}, (Sample(Path("a"), 1), Sample(Path("b"), 2)), None)
    scores = np.array([[0.5, 0.5, 0.5], [0.0, 1.0, 1.0]], np.float32)
    assert score(scores, folder, 1)[0] == 0  # argmax of both rows is not the label


# ---- the command, on the host -------------------------------------------------------------------------

def _reference_top1(model, folder: Path) -> tuple[int, int]:
    """Top-1 correct of the numpy network evaluator on Pillow-resized images (classes by folder index)."""
    from edge_sdk.quant.relax_ref import evaluate

    pre, correct, n = model.preprocess, 0, 0
    for d in sorted(folder.iterdir()):
        for p in sorted(d.iterdir()):
            img = np.asarray(Image.open(p).convert("RGB"))
            h, w = img.shape[:2]
            top, left = int((h - h * pre.crop) / 2), int((w - w * pre.crop) / 2)
            img = img[top:h - top, left:w - left]
            x = np.stack([np.asarray(Image.fromarray(img[..., c].astype(np.float32), mode="F")
                                     .resize((pre.width, pre.height), Image.BILINEAR)) for c in range(3)], -1)
            x = ((x - np.float32(pre.mean)) / np.float32(pre.std))[None].astype(np.float32)
            correct += int(np.argmax(np.asarray(evaluate(model.mod, x))) == int(d.name))
            n += 1
    return correct, n


@pytest.mark.slow
def test_eval_on_the_host_matches_the_numpy_reference_and_is_recorded(tmp_path, host_package, small_mobilenet,
                                                                     capsys):
    images = _folder(tmp_path / "imgs", {"0": 4, "3": 4, "9": 4}, size=(90, 120), seed=1)
    db = tmp_path / "r.sqlite"
    assert main(["eval", str(host_package), "--images", str(images), "--json", "--db", str(db)]) == 0
    res = json.loads(capsys.readouterr().out)[0]
    correct, n = _reference_top1(small_mobilenet, images)
    assert res["images"] == n == 12 and res["top1_correct"] == correct
    assert res["top1"] == pytest.approx(correct / n) and 0 <= res["top1"] <= res["top5"] <= 1
    assert res["where"].startswith("host") and not res["emulated"]
    assert [c["images"] for c in res["per_class"]] == [4, 4, 4]
    assert res["preprocess"]["interpolation"] == "bilinear" and res["preprocess"]["crop"] == 0.875
    rows = sqlite3.connect(db).execute("SELECT r.source, m.accuracy FROM runs r JOIN measurements m "
                                       "ON m.run_id = r.id").fetchall()
    assert rows == [("eval", pytest.approx(res["top1"]))]
    from edge_sdk.dashboard.page import chart_data
    from edge_sdk.results.store import ResultsStore

    with ResultsStore(db) as store:
        points = chart_data(store)["accuracy"]
    assert [p["accuracy"] for p in points] == [pytest.approx(res["top1"])]


@pytest.mark.slow
def test_eval_errors_have_exit_codes_and_name_the_thing(tmp_path, host_package, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["eval", str(host_package), "--images", str(tmp_path / "empty"), "--no-record"]) == 2
    assert "empty: no class sub-folders" in capsys.readouterr().err
    _folder(tmp_path / "odd", {"zebra": 1}, size=(8, 8))
    assert main(["eval", str(host_package), "--images", str(tmp_path / "odd"), "--no-record"]) == 2
    assert "class 'zebra' is not one the model knows" in capsys.readouterr().err
    _folder(tmp_path / "bad", {"1": 1}, size=(8, 8))
    (tmp_path / "bad" / "1" / "z.jpg").write_bytes(b"garbage")
    assert main(["eval", str(host_package), "--images", str(tmp_path / "bad"), "--no-record"]) == 2
    assert "z.jpg: not a readable image" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing.edgepkg"), "--images", str(tmp_path / "bad")]) == 2
    assert main(["eval", str(host_package), "--images", str(tmp_path / "bad"), "--device", "pi"]) == 2
    assert "--device needs --fleet" in capsys.readouterr().err
    (tmp_path / "three.txt").write_text("a\nb\nc\n")
    assert main(["eval", str(host_package), "--images", str(tmp_path / "bad"), "--labels",
                 str(tmp_path / "three.txt")]) == 2
    assert "3 labels, but the model has 10 classes" in capsys.readouterr().err


@pytest.mark.slow
def test_a_labels_file_names_the_class_folders(tmp_path, host_package, capsys):
    """--labels: sub-folders named by label score as the index-named ones, image for image."""
    import shutil

    images = _folder(tmp_path / "idx", {"0": 3, "3": 3, "9": 3}, size=(40, 60), seed=2)
    names = [f"kind-{i}" for i in range(10)]
    for d in images.iterdir():
        shutil.copytree(d, tmp_path / "named" / names[int(d.name)])
    (tmp_path / "labels.txt").write_text("\n".join(names) + "\n")
    assert main(["eval", str(host_package), "--images", str(images), "--json", "--no-record"]) == 0
    by_index = json.loads(capsys.readouterr().out)[0]
    assert main(["eval", str(host_package), "--images", str(tmp_path / "named"), "--labels",
                 str(tmp_path / "labels.txt"), "--json", "--no-record"]) == 0
    by_label = json.loads(capsys.readouterr().out)[0]
    assert by_label["images"] == by_index["images"] == 9
    assert (by_label["top1_correct"], by_label["top5_correct"]) == (by_index["top1_correct"], by_index["top5_correct"])
    assert [c["images"] for c in by_label["per_class"]] == [3, 3, 3]


def test_a_file_model_without_mean_and_std_is_warned_and_bad_options_are_errors(tmp_path, data_dir, capsys):
    src, out = data_dir / "mobilenet_v1_0.25_64_float.tflite", tmp_path / "m.edgepkg"
    assert main(["compile", str(src), "-o", str(out), "--std", "0,1,1"]) == 2  # fails before compiling
    err = " ".join(capsys.readouterr().err.split())
    assert "assuming x = (pixel - 127.5) / 127.5" in err and "--mean R,G,B --std R,G,B" in err  # how to set them
    assert "std [0.0, 1.0, 1.0]: every value must be > 0" in err and not out.exists()
    with pytest.raises(SystemExit):
        main(["compile", str(src), "-o", str(out), "--mean", "1,2"])
    assert "expected three comma-separated numbers" in capsys.readouterr().err


@pytest.mark.slow
def test_compile_preprocessing_options_go_into_the_manifest(tmp_path, data_dir, capsys):
    from edge_sdk.package import read_manifest

    out = tmp_path / "m.edgepkg"
    src = data_dir / "mobilenet_v1_0.25_64_float.tflite"
    assert main(["compile", str(src), "-o", str(out), "--mean", "123.675,116.28,103.53", "--std", "58.4",
                 "--resize", "area", "--crop", "0.875", "--channel-order", "BGR"]) == 0
    assert "assuming" not in capsys.readouterr().err
    assert read_manifest(out)["input"]["preprocess"] == {
        "resize": [64, 64], "interpolation": "area", "crop": 0.875, "mean": [123.675, 116.28, 103.53],
        "std": [58.4] * 3, "channel_order": "BGR", "channels": 3}  # channels: 1 for grayscale models


def test_zoo_models_carry_their_training_preprocessing():
    from edge_sdk.models.zoo import build_zoo_model

    pre = build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=4).preprocess
    assert (pre.interpolation, pre.crop, pre.mean, pre.std) == ("bilinear", 0.875, (127.5,) * 3, (127.5,) * 3)


def test_an_eval_run_feeds_the_accuracy_chart_without_hiding_the_latency_run(tmp_path):
    from edge_sdk.dashboard.page import chart_data
    from edge_sdk.results.store import ResultsStore

    manifest = {"model": {"name": "digits"}, "variant": "int8", "target": {"name": "pi3", "arch": "aarch64"},
                "layers": []}
    lat = {"median": 10.0, "min": 9.0, "max": 11.0, "p10": 9.5, "p90": 10.5}
    run = {"model": "digits", "variant": "int8", "target": "pi3", "threads": 1, "repeats": 5}
    with ResultsStore(tmp_path / "r.sqlite") as store:
        bench = store.record_run({**run, "latency_ms": lat}, manifest, device="pi",
                                 extra={"source": "bench", "package_sha256": "a" * 64})
        ev = store.record_run({**run, "latency_ms": {k: v * 2 for k, v in lat.items()}}, manifest, device="pi",
                              extra={"source": "eval", "accuracy": 0.97, "top5": 1.0, "images": 360,
                                     "package_sha256": "a" * 64})
        d = chart_data(store)
    assert [r["run_id"] for r in d["latency"]] == [bench]
    assert [(p["run_id"], p["accuracy"], p["top5"], p["images"], p["median_ms"]) for p in d["accuracy"]] == [
        (ev, 0.97, 1.0, 360, 20.0)]


def test_the_package_cache_key_covers_preprocessing_and_labels(tmp_path):
    """The manifest carries both, so a cached package with other preprocessing must not be served."""
    import dataclasses

    from edge_sdk.compiler.cache import package_path
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    m = build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=4)
    v, t = get_variant("float32"), get_target("host")
    base = package_path(m, v, t, folder=tmp_path)
    m.preprocess = dataclasses.replace(m.preprocess, interpolation="area")
    area = package_path(m, v, t, folder=tmp_path)
    m.labels = ["a", "b", "c", "d"]
    assert len({base, area, package_path(m, v, t, folder=tmp_path)}) == 3


def test_the_device_half_imports_only_numpy_the_stdlib_and_the_bundle():
    import ast

    from edge_sdk.evaluation.engine import EVAL_BATCH

    tree = ast.parse(EVAL_BATCH.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "argparse", "json", "os", "sys", "time", "pathlib", "numpy", "edge_sdk_runtime",
                     "tvm_ffi"}, names


def test_an_emulated_eval_run_is_placed_at_its_modelled_pi_ms(tmp_path):
    from edge_sdk.dashboard.page import chart_data
    from edge_sdk.results.store import ResultsStore

    manifest = {"model": {"name": "digits"}, "variant": "w1a2", "target": {"name": "pi3", "arch": "aarch64"},
                "layers": []}
    lat = {"median": 28.0, "min": 27.0, "max": 30.0, "p10": 27.5, "p90": 29.0}
    run = {"model": "digits", "variant": "w1a2", "target": "pi3", "threads": 1, "repeats": 5, "emulated": True,
           "latency_ms": lat}
    with ResultsStore(tmp_path / "r.sqlite") as store:
        store.record_run({**run, "modelled_ms": 0.68, "model_version": "a53-test"}, manifest, device="pi1",
                         extra={"source": "eval", "accuracy": 0.96, "package_sha256": "b" * 64})
        store.record_run(run, manifest, device="pi2", extra={"source": "eval", "accuracy": 0.95,
                                                             "package_sha256": "b" * 64})
        pts = {p["device"]: p for p in chart_data(store)["accuracy"]}
    assert (pts["pi1"]["median_ms"], pts["pi1"]["ms_is"], pts["pi1"]["basis"]) == (0.68, "modelled Pi 3 ms", "modelled")
    assert pts["pi2"]["median_ms"] == 28.0 and pts["pi2"]["ms_is"].startswith("QEMU wall time")
