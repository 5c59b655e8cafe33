"""The int8 ops beyond MobileNetV1/V2/ResNet (MUL with broadcasting, HARD_SWISH, SUB, MAXIMUM/MINIMUM, LEAKY_RELU, PRELU, TANH,
SPLIT/SPLIT_V, STRIDED_SLICE, TRANSPOSE, GATHER, PACK, RESIZE_*, LOGISTIC/CONCATENATION/MEAN in the shapes
the nets use) against TFLite's reference kernels (BUILTIN_REF), exactly.

Files: tests/data/edge_nets/ops/ (tools/make_edge_nets_int8_ops.py, one op each on shapes that broadcast) and
the full-int8 nets in tests/data/edge_nets/ (tools/make_edge_nets_tflite.py). Both the numpy reference
(quant/) and the compiled kernels (compiler/int8/) are compared with LiteRT directly.
"""
from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data" / "edge_nets"
OPS = sorted((DATA / "ops").glob("*.tflite"))
NETS = sorted(DATA.glob("*_int8.tflite"))
# compiled in CI (a net takes minutes here): squeeze-excite MUL, HARD_SWISH, hard-sigmoid ADD/MUL with
# constants (MobileNetV3-Small); SPLIT, 5-D TRANSPOSE (ShuffleNetV2). tools/edge_nets_matrix.py: all of them.
COMPILED_NETS = [DATA / "mobilenet_v3_small_0.15_64_int8.tflite", DATA / "shufflenet_v2_w16_64_int8.tflite"]
FAST_OPS = ("mul_se", "hard_swish", "swish", "split", "strided_slice_neg", "resize_bilinear_9x7", "gather_channels",
            "mul_const_channel")


def _litert_ref(path: Path, x: np.ndarray, *, all_tensors: bool = False):
    from edge_sdk.runtime.litert import interpreter_class

    Interpreter, OpResolverType = interpreter_class()
    it = Interpreter(model_path=str(path), num_threads=1, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=all_tensors)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it


def _out(it) -> np.ndarray:
    return it.get_tensor(it.get_output_details()[0]["index"])


def _input(path: Path, seed: int) -> np.ndarray:
    from edge_sdk.compiler.int8.backend import example_input
    from edge_sdk.models.tflite_int8 import read_int8_tflite

    return example_input(read_int8_tflite(path), seed=seed)


@functools.cache
def _host_executable(path: Path):
    """compile_int8 of a file for the host, once per test process (the same file and target compile to the same
    executable; test_compiled_net_equals_tflite_reference runs each net on two inputs: one compile)."""
    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.targets import get_target

    ex, params, _ = compile_int8(path, get_target("host"))
    return ex, params


