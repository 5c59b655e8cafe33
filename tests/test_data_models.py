"""The committed test models in tests/data (made by tools/make_test_models.py, see tests/data/README.md).

Other tests trust these files as converter-written references, so here we check they are what the
README says: shapes, dtypes, really-int8 tensors, QUANTIZE/DEQUANTIZE ends, weights under the zoo's
names, and that LiteRT's reference kernels and XNNPACK agree on them (a non-chaotic model).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

litert = pytest.importorskip("ai_edge_litert.interpreter")

DATA = Path(__file__).parent / "data"

# file stem -> (input shape, input dtype, output shape); outputs have the input's dtype.
EXPECTED = {
    "mobilenet_v1_0.25_64_float": ((1, 64, 64, 3), "float32", (1, 10)),
    "mobilenet_v1_0.25_64_int8": ((1, 64, 64, 3), "int8", (1, 10)),
    "mobilenet_v2_0.1_64_float": ((1, 64, 64, 3), "float32", (1, 10)),
    "mobilenet_v2_0.1_64_int8": ((1, 64, 64, 3), "int8", (1, 10)),
    "mobilenet_v2_0.1_64_int8_float_io": ((1, 64, 64, 3), "float32", (1, 10)),
    "resnet18_w8_64_float": ((1, 64, 64, 3), "float32", (1, 10)),
    "resnet18_w8_64_int8": ((1, 64, 64, 3), "int8", (1, 10)),
    "awkward_37x30_float": ((1, 37, 30, 3), "float32", (1, 10)),
    "awkward_37x30_int8": ((1, 37, 30, 3), "int8", (1, 10)),
    "awkward_37x30_int8_float_io": ((1, 37, 30, 3), "float32", (1, 10)),
}
INT8 = [n for n in EXPECTED if "_int8" in n]
# Largest |reference kernels - XNNPACK| over this test's 20 seeded inputs, measured with ai-edge-litert
# 2.3.0 on x86_64 (AVX2), tests/data as committed in "positive-mean BN beta": int8 outputs in LSB,
# float_io outputs in units of the softmax scale 1/256. Over 200 seeds the tails were 3/2/7/16/17/6:
# MobileNetV2 0.1's 8-channel linear bottlenecks amplify per-layer 1-LSB rounding differences most.
REF_VS_XNNPACK_LSB = {"awkward_37x30_int8": 2, "awkward_37x30_int8_float_io": 2, "mobilenet_v1_0.25_64_int8": 5,
                      "mobilenet_v2_0.1_64_int8": 10, "mobilenet_v2_0.1_64_int8_float_io": 7,
                      "resnet18_w8_64_int8": 3}
ZOO = [("mobilenet_v1", "mobilenet_v1_0.25_64_float", 0.25), ("mobilenet_v2", "mobilenet_v2_0.1_64_float", 0.1),
       ("resnet18", "resnet18_w8_64_float", 0.125)]


def _interp(name: str, resolver=None) -> litert.Interpreter:
    kw = {} if resolver is None else {"experimental_op_resolver_type": resolver}
    it = litert.Interpreter(model_path=str(DATA / f"{name}.tflite"), num_threads=1, **kw)
    it.allocate_tensors()
    return it


def _input(it, seed: int) -> np.ndarray:
    d = it.get_input_details()[0]
    rng = np.random.default_rng(seed)
    if d["dtype"] == np.int8:
        return rng.integers(-128, 128, d["shape"]).astype(np.int8)
    return rng.uniform(-1.0, 1.0, d["shape"]).astype(np.float32)


def _run(it, x: np.ndarray) -> np.ndarray:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def test_every_committed_model_is_listed():
    """A file added without updating the README and this table fails here."""
    assert {p.stem for p in DATA.glob("*.tflite")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_io_shapes_and_dtypes(name):
    in_shape, dtype, out_shape = EXPECTED[name]
    it = _interp(name)
    (i,), (o,) = it.get_input_details(), it.get_output_details()
    assert (tuple(i["shape"]), np.dtype(i["dtype"]).name) == (in_shape, dtype)
    assert (tuple(o["shape"]), np.dtype(o["dtype"]).name) == (out_shape, dtype)
    # the awkward model alone was converted without a fixed batch
    assert int(i["shape_signature"][0]) == (-1 if name.startswith("awkward") else 1)


@pytest.mark.parametrize("name", INT8)
def test_int8_models_compute_in_int8(name):
    """Full-integer: no float tensor except the float_io ends; int8 weights with per-channel scales."""
    it = _interp(name, litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)  # ops, not DELEGATE
    tensors = it.get_tensor_details()
    floats = {t["index"] for t in tensors if t["dtype"] == np.float32}
    ends = {it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]}
    assert floats == (ends if name.endswith("float_io") else set())
    ops = it._get_ops_details()
    convs = [op for op in ops if op["op_name"] in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    assert convs
    by_index = {t["index"]: t for t in tensors}
    for op in convs:
        x, w, b = (by_index[i] for i in op["inputs"])
        assert (x["dtype"], w["dtype"], b["dtype"]) == (np.int8, np.int8, np.int32), op
        q = w["quantization_parameters"]  # TFLite weights: conv OHWI (axis 0), depthwise 1HWC (axis 3)
        axis = 0 if op["op_name"] == "CONV_2D" else 3
        assert q["quantized_dimension"] == axis
        assert len(q["scales"]) == w["shape"][axis] > 1, f"{op['op_name']} #{op['index']}: not per-channel"
        assert not q["zero_points"].any()  # symmetric weights
    if name.endswith("float_io"):
        assert (ops[0]["op_name"], ops[-1]["op_name"]) == ("QUANTIZE", "DEQUANTIZE")
    else:
        assert {"QUANTIZE", "DEQUANTIZE"}.isdisjoint(op["op_name"] for op in ops)


@pytest.mark.parametrize("name", sorted(REF_VS_XNNPACK_LSB))
def test_reference_kernels_and_xnnpack_agree_within_a_few_lsb(name):
    ref = _interp(name, litert.OpResolverType.BUILTIN_REF)
    fast = _interp(name, litert.OpResolverType.AUTO)  # XNNPACK delegate
    worst = 0.0
    for seed in range(20):
        x = _input(ref, seed)
        a, b = _run(ref, x).astype(np.float64), _run(fast, x).astype(np.float64)
        worst = max(worst, float(np.abs(a - b).max()))
    lsb = 1.0 if name.endswith("_int8") else 1 / 256  # softmax output scale
    assert worst <= REF_VS_XNNPACK_LSB[name] * lsb + 1e-9, f"{name}: {worst / lsb:.0f} LSB apart"


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.endswith("_float")])
def test_float_models_give_a_spread_softmax(name):
    """Seeded random weights, yet a usable test model: probabilities sum to 1, are neither one-hot
    nor flat, and depend on the input; reference kernels and XNNPACK agree closely."""
    ref = _interp(name, litert.OpResolverType.BUILTIN_REF)
    fast = _interp(name)
    outs = []
    for seed in range(3):
        x = _input(ref, seed)
        y = _run(ref, x)[0]
        np.testing.assert_allclose(_run(fast, x)[0], y, atol=1e-5)
        assert abs(float(y.sum()) - 1.0) < 1e-5 and 0.15 < y.max() < 0.95
        outs.append(y)
    assert np.abs(outs[0] - outs[1]).max() > 1e-3


@pytest.mark.parametrize("zoo,name,alpha", ZOO)
def test_npz_weights_use_the_zoo_names(zoo, name, alpha):
    """Every array has the name and shape the zoo asks for, and none is left over."""
    pytest.importorskip("tvm")
    from edge_sdk.models.zoo import build_zoo_model

    npz = DATA / f"{name}.npz"
    with np.load(npz) as f:
        arrays = {k: f[k] for k in f.files}
    model = build_zoo_model(zoo, alpha=alpha, resolution=64, classes=10, weights=npz)  # raises on mismatch
    assert model.input_shape == (1, 64, 64, 3)
    # float16 on disk (exact: the generator rounded the Keras weights to float16 before converting)
    assert {a.dtype for a in arrays.values()} == {np.dtype(np.float16)}
    bn_vars = [v for k, v in arrays.items() if k.endswith(".bn.var")]
    bn_means = [v for k, v in arrays.items() if k.endswith(".bn.mean")]
    assert bn_vars and not any(np.allclose(v, 1.0) for v in bn_vars)  # BN is not an identity
    assert not any(np.allclose(m, 0.0) for m in bn_means)


def test_onnx_model_runs_and_matches_its_documented_shape():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    path = DATA / "small_cnn.onnx"
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert {n.op_type for n in model.graph.node} >= {"Conv", "BatchNormalization", "Add", "Gemm", "Softmax"}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (i,), (_o,) = sess.get_inputs(), sess.get_outputs()
    assert (i.name, i.shape, i.type) == ("input", [1, 3, 32, 32], "tensor(float)")
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    (y,) = sess.run(None, {"input": x})
    assert y.shape == (1, 10) and abs(float(y.sum()) - 1.0) < 1e-5 and y.max() < 0.99
