"""edge_sdk/apps/classify (the demo's device app): frame sources (picamera2 stand-in, folder, synthetic), manifest preprocessing
shared per frame, every variant on the same frame, JSON lines, and a short soak on the host.

Packages are small host builds of MobileNetV1 (float32 and bitserial w1a2), installed in the layout
deploy makes on a device (<models>/<model>-<variant>/current/), and run through the host runtime
bundle's Python loader, as on a Pi. Scores are checked against the numpy network evaluator.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

APP = Path(__file__).resolve().parents[1] / "edge_sdk" / "apps" / "classify"
sys.path.insert(0, str(APP))

import classify  # noqa: E402
import picamera2_standin  # noqa: E402
import sources  # noqa: E402

from edge_sdk.models.base import Preprocess  # noqa: E402


@pytest.fixture(scope="module")
def installed(tmp_path_factory, small_mobilenet, host_package):
    """models/<model>-<variant>/current for float32 and w1a2 host packages."""
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.package import open_package
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    root = tmp_path_factory.mktemp("device")
    w1a2 = root / "w1a2.edgepkg"
    compile_model(small_mobilenet, variant=get_variant("w1a2"), target=get_target("host"), out=w1a2)
    for name, pkg in (("float32", host_package), ("w1a2", w1a2)):
        cur = root / "models" / f"mobilenet_v1-{name}" / "current"
        (cur / "manifest.json").write_text(json.dumps(open_package(pkg, cur).manifest))  # as deploy extracts it
    return root / "models"


@pytest.fixture(scope="module")
def runtime():
    from edge_sdk.runtime import ensure_bundle
    from edge_sdk.runtime.execute import host_arch

    return ensure_bundle(host_arch())


def _app(installed, runtime, tmp_path, *args) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run the app as the device does: a fresh python3, the runtime bundle given by --runtime."""
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, str(APP / "classify.py"), "--model", "mobilenet_v1",
                           "--models", str(installed), "--runtime", str(runtime), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=900, check=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc, rows


# ---- sources ---------------------------------------------------------------------------------

def test_picamera2_standin_follows_the_api_and_the_source_returns_rgb():
    cam = picamera2_standin.Picamera2()
    with pytest.raises(RuntimeError):
        cam.start()  # not configured
    cam.configure(cam.create_still_configuration(main={"size": (40, 30), "format": "RGB888"}))
    cam.start()
    bgr = cam.capture_array()
    cam.close()
    assert bgr.shape == (30, 40, 3) and bgr.dtype == np.uint8
    want_rgb = picamera2_standin.scene(30, 40, 0)
    np.testing.assert_array_equal(bgr, want_rgb[..., ::-1])  # RGB888 is B, G, R in memory

    src = sources.open_source("picamera2-standin", size=(40, 30))
    (name0, f0), (name1, f1) = [x for _, x in zip(range(2), src)]
    src.close()
    assert src.cam.closed and (name0, name1) == ("picamera2-standin:0", "picamera2-standin:1")
    np.testing.assert_array_equal(f0, want_rgb)
    np.testing.assert_array_equal(f1, picamera2_standin.scene(30, 40, 1))


def test_folder_source_reads_ppm_and_npy_without_pillow(tmp_path):
    rng = np.random.default_rng(1)
    a, b = (rng.integers(0, 256, (9, 7, 3), dtype=np.uint8) for _ in range(2))
    sources.write_ppm(tmp_path / "a.ppm", a)
    np.save(tmp_path / "b.npy", b)
    (tmp_path / "notes.txt").write_text("not an image")
    frames = list(sources.open_source(str(tmp_path), size=(7, 9)))
    assert [n for n, _ in frames] == ["a.ppm", "b.npy"]
    np.testing.assert_array_equal(frames[0][1], a)
    np.testing.assert_array_equal(frames[1][1], b)


def test_unknown_source_and_missing_opencv_are_named(tmp_path):
    with pytest.raises(sources.SourceError, match="not picamera2"):
        sources.open_source("webcam", size=(8, 8))
    with pytest.raises(sources.SourceError, match="no such video file"):
        sources.open_source(str(tmp_path / "clip.mp4"), size=(8, 8))


# ---- preprocessing ----------------------------------------------------------------------------

@pytest.fixture
def bundle_on_path(runtime, monkeypatch):
    """The runtime bundle on sys.path, as classify.run puts it (edge_sdk_runtime.preprocess importable)."""
    monkeypatch.syspath_prepend(str(runtime / "python"))
    monkeypatch.syspath_prepend(str(runtime))
    return runtime


def test_preprocess_is_the_bundles_copy_of_the_sdk_module_and_int8_quantizes_like_tflite(bundle_on_path):
    from edge_sdk.quant.int8 import quantize as ref_quantize
    from edge_sdk.runtime.device import preprocess as sdk_pp

    pp = classify._pp()
    assert Path(pp.__file__).resolve().is_relative_to(bundle_on_path.resolve())
    assert Path(pp.__file__).read_bytes() == Path(sdk_pp.__file__).read_bytes()  # one module, shipped as is
    rgb = np.random.default_rng(2).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    pre = Preprocess(24, 32, (127.5,) * 3, (127.5,) * 3, "BGR", "bilinear", 0.875)
    x = classify.preprocess(rgb, pre.to_json(), "NHWC")
    np.testing.assert_array_equal(x, pre.apply(rgb))
    np.testing.assert_array_equal(x, Preprocess(24, 32, crop=0.875).apply(rgb)[..., ::-1])  # BGR honoured
    np.testing.assert_array_equal(classify.preprocess(rgb, pre.to_json(), "NCHW"), x.transpose(0, 3, 1, 2))
    q = {"scale": 0.0078125, "zero_point": -1}
    np.testing.assert_array_equal(classify.quantize(x, q, "int8"), ref_quantize(x, q["scale"], q["zero_point"]))
    halves = np.array([0.5, -0.5, 1.5, -2.5], np.float32)  # ties: away from zero, not to even
    np.testing.assert_array_equal(classify.quantize(halves, {"scale": 1.0, "zero_point": 0}, "int8"), [1, -1, 2, -3])


