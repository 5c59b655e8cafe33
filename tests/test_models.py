"""Model intake: the zoo in Relax, weights files, importers' errors, and the numpy reference itself."""
from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.quant.relax_ref import evaluate
from edge_sdk.errors import ModelError, UsageError
from edge_sdk.models.importers import load_model_file
from edge_sdk.models.zoo import build_zoo_model, same_padding


@pytest.mark.parametrize("size,k,s,want", [(64, 3, 2, (0, 1)), (65, 3, 2, (1, 1)), (7, 7, 2, (3, 3)),
                                           (224, 7, 2, (2, 3)), (5, 1, 2, (0, 0)), (8, 3, 1, (1, 1))])
def test_same_padding_matches_tensorflow(size, k, s, want):
    # TensorFlow: out = ceil(in / s); pad = max((out - 1) * s + k - in, 0); before = pad // 2
    assert same_padding(size, k, s) == want


@pytest.mark.parametrize("name,alpha,res", [("mobilenet_v1", 0.25, 64), ("mobilenet_v2", 0.35, 48),
                                            ("resnet18", 0.125, 40)])
def test_numpy_reference_agrees_with_tvm_stock_lowering(name, alpha, res):
    """Two independent implementations of the zoo graph: our float64 numpy interpreter and TVM's default
    (unscheduled TOPI) build. Agreement checks the reference we use for golden outputs."""
    import tvm
    from tvm import relax

    m = build_zoo_model(name, alpha=alpha, resolution=res, classes=10, seed=1)
    x = m.example_input(seed=2)
    ref = evaluate(m.mod, x)
    vm = relax.VirtualMachine(tvm.compile(m.mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert out.shape == (1, 10)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
    assert abs(float(ref.sum()) - 1.0) < 1e-5  # softmax output
    assert ref.max() < 0.999  # a random model whose softmax is not one-hot: the comparison means something


def test_weights_from_npz(tmp_path):
    m = build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=4)
    # collect the names the model asks for by building once with a weights file that lacks everything
    empty = tmp_path / "empty.npz"
    np.savez(empty)
    with pytest.raises(ModelError, match=r"empty.npz: missing weight 'conv1.weight' \(expected shape \[3, 3, 3, 8\]\)"):
        build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=4, weights=empty)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{"conv1.weight": np.zeros((3, 3, 3, 9), np.float32)})
    with pytest.raises(ModelError, match=r"'conv1.weight' has shape \[3, 3, 3, 9\], expected \[3, 3, 3, 8\]"):
        build_zoo_model("mobilenet_v1", alpha=0.25, resolution=32, classes=4, weights=bad)
    assert m.input_shape == (1, 32, 32, 3)


def test_unused_weights_are_an_error(tmp_path):
    from edge_sdk.models import zoo

    names = {}
    orig = zoo._Weights.get

    def spy(self, key, shape, **kw):
        arr = orig(self, key, shape, **kw)
        names[key] = arr
        return arr

    zoo._Weights.get = spy
    try:
        ref = build_zoo_model("resnet18", alpha=0.125, resolution=32, classes=3, seed=5)
    finally:
        zoo._Weights.get = orig
    full = tmp_path / "full.npz"
    np.savez(full, **names)
    same = build_zoo_model("resnet18", alpha=0.125, resolution=32, classes=3, weights=full)
    x = ref.example_input()
    np.testing.assert_array_equal(evaluate(same.mod, x), evaluate(ref.mod, x))
    extra = tmp_path / "extra.npz"
    np.savez(extra, **names, **{"layer9.conv.weight": np.zeros(3, np.float32)})
    with pytest.raises(ModelError, match="not used by this model: layer9.conv.weight"):
        build_zoo_model("resnet18", alpha=0.125, resolution=32, classes=3, weights=extra)


def test_unknown_zoo_name_suggests():
    with pytest.raises(UsageError, match="did you mean 'mobilenet_v2'"):
        build_zoo_model("mobilenet_v3")


@pytest.mark.parametrize("suffix", [".tflite", ".onnx"])
def test_corrupt_model_file_names_the_file(tmp_path, suffix):
    bad = tmp_path / f"broken{suffix}"
    bad.write_bytes(b"this is not a model at all" * 10)
    with pytest.raises(ModelError, match=f"broken{suffix}: not a valid"):
        load_model_file(bad)


def test_unknown_format(tmp_path):
    f = tmp_path / "m.pb"
    f.write_bytes(b"x")
    with pytest.raises(ModelError, match="unknown model format '.pb'"):
        load_model_file(f)


def test_unsupported_onnx_op_names_file_and_op(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["input"], ["r"]), helper.make_node("LpNormalization", ["r"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 8, 8])])
    path = tmp_path / "lpnorm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelError, match=r"lpnorm.onnx: unsupported model content: .*LpNormalization"):
        load_model_file(path)
