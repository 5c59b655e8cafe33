"""Bilinear relax.image.resize2d as our scheduled kernel (compiler/ops/resize.py) against numpy (quant/resize_ref.py,
float64, the ONNX Resize arithmetic) and TVM's default legalization, on the host and on pi3 under qemu, for every
coordinate mode it takes, upsampling and downsampling, channel counts that are and are not vector multiples; and
in a compiled graph (conv -> add -> resize -> conv, the shape of mediapipe's decoders). The trained files with
resizes (palm_detection_lite, selfie_segmentation) are checked against LiteRT in test_trained_files.py.
No speed is asserted here.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.compiler.ops import resize
from edge_sdk.compiler.ops.common import simd_of
from edge_sdk.quant.relax_ref import evaluate
from edge_sdk.targets import get_target
from test_float_fusions import run_host

RNG = np.random.default_rng(6)
CASES = [((1, 8, 8, 16), (16, 16), "half_pixel"), ((1, 7, 5, 24), (14, 10), "half_pixel"),
         ((1, 6, 9, 3), (11, 4), "align_corners"), ((1, 5, 5, 8), (10, 15), "asymmetric"),
         ((1, 4, 6, 12), (9, 13), "pytorch_half_pixel"), ((2, 3, 3, 1152), (6, 6), "half_pixel")]


def resize_net(shape, size, mode, *, with_convs=False):
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType(shape, "float32"))
    c = shape[3]
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            if with_convs:
                w = (RNG.standard_normal((3, 3, c, c)) / np.sqrt(9 * c)).astype("float32")
                y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=1, data_layout="NHWC", kernel_layout="HWIO"))
                y = bb.emit(relax.op.add(y, x))
            y = bb.emit(relax.op.image.resize2d(y, size, layout="NHWC", method="linear",
                                                coordinate_transformation_mode=mode))
            if with_convs:
                w1 = (RNG.standard_normal((1, 1, c, 8)) / np.sqrt(c)).astype("float32")
                y = bb.emit(relax.op.nn.conv2d(y, relax.const(w1), data_layout="NHWC", kernel_layout="HWIO"))
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


def _kernel_args(shape, size, mode, x):
    iy, wy = resize.tables(shape[1], size[0], mode)
    ix, wx = resize.tables(shape[2], size[1], mode)
    return [x, iy, wy, ix, wx]


@pytest.mark.parametrize("shape,size,mode", CASES)
def test_resize_kernel_matches_numpy_and_topi_on_host(shape, size, mode):
    host = get_target("host")
    x = RNG.standard_normal(shape).astype("float32")
    func = resize.resize_bilinear_nhwc(shape, size, simd_of(host.tvm_target()), name="t_resize")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=host.tvm_target())
    out = tvm.runtime.tensor(np.zeros((shape[0], *size, shape[3]), "float32"))
    lib["t_resize"](*[tvm.runtime.tensor(a) for a in _kernel_args(shape, size, mode, x)], out)
    ref = np.asarray(evaluate(resize_net(shape, size, mode), x))  # quant/resize_ref.py in float64
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    topi = relax.VirtualMachine(tvm.compile(resize_net(shape, size, mode), target=host.tvm_target()), tvm.cpu())
    np.testing.assert_allclose(out.numpy(), topi["main"](tvm.runtime.tensor(x)).numpy(), rtol=1e-6, atol=1e-6)


def test_compile_uses_the_kernel_and_keeps_other_modes_on_topi():
    host = get_target("host").tvm_target()
    fn = resize.legalize(simd_of(host))
    for method, mode, ours in (("linear", "half_pixel", True), ("nearest_neighbor", "asymmetric", False),
                               ("linear", "tf_half_pixel_for_nn", False)):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, 4, 4, 8), "float32"))
        with bb.function("main", [x]):
            call = relax.op.image.resize2d(x, (8, 8), layout="NHWC", method=method, coordinate_transformation_mode=mode)
            out = fn(bb, bb.normalize(call))
            bb.emit_func_output(bb.emit(out))
        names = [gv.name_hint for gv in bb.get().get_global_vars()]
        assert any(n.startswith("edge_resize") for n in names) == ours, (method, mode, names)


def test_resize_in_a_compiled_graph_on_host():
    mod = resize_net((1, 9, 7, 16), (18, 14), "half_pixel", with_convs=True)
    x = RNG.standard_normal((1, 9, 7, 16)).astype("float32")
    ref = np.asarray(evaluate(mod, x))
    np.testing.assert_allclose(run_host(mod, x), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.slow
@pytest.mark.qemu
def test_resize_in_a_compiled_graph_on_pi3_under_qemu():
    from test_float_fusions import run_pi3

    for shape, size, mode in (((1, 9, 7, 16), (18, 14), "half_pixel"), ((1, 5, 6, 12), (9, 4), "align_corners")):
        mod = resize_net(shape, size, mode, with_convs=True)
        x = RNG.standard_normal(shape).astype("float32")
        ref = np.asarray(evaluate(mod, x))
        np.testing.assert_allclose(run_pi3(mod, x), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
