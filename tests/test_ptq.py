"""Post-training quantization (edge_sdk.quant.ptq / calibration): compiled == numpy int8 reference exactly,
close to float, and weight quantization equal to what the TFLite converter wrote for the same weights.

The zoo models load the committed Keras weights (tests/data/*_float.npz) whose *_int8.tflite twins the
TFLite converter wrote: its per-channel weight scales (max|w|/127) are an independent check of ours.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
ZOO = {"mobilenet_v1": ({"alpha": 0.25}, "mobilenet_v1_0.25_64"), "resnet18": ({"alpha": 0.125}, "resnet18_w8_64")}
# Measured (seeded calibration on 8 random frames, 4 held-out frames, seeds below): largest
# |dequantized int8 softmax - float softmax| was 0.0146 (mobilenet_v1) and 0.0172 (resnet18); the
# bound leaves ~2x room for platform float differences in calibration, not for a wrong scheme
# (a wrong zero point or scale shows as > 0.1).
OUTPUT_BOUND = {"mobilenet_v1": 0.03, "resnet18": 0.035}


def _zoo(name: str):
    from edge_sdk.models.zoo import build_zoo_model

    kw, stem = ZOO[name]
    return build_zoo_model(name, resolution=64, classes=10, weights=DATA / f"{stem}_float.npz", **kw)


def _quantize(model, **kw):
    from edge_sdk.quant.calibration import CalibrationWarning, quantize_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        return quantize_model(model, seed=0, count=8, **kw)


@pytest.fixture(scope="module", params=sorted(ZOO))
def ptq(request):
    """(name, model, PTQResult, vm runner) with the quantized graph compiled for the host once."""
    import tvm
    from tvm import relax

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.targets import get_target

    model = _zoo(request.param)
    res = _quantize(model)
    ex, params, _ = compile_int8(res.graph, get_target("host"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    ps = [tvm.runtime.tensor(params[k]) for k in sorted(params)]
    return request.param, model, res, lambda x: vm["main"](tvm.runtime.tensor(x), *ps).numpy()


def _held_out(model, res, seeds=(101, 102, 103, 104)):
    from edge_sdk.quant import int8 as q8

    t = res.graph.tensors[res.graph.inputs[0]]
    return [(x, q8.quantize(x, t.q.s, t.q.z)) for x in (model.example_input(seed=s) for s in seeds)]


def test_compiled_ptq_model_equals_numpy_int8_reference(ptq):
    from edge_sdk.quant.tflite_int8_ref import run_reference

    _, model, res, run = ptq
    for _, xq in _held_out(model, res):
        out = run(xq)
        assert out.dtype == np.int8
        np.testing.assert_array_equal(out, run_reference(res.graph, xq))
        assert len(np.unique(out)) > 2


def test_dequantized_output_is_close_to_float(ptq):
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.quant import int8 as q8

    name, model, res, run = ptq
    t_out = res.graph.tensors[res.graph.outputs[0]]
    assert (t_out.q.s, t_out.q.z) == (1 / 256, -128)  # TFLite's int8 softmax output
    worst, agree = 0.0, 0
    for x, xq in _held_out(model, res):
        f = evaluate(model.mod, x)
        d = q8.dequantize(run(xq), t_out.q.s, t_out.q.z)
        worst = max(worst, float(np.abs(d - f).max()))
        agree += int(np.argmax(d) == np.argmax(f))
    assert worst <= OUTPUT_BOUND[name]
    assert agree >= 3


def test_report_has_a_row_per_quantized_tensor(ptq):
    _, _, res, _ = ptq
    rep = res.report
    kinds = [op.kind for op in res.graph.ops]
    assert [r["op"] for r in rep["layers"]] == ["input"] + [k.lower() for k in kinds if k != "PAD"]
    for r in rep["layers"]:
        assert r["max_abs"] >= r["rmse"] >= 0
        assert r["sqnr_db"] is None or r["sqnr_db"] > 20  # 8-bit: ~6 dB/bit, minus error accumulation
    assert rep["top1_agreement"] >= 0.75 and rep["calibration"]["source"] == "random(seed=0)"


def _weighted(g):
    return [op for op in g.ops if op.kind in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")]


def test_weight_quantization_matches_the_tflite_converter(ptq):
    """Same Keras weights, quantized by the converter and by us: per-channel scales agree to float32 rounding,
    int8 weights to 1 LSB (a value on a rounding boundary), ReLU6 outputs to the bit."""
    from edge_sdk.models.tflite_int8 import read_int8_tflite

    name, _, res, _ = ptq
    ours, conv = res.graph, read_int8_tflite(DATA / f"{ZOO[name][1]}_int8.tflite")
    pairs = list(zip(_weighted(ours), _weighted(conv), strict=True))
    for a, b in pairs:
        wa, wb = ours.tensors[a.inputs[1]], conv.tensors[b.inputs[1]]
        sa, sb = np.asarray(wa.q.scale, np.float64), np.asarray(wb.q.scale, np.float64)
        if sb.size == 1:  # the converter quantizes FULLY_CONNECTED per tensor; we stay per channel
            sa = sa.max(keepdims=True)
        else:
            assert wa.q.axis == wb.q.axis
        np.testing.assert_allclose(sa, sb, rtol=1e-6)
        qa, qb = wa.data.astype(np.int32), wb.data.astype(np.int32).reshape(wa.data.shape)
        if sb.size > 1:
            assert np.abs(qa - qb).max() <= 1 and np.mean(qa == qb) > 0.99
        if a.opts.get("act") == 3:  # ReLU6: both at [0, 6] -> scale 6/255, zero point -128
            oa, ob = ours.tensors[a.outputs[0]].q, conv.tensors[b.outputs[0]].q
            assert (oa.s, oa.z) == (ob.s, ob.z)


def test_float_tflite_is_quantized_and_compiles_exactly():
    """The Relax-imported float .tflite (explicit PAD, depth multiplier 2, avg pool, add) takes the same path."""
    import tvm
    from tvm import relax

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.models.importers import load_model_file
    from edge_sdk.quant.tflite_int8_ref import run_reference
    from edge_sdk.targets import get_target

    model = load_model_file(DATA / "awkward_37x30_float.tflite", family="int8")
    res = _quantize(model)
    kinds = {op.kind for op in res.graph.ops}
    assert {"DEPTHWISE_CONV_2D", "ADD", "AVERAGE_POOL_2D", "FULLY_CONNECTED", "SOFTMAX"} <= kinds
    ex, params, _ = compile_int8(res.graph, get_target("host"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for _, xq in _held_out(model, res, seeds=(5, 6)):
        out = vm["main"](tvm.runtime.tensor(xq), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
        np.testing.assert_array_equal(out, run_reference(res.graph, xq))


def test_no_calibration_folder_warns():
    from edge_sdk.quant.calibration import CalibrationWarning, quantize_model

    msgs = []
    with pytest.warns(CalibrationWarning, match="seeded random frames"):
        quantize_model(_zoo("mobilenet_v1"), seed=0, count=2, progress=msgs.append)
    assert any(m.startswith("warning: no calibration images") for m in msgs)


def _write_pngs(folder: Path, n: int, size=(80, 96)):
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(4)
    for i in range(n):  # smooth gradients plus noise: not uniform noise like the random stand-in
        yy, xx = np.mgrid[0:size[0], 0:size[1]]
        base = (yy * (i + 1) + xx * (3 - i % 3)) % 256
        img = np.clip(base[..., None] + rng.normal(0, 20, size + (3,)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"img{i}.png")


def test_compile_cli_calibrates_on_a_folder(tmp_path, capsys):
    from edge_sdk.cli import main
    from edge_sdk.quant.calibration import CalibrationWarning
    from edge_sdk.run import run_package

    _write_pngs(tmp_path / "imgs", 3)
    (tmp_path / "imgs" / "notes.txt").write_text("not an image")
    pkg = tmp_path / "m.edgepkg"
    argv = ["compile", "mobilenet_v1", "--alpha", "0.25", "--resolution", "64", "--classes", "10", "--weights",
            str(DATA / "mobilenet_v1_0.25_64_float.npz"), "--variant", "int8", "--calibrate", str(tmp_path / "imgs"),
            "-o", str(pkg)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert "per-layer quantization error" in err and "pw13_relu6" in err and "top-1 agreement" in err
    assert main(["inspect", str(pkg), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    ptq = m["variant_info"]["ptq"]
    assert ptq["calibration"] == {"source": str(tmp_path / "imgs"), "count": 3, "method": "minmax"}
    assert len(ptq["layers"]) == 31 and m["input"]["dtype"] == "int8"
    assert m["golden"]["reference"] == "numpy-int8-ptq" and m["golden"]["atol"] == 0
    res = run_package(pkg, repeat=1, warmup=0)
    assert res.golden_ok and res.golden_max_abs_err == 0


def test_calibrate_refusals(tmp_path, capsys):
    from edge_sdk.cli import main

    (tmp_path / "empty").mkdir()
    out = ["-o", str(tmp_path / "x.edgepkg")]
    assert main(["compile", "mobilenet_v1", "--calibrate", str(tmp_path / "empty")] + out) == 2  # float32 variant
    assert "needs --variant int8" in capsys.readouterr().err
    assert main(["compile", str(DATA / "awkward_37x30_int8.tflite"), "--variant", "int8", "--calibrate",
                 str(tmp_path / "empty")] + out) == 2
    assert "already a full-integer model" in capsys.readouterr().err
    assert main(["compile", "mobilenet_v1", "--alpha", "0.25", "--resolution", "64", "--variant", "int8",
                 "--calibrate", str(tmp_path / "empty")] + out) == 2
    assert "no images" in capsys.readouterr().err
    assert not (tmp_path / "x.edgepkg").exists()


def test_nchw_model_is_refused_by_name():
    from edge_sdk.errors import ModelError
    from edge_sdk.models.importers import load_model_file

    model = load_model_file(DATA / "small_cnn.onnx", family="int8")
    with pytest.raises(ModelError, match="small_cnn.onnx.*NHWC"):
        _quantize(model)


def _conv_bn_model():
    """A hand-built NHWC Relax net with an unfolded batch_norm (what an importer may leave), conv -> BN -> ReLU."""
    import tvm
    from tvm import relax

    from edge_sdk.models.base import Model, Preprocess

    rng = np.random.default_rng(0)
    c = lambda a: relax.const(tvm.runtime.tensor(np.asarray(a, np.float32)))  # noqa: E731
    x = relax.Var("input", relax.TensorType((1, 12, 12, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, c(rng.normal(0, 0.5, (3, 3, 3, 8))), padding=(1, 1, 1, 1),
                                           data_layout="NHWC", kernel_layout="HWIO"))
            bn = bb.emit(relax.op.nn.batch_norm(y, c(rng.uniform(0.5, 2, 8)), c(rng.normal(0.5, 0.2, 8)),
                                                c(rng.normal(0, 1, 8)), c(rng.uniform(0.5, 2, 8)), axis=3, epsilon=1e-3))
            y = bb.emit(relax.op.nn.relu(bb.emit(relax.TupleGetItem(bn, 0))))
            y = bb.emit(relax.op.mean(y, axis=[1, 2]))
            y = bb.emit(relax.op.add(relax.op.matmul(y, c(rng.normal(0, 0.5, (8, 4)))), c(np.zeros(4))))
            out = bb.emit_output(bb.emit(relax.op.nn.softmax(y)))
        bb.emit_func_output(out)
    mod = relax.transform.Normalize()(bb.get())
    return Model("bn_net", mod, "input", (1, 12, 12, 3), "float32", Preprocess(12, 12), "test:bn_net")


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_batch_norm_is_folded_into_the_conv(method):
    from edge_sdk.quant.relax_ref import evaluate
    from edge_sdk.quant.tflite_int8_ref import run_reference
    from edge_sdk.quant import int8 as q8

    model = _conv_bn_model()
    res = _quantize(model, method=method)
    assert [op.kind for op in res.graph.ops] == ["CONV_2D", "MEAN", "FULLY_CONNECTED", "SOFTMAX"]
    assert res.graph.ops[0].opts["act"] == 1 and len(res.graph.ops[0].inputs) == 3  # ReLU fused, bias from BN
    for x, xq in _held_out(model, res, seeds=(7, 8)):
        d = q8.dequantize(run_reference(res.graph, xq), 1 / 256, -128)
        assert np.abs(d - evaluate(model.mod, x)).max() < 0.02
