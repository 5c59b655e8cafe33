"""A pad of the channel axis only (NHWC, BlazeFace's widened shortcut) as our vectorized copy
(compiler/ops/pad_channels.py), against numpy's np.pad: the kernel alone for channel counts whose common
vector width is 8, 4, 2 and 1, and in a compiled graph (depthwise -> pad -> add) on the host and on pi3 under
qemu against the numpy interpreter. face_detection_short_range (11 such pads) is checked against LiteRT in
test_trained_files.py. No speed is asserted here.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.compiler import lower
from edge_sdk.compiler.ops.common import simd_of
from edge_sdk.compiler.ops.pad_channels import channel_pad_kernel
from edge_sdk.quant.relax_ref import evaluate
from edge_sdk.targets import get_target

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("c,co,v,fill", [(24, 32, 8, 0.0), (36, 42, 2, 0.0), (28, 32, 4, -1.5), (5, 9, 1, 0.0)])
def test_channel_pad_kernel_matches_numpy(c, co, v, fill):
    host = get_target("host")
    rows = 37
    x = RNG.standard_normal((rows, c)).astype("float32")
    func = channel_pad_kernel(rows, c, co, v, fill, simd_of(host.tvm_target()), name="t_pad")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=host.tvm_target())
    out = tvm.runtime.tensor(np.zeros((rows, co // v, v), "float32"))
    lib["t_pad"](tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy().reshape(rows, co), np.pad(x, ((0, 0), (0, co - c)), constant_values=fill))


def blaze_net():
    """depthwise 3x3 on 24 channels, its input padded to 28 channels, the two summed after a 1x1 to 28."""
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, 10, 9, 24), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            d = bb.emit(relax.op.nn.conv2d(x, relax.const(RNG.standard_normal((3, 3, 1, 24)).astype("float32")),
                                           padding=1, groups=24, data_layout="NHWC", kernel_layout="HWIO"))
            z = bb.emit(relax.op.nn.conv2d(d, relax.const(RNG.standard_normal((1, 1, 24, 28)).astype("float32") * 0.2),
                                           data_layout="NHWC", kernel_layout="HWIO"))
            p = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 0, 0, 0, 4]))
            gv = bb.emit_output(bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(z, p)))))
        bb.emit_func_output(gv)
    return bb.get()


def test_channel_pad_in_a_compiled_graph_on_host():
    mod = blaze_net()
    host = get_target("host")
    ex, params = lower.compile_relax(mod, host)
    x = RNG.standard_normal((1, 10, 9, 24)).astype("float32")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    ref = np.asarray(evaluate(mod, x))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_only_channel_pads_are_rewritten():
    from edge_sdk.compiler.ops.pad_channels import pad_channels

    host = get_target("host").tvm_target()
    with host:
        mod = pad_channels(lower.prepare(blaze_net()), simd_of(host))
    names = [gv.name_hint for gv in mod.get_global_vars()]
    assert any(n.startswith("edge_pad_channels") for n in names)
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, 4, 4, 8), "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.op.nn.pad(x, [0, 0, 1, 1, 1, 1, 0, 0])))  # spatial: not ours
    assert [gv.name_hint for gv in pad_channels(bb.get(), simd_of(host)).get_global_vars()] == ["main"]


@pytest.mark.slow
@pytest.mark.qemu
def test_channel_pad_in_a_compiled_graph_on_pi3_under_qemu():
    from test_float_fusions import run_pi3

    mod = blaze_net()
    x = RNG.standard_normal((1, 10, 9, 24)).astype("float32")
    ref = np.asarray(evaluate(mod, x))
    np.testing.assert_allclose(run_pi3(mod, x), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
