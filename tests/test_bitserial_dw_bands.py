"""MobileNet's dequant -> float depthwise -> quantize+pack in bands of output rows (compiler/bitserial/graph.py
dw_packed: the float maps stay in L2) against the numpy network reference, codes exact: bands forced small
(one or two output rows, strided layers included) on the host and for pi3 under qemu. The float path is what
runs where the int16 depthwise on codes (graph.INT16_DEPTHWISE, tests/test_bitserial_dw_codes.py) is not exact;
here it is forced for every layer."""
import shutil

import numpy as np
import pytest

from edge_sdk.models.binarized import binarized_mobilenet_v1, golden_input
from edge_sdk.quant.bitserial_net_ref import run_reference
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import graph  # noqa: E402
from edge_sdk.compiler.bitserial.backend import compile_binarized  # noqa: E402

NET = dict(alpha=0.5, resolution=32, classes=10, seed=7, stem="int8")  # 16+ channels: the scheduled kernels


@pytest.fixture(params=[256, pytest.param(3000, marks=pytest.mark.slow)], ids=["1-row-bands", "wider-bands"])
def small_bands(request, monkeypatch):
    monkeypatch.setattr(graph, "INT16_DEPTHWISE", False)
    monkeypatch.setattr(graph, "DW_BAND_BYTES", request.param)
    return request.param


def _compiled(target, net):
    ex, params, rows = compile_binarized(net, target, glue="fused", output="codes")
    return ex, params, rows


def test_banded_depthwise_matches_reference_on_host(small_bands):
    from tvm import relax

    net = binarized_mobilenet_v1(a_bits=2, w_bits=1, **NET)
    x = golden_input(net.input_shape, seed=3)
    ref = run_reference(net, x, glue="fused")
    ex, params, rows = _compiled(get_target("host"), net)
    assert [r["op"] for r in rows].count("depthwise_conv2d") > 13  # some layers ran in bands
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    np.testing.assert_array_equal(out, ref.codes)


@pytest.mark.slow
@pytest.mark.qemu
def test_banded_depthwise_matches_reference_under_qemu(monkeypatch):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tests.pi3_run import run_executable_on_pi3

    monkeypatch.setattr(graph, "INT16_DEPTHWISE", False)
    monkeypatch.setattr(graph, "DW_BAND_BYTES", 256)
    net = binarized_mobilenet_v1(a_bits=2, w_bits=1, **NET)
    x = golden_input(net.input_shape, seed=4)
    ref = run_reference(net, x, glue="fused")
    ex, params, _ = _compiled(pi3, net)
    out = run_executable_on_pi3(ex, [x, *[params[k] for k in sorted(params)]])
    np.testing.assert_array_equal(out, ref.codes)
