"""The CLI end to end on small models: errors and exit codes, compile -> inspect -> run, pi3 under qemu."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from edge_sdk.cli import main
from edge_sdk.quant.relax_ref import evaluate


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,code,needle", [
    (["compile", "mobilenet_v9", "-o", "x.edgepkg"], 2, "unknown model 'mobilenet_v9'"),
    (["compile", "mobilenet_v1", "--variant", "flaot32", "-o", "x.edgepkg"], 2, "did you mean 'float32'"),
    (["compile", "mobilenet_v1", "--target", "pi5", "-o", "x.edgepkg"], 2, "unknown target 'pi5'"),
    (["compile", "mobilenet_v1", "-o", "x.tar"], 2, "must end in .edgepkg"),
    (["run", "no/such.edgepkg"], 6, "no/such.edgepkg: no such package file"),
])
def test_usage_errors(capsys, argv, code, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got, _, err = _run(capsys, argv)
    assert got == code
    assert needle in err
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_corrupt_model_file(capsys, tmp_path):
    bad = tmp_path / "broken.tflite"
    bad.write_bytes(b"\x18\x00\x00\x00TFL3" + b"\xff" * 64)
    code, _, err = _run(capsys, ["compile", str(bad), "-o", str(tmp_path / "o.edgepkg")])
    assert code == 4
    assert "broken.tflite" in err
    assert not (tmp_path / "o.edgepkg").exists()


def test_missing_cross_compiler_names_the_package(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no aarch64-linux-gnu-g++ anywhere
    code, _, err = _run(capsys, ["compile", "mobilenet_v1", "--target", "pi3", "-o", str(tmp_path / "o.edgepkg")])
    assert code == 9  # MissingDependency: a system program pip cannot bring (edge_sdk/system_tools.py)
    assert "aarch64-linux-gnu-g++" in err and "apt-get install g++-aarch64-linux-gnu" in err


def test_compile_inspect_run_host(capsys, host_package, small_mobilenet, tmp_path):
    code, out, _ = _run(capsys, ["inspect", str(host_package), "--json"])
    assert code == 0
    m = json.loads(out)
    assert m["variant"] == "float32" and m["target"]["name"] == "host"
    assert m["input"]["shape"] == [1, 64, 64, 3] and m["input"]["preprocess"]["resize"] == [64, 64]
    convs = [r for r in m["layers"] if r["op"] == "conv2d"]
    assert convs[0]["flops"] == 2 * 32 * 32 * 8 * 3 * 3 * 3 + 2 * 32 * 32 * 8  # conv + bias + relu6 epilogue
    assert set(m["members"]) == {"model.so", "params.bin", "golden_input.npy", "golden_output.npy"}
    assert m["params"]["count"] > 0  # weights live in params.bin, not in the library

    x = small_mobilenet.example_input(seed=11)
    np.save(tmp_path / "x.npy", x)
    code, out, _ = _run(capsys, ["run", str(host_package), "--input", str(tmp_path / "x.npy"), "--repeat", "3",
                                 "--save-output", str(tmp_path / "y.npy"), "--json"])
    assert code == 0
    r = json.loads(out)
    assert r["golden"]["ok"] and r["repeats"] == 3 and not r["emulated"]
    y = np.load(tmp_path / "y.npy")
    ref = evaluate(small_mobilenet.mod, x)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-6)
    assert r["top_k"][0]["class"] == int(np.argmax(ref))


def test_run_rejects_wrong_input_shape(capsys, host_package, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 32, 32, 3), np.float32))
    code, _, err = _run(capsys, ["run", str(host_package), "--input", str(tmp_path / "x.npy")])
    assert code == 2 and "x.npy: input has shape [1, 32, 32, 3]" in err


def test_run_an_image(capsys, host_package, tmp_path):
    from PIL import Image

    img = np.random.default_rng(0).integers(0, 256, (120, 90, 3), dtype=np.uint8)
    Image.fromarray(img).save(tmp_path / "frame.png")
    code, out, _ = _run(capsys, ["run", str(host_package), "--input", str(tmp_path / "frame.png"), "--json"])
    assert code == 0 and len(json.loads(out)["top_k"]) == 5


@pytest.mark.qemu
def test_pi3_package_under_qemu_equals_host(capsys, host_package, pi3_package, tmp_path):
    if shutil.which("qemu-aarch64") is None:
        pytest.skip("qemu-user not installed")
    outs = {}
    for name, pkg in (("host", host_package), ("pi3", pi3_package)):
        code, out, _ = _run(capsys, ["run", str(pkg), "--repeat", "1", "--json",
                                     "--save-output", str(tmp_path / f"{name}.npy")])
        assert code == 0
        r = json.loads(out)
        assert r["golden"]["ok"]
        assert r["emulated"] == (name == "pi3")
        outs[name] = np.load(tmp_path / f"{name}.npy")
    np.testing.assert_allclose(outs["pi3"], outs["host"], rtol=1e-5, atol=1e-6)


def test_int8_tflite_compile_run_is_bit_exact_with_tflite(capsys, data_dir, tmp_path):
    """A converter-written full-int8 model through the CLI: integer in, integer out, equal to TFLite's
    reference kernels on an input the golden pair never saw."""
    from edge_sdk.runtime.litert import run_tflite

    src = data_dir / "awkward_37x30_int8.tflite"
    pkg = tmp_path / "aw8.edgepkg"
    assert main(["compile", str(src), "--variant", "int8", "-o", str(pkg)]) == 0
    capsys.readouterr()
    code, out, _ = _run(capsys, ["inspect", str(pkg), "--json"])
    m = json.loads(out)
    assert m["input"]["dtype"] == "int8" and m["input"]["quantization"]["zero_point"] == 0
    assert m["golden"]["rtol"] == 0 and m["golden"]["atol"] == 0
    assert [r["op"] for r in m["layers"]][:3] == ["conv2d", "depthwise_conv2d", "conv2d"]
    x = np.random.default_rng(9).integers(-128, 128, (1, 37, 30, 3), dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    code, out, _ = _run(capsys, ["run", str(pkg), "--input", str(tmp_path / "x.npy"), "--repeat", "1",
                                 "--save-output", str(tmp_path / "y.npy"), "--json"])
    assert code == 0 and json.loads(out)["golden"]["max_abs_err"] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), run_tflite(src, x, reference_kernels=True))


def test_int8_variant_quantizes_a_float_model_with_a_warning(capsys, data_dir, tmp_path):
    """A float .tflite with --variant int8 is post-training quantized (tests/test_ptq.py has the numerics);
    without --calibrate the ranges come from random frames, and the user is told."""
    code, _, err = _run(capsys, ["compile", str(data_dir / "awkward_37x30_float.tflite"), "--variant", "int8",
                                 "-o", str(tmp_path / "x.edgepkg")])
    assert code == 0 and "no calibration images given" in err and "per-layer quantization error" in err
    assert (tmp_path / "x.edgepkg").exists()


def test_larq_model_with_another_variant_is_refused(capsys, data_dir, tmp_path):
    code, _, err = _run(capsys, ["compile", str(data_dir / "lce" / "model_lce.tflite"), "--variant", "int8",
                                 "-o", str(tmp_path / "x.edgepkg")])
    assert code == 2 and "model_lce.tflite is a Larq binary model" in err and "--variant w1a1" in err