def _run_host(path: Path, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    ex, params = _host_executable(path)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()


NO_TEST_MODEL = {"SQUEEZE"}  # registered and read as RESHAPE is; no committed int8 model has one


def test_every_registered_op_has_a_model():
    """Every op of the registry (graph/ops) occurs in a committed int8 test model: the single-op files here and
    in tests/data/int8_ops, the int8 nets, the ONNX QDQ files."""
    from edge_sdk.errors import ModelError
    from edge_sdk.graph.ops import kinds as registered
    from edge_sdk.models.tflite_int8 import read_int8_tflite

    root = DATA.parent
    files = OPS + sorted((root / "int8_ops").glob("*.tflite")) + sorted(root.glob("*_int8*.tflite")) + NETS + sorted(
        root.glob("**/qdq/*.onnx"))
    kinds = set()
    for p in files:
        try:
            kinds |= {op.kind for op in read_int8_tflite(p).ops}
        except ModelError:  # the QDQ file kept to test a refusal
            pass
    assert set(registered()) - NO_TEST_MODEL <= kinds, sorted(set(registered()) - NO_TEST_MODEL - kinds)
    assert not NO_TEST_MODEL & kinds, "a model has it now: drop it from NO_TEST_MODEL"


@pytest.mark.parametrize("path", OPS, ids=lambda p: p.stem)
def test_numpy_reference_equals_tflite_reference(path):
    from edge_sdk.models.tflite_int8 import read_int8_tflite
    from edge_sdk.quant.tflite_int8_ref import run_reference

    g = read_int8_tflite(path)
    for seed in range(4):
        x = _input(path, seed)
        ref = _out(_litert_ref(path, x))
        ours = run_reference(g, x)
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        np.testing.assert_array_equal(ours, ref)


def test_broadcast_shapes_are_really_broadcast():
    """The squeeze-excite MUL multiplies (1,H,W,C) by (1,1,1,C); the pixel gate (1,H,W,1) by (1,H,W,C)."""
    from edge_sdk.models.tflite_int8 import read_int8_tflite

    def shapes(name, kind):
        g = read_int8_tflite(DATA / "ops" / f"{name}.tflite")
        op = next(o for o in g.ops if o.kind == kind)
        return [g.tensors[i].shape for i in op.inputs]

    assert sorted(shapes("mul_se", "MUL")) == [(1, 1, 1, 8), (1, 6, 5, 8)]
    assert sorted(shapes("mul_pixel", "MUL")) == [(1, 6, 5, 1), (1, 6, 5, 8)]
    assert (1, 1, 1, 8) in shapes("sub_broadcast", "SUB")


def test_hard_swish_table_equals_tflite_on_every_int8_value():
    """All 256 inputs through the HARD_SWISH op of the MobileNetV3 net (scales as the converter wrote them)."""
    from edge_sdk.models.tflite_int8 import read_int8_tflite
    from edge_sdk.quant.tflite_int8_ref_ops import unary_table

    path = DATA / "ops" / "hard_swish.tflite"
    g = read_int8_tflite(path)
    op = next(o for o in g.ops if o.kind == "HARD_SWISH")
    table = unary_table(g, op)
    assert len(np.unique(table)) > 20  # not a degenerate scale
    it = _litert_ref(path, _input(path, 0), all_tensors=True)
    seen = it.get_tensor(op.inputs[0]).astype(np.int64)
    np.testing.assert_array_equal(table[seen + 128], it.get_tensor(op.outputs[0]))


@pytest.mark.parametrize("path", NETS, ids=lambda p: p.stem)
def test_net_numpy_reference_equals_tflite_at_every_tensor(path):
    from edge_sdk.models.tflite_int8 import read_int8_tflite
    from edge_sdk.quant.tflite_int8_ref import run_reference

    g = read_int8_tflite(path)
    x = _input(path, 7)
    it = _litert_ref(path, x, all_tensors=True)
    _, env = run_reference(g, x, keep=True)
    for op in g.ops:
        for idx in op.outputs:
            np.testing.assert_array_equal(env[idx], it.get_tensor(idx), err_msg=f"op {op.index} {op.kind}")
    assert len(np.unique(env[g.outputs[0]])) > 1


@pytest.mark.parametrize("path", [p for p in OPS if p.stem in FAST_OPS], ids=lambda p: p.stem)
def test_compiled_op_equals_tflite_reference(path):
    x = _input(path, 3)
    np.testing.assert_array_equal(_run_host(path, x), _out(_litert_ref(path, x)))


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in OPS if p.stem not in FAST_OPS], ids=lambda p: p.stem)
def test_compiled_op_equals_tflite_reference_all(path):
    x = _input(path, 3)
    np.testing.assert_array_equal(_run_host(path, x), _out(_litert_ref(path, x)))


@pytest.mark.slow
@pytest.mark.parametrize("path", COMPILED_NETS, ids=lambda p: p.stem)
def test_compiled_net_equals_tflite_reference(path):
    for seed in (5, 6):
        x = _input(path, seed)
        ref = _out(_litert_ref(path, x))
        np.testing.assert_array_equal(_run_host(path, x), ref)
    assert len(np.unique(ref)) > 1


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
@pytest.mark.parametrize("name", ["mobilenet_v3_small_0.15_64_int8"])
def test_pi3_under_qemu_equals_tflite_reference(tmp_path, name):
    """One net under qemu (the machine is shared): squeeze-excite MUL, HARD_SWISH, ADD with a constant."""
    import tvm

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.runtime.execute import LocalRun, run_compiled
    from edge_sdk.targets import get_target

    path = DATA / f"{name}.tflite"
    tgt = get_target("pi3")
    ex, params, _ = compile_int8(path, tgt)
    lib, pfile = tmp_path / "model.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=tgt.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    x = _input(path, 9)
    res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53", how=LocalRun(repeat=1))
    np.testing.assert_array_equal(res.output, _out(_litert_ref(path, x)))
