"""DQ -> BatchNormalization -> Q (the pre-activation BN onnxruntime's quantizer leaves float in DenseNet) through
the integer path (models/onnx_qdq_ops.batch_norm: a 1x1 depthwise conv with per-channel scale and int32 bias).

A small DenseNet-style net (conv, max pool, BN + ReLU, concat, conv) is built here and quantized by
onnxruntime.quantization.quantize_static (QDQ, per-channel int8); each of our ops, fed ONNX Runtime's own int8
inputs, is within 1 LSB of ONNX Runtime's int8 output (ORT computes BN in float and rounds once), and the
compiled host graph is bit-exact with our numpy int8 reference of it."""
from __future__ import annotations

import numpy as np
import pytest


def _float_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    c = 6
    inits = [init("w1", rng.normal(0, 0.3, (c, 3, 3, 3))), init("b1", rng.normal(0, 0.1, c)),
             init("gamma", rng.uniform(-1.5, 1.5, c)), init("beta", rng.normal(0.3, 0.5, c)),
             init("mean", rng.normal(0, 0.5, c)), init("var", rng.uniform(0.3, 2.0, c)),
             init("w2", rng.normal(0, 0.3, (4, 2 * c, 1, 1))), init("b2", rng.normal(0, 0.1, 4))]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["p1", "gamma", "beta", "mean", "var"], ["bn"], epsilon=1e-5),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Concat", ["p1", "r"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2", "b2"], ["output"])]
    graph = helper.make_graph(nodes, "bn_net", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="module")
def qdq_file(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    d = tmp_path_factory.mktemp("bn")
    _float_model(d / "f.onnx")

    class Frames(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.it = iter([{"input": rng.uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(d / "f.onnx"), str(d / "q.onnx"), Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return d / "q.onnx"


def _ort_all(path, x):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    m = onnx.load(str(path))
    qs = {n.input[0]: n.output[0] for n in m.graph.node if n.op_type == "QuantizeLinear"}
    m.graph.output.extend(helper.make_tensor_value_info(o, TensorProto.INT8, None) for o in qs.values())
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    vals = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
    return vals["output"], {f: vals[q] for f, q in qs.items()}


def test_batchnorm_stays_float_in_the_qdq_file_and_maps_to_a_depthwise(qdq_file):
    import onnx

    from edge_sdk.models.onnx_qdq import read_qdq_onnx

    m = onnx.load(str(qdq_file))
    prod = {o: n.op_type for n in m.graph.node for o in n.output}
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    assert prod[bn.input[0]] == "DequantizeLinear"  # the sandwich DQ -> BN -> Q
    kinds = [op.kind for op in read_qdq_onnx(qdq_file).ops]
    assert "DEPTHWISE_CONV_2D" in kinds and kinds.count("CONV_2D") == 2


def test_each_op_within_1_lsb_of_onnxruntime(qdq_file):
    from edge_sdk.models.onnx_qdq import read_qdq_onnx
    from edge_sdk.quant.tflite_int8_ref import eval_op

    g = read_qdq_onnx(qdq_file)
    for seed in range(3):
        x = np.random.default_rng(seed).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)
        _, want = _ort_all(qdq_file, x)
        env, worst = {g.inputs[0]: x}, {}
        for op in g.ops:
            y = eval_op(g, op, env)
            for i, v in zip(op.outputs, y if isinstance(y, list) else [y]):
                w = want.get(g.tensors[i].name)
                if w is not None and v.dtype == np.int8:
                    w = w.transpose(0, 2, 3, 1) if w.ndim == 4 else w
                    worst[op.kind] = max(worst.get(op.kind, 0), int(np.abs(v.astype(np.int32) - w).max()))
                    v = w
                env[i] = v
        assert "DEPTHWISE_CONV_2D" in worst and max(worst.values()) <= 1, worst


@pytest.mark.slow
def test_compiled_host_equals_reference(qdq_file):
    import tvm
    from tvm import relax

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.models.onnx_qdq import read_qdq_onnx
    from edge_sdk.quant.tflite_int8_ref import run_reference
    from edge_sdk.targets import get_target

    g = read_qdq_onnx(qdq_file)
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)
    ex, params, _ = compile_int8(g, get_target("host"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    ref = run_reference(g, x)
    np.testing.assert_array_equal(got, ref)
    theirs, _ = _ort_all(qdq_file, x)
    assert np.abs(ref - theirs).max() <= 3 * g.tensors[g.ops[-1].inputs[0]].q.s * 1.001