def test_equal_input_specs_share_one_preprocessing(monkeypatch, bundle_on_path):
    class V:
        def __init__(self, name, dtype="float32", quant=None, size=(16, 16)):
            self.name = name
            self.spec = {"preprocess": Preprocess(*size).to_json(), "layout": "NHWC", "dtype": dtype,
                         "quantization": quant}

    calls = []
    real = classify.preprocess
    monkeypatch.setattr(classify, "preprocess", lambda *a: calls.append(a[1]["resize"]) or real(*a))
    q = {"scale": 0.01, "zero_point": 3}
    vs = [V("float32"), V("w1a2"), V("int8", "int8", q), V("other", size=(8, 8))]
    inputs = classify.prepare_inputs(np.zeros((20, 20, 3), np.uint8), vs)
    assert sorted(calls) == [[8, 8], [16, 16]]  # one per distinct resize/mean/std/layout
    assert inputs["float32"] is inputs["w1a2"] and inputs["int8"].dtype == np.int8
    np.testing.assert_array_equal(inputs["int8"], classify.quantize(inputs["float32"], q, "int8"))


# ---- the app -----------------------------------------------------------------------------------

def test_every_variant_classifies_each_frame_and_scores_match_numpy(installed, runtime, tmp_path, small_mobilenet):
    from edge_sdk.quant.relax_ref import evaluate

    proc, rows = _app(installed, runtime, tmp_path, "--source", "picamera2-standin", "--max-frames", "3",
                      "--top-k", "3")
    assert proc.returncode == 0, proc.stderr
    assert [(r["frame"], r["variant"]) for r in rows] == [(f, v) for f in range(3) for v in ("float32", "w1a2")]
    assert all(len(r["top_k"]) == 3 and r["latency_ms"] > 0 for r in rows)
    assert all(r["agrees_with_float"] is (r["top_k"][0]["class"] == rows[2 * r["frame"]]["top_k"][0]["class"])
               for r in rows)
    assert "frame 2 (picamera2-standin:2): float32" in proc.stdout
    # float32 on frame 1 against the numpy evaluator of the same network, fed the same frame
    frame = picamera2_standin.scene(64, 64, 1)
    want = np.asarray(evaluate(small_mobilenet.mod, small_mobilenet.preprocess.apply(frame))).reshape(-1)
    got = rows[2]["top_k"]
    assert [t["class"] for t in got] == list(np.argsort(-want, kind="stable")[:3])
    np.testing.assert_allclose([t["score"] for t in got], np.sort(want)[::-1][:3], rtol=1e-4, atol=1e-5)


def test_variants_option_and_unknown_variant(installed, runtime, tmp_path):
    proc, rows = _app(installed, runtime, tmp_path, "--source", "synthetic", "--max-frames", "2",
                      "--variants", "w1a2")
    assert proc.returncode == 0, proc.stderr
    assert {r["variant"] for r in rows} == {"w1a2"} and all(r["agrees_with_float"] is None for r in rows)
    (tmp_path / "x").mkdir()
    proc, rows = _app(installed, runtime, tmp_path / "x", "--source", "synthetic", "--variants", "int9")
    assert proc.returncode == 2 and "int9" in proc.stderr and "installed: float32, w1a2" in proc.stderr


def test_the_vm_is_loaded_once_per_variant(installed, runtime, tmp_path, monkeypatch, capsys):
    sys.path[:0] = [str(runtime), str(runtime / "python")]
    import edge_sdk_runtime.loader as loader

    loads = []
    real = loader.load
    monkeypatch.setattr(loader, "load", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    out = tmp_path / "o.jsonl"
    assert classify.main(["--model", "mobilenet_v1", "--models", str(installed), "--runtime", str(runtime),
                          "--source", "synthetic:4", "--max-frames", "5", "--out", str(out), "--quiet"]) == 0
    assert len(loads) == 2 and len(out.read_text().splitlines()) == 10


# Measured on the host (these two packages, synthetic frames): RSS 52.9 MB after 10 frames; +32 kB by
# frame 300; +656 kB by frame 10,000 (two allocator steps, flat in between), every frame present.
# The bound leaves room for allocator noise; a per-frame leak of a frame's input (49 kB) would fail it.
RSS_GROWTH_BOUND_KB = 4096


@pytest.mark.slow
def test_soak_300_frames_flat_memory_and_no_dropped_results(installed, runtime, tmp_path):
    n = int(os.environ.get("EDGE_SDK_SOAK_FRAMES", "300"))
    proc, rows = _app(installed, runtime, tmp_path, "--source", "synthetic:7", "--max-frames", str(n), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert [(r["frame"], r["variant"]) for r in rows] == [(f, v) for f in range(n) for v in ("float32", "w1a2")]
    rss = [r["rss_kb"] for r in rows]
    assert rss[-1] - rss[40] < RSS_GROWTH_BOUND_KB, (rss[40], rss[-1])
