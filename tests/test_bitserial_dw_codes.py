"""MobileNet's depthwise on packed codes in int16 (compiler/bitserial/dw3x3_codes_int16.py) against numpy: the
reference's float depthwise + bias + ReLU + quantize (quant/bitserial_net_ref), codes bit-exact, for 1-3 bit
activations, strides 1 and 2, whole layers and bands of one output row, on the host and for pi3 under qemu."""
import shutil

import numpy as np
import pytest

from edge_sdk.models.binarized import FloatDw, binarized_mobilenet_v1
from edge_sdk.quant.bitserial import pack_activations
from edge_sdk.quant.bitserial_net_ref import depthwise_values
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import dw3x3_codes_int16 as dwc  # noqa: E402

NET = dict(alpha=0.5, resolution=32, classes=10, seed=7, stem="int8")


def _layer(a_bits: int, index: int):
    net = binarized_mobilenet_v1(a_bits=a_bits, w_bits=1, **NET)
    d = net.blocks[index].dw
    ih, iw = (net.stem.out_shape if index == 0 else net.blocks[index - 1].pw.out_shape)[1:3]
    return net, d, (1, ih, iw, d.weight.shape[2])


def _reference(net, d, x) -> np.ndarray:
    qmax = (1 << net.a_bits) - 1
    y = depthwise_values(x * net.step, d.weight, stride=d.stride, pad=d.pad) + d.bias.astype(np.float64)
    return np.clip(np.floor(np.maximum(y, 0.0) / net.step + 0.5), 0, qmax).astype(np.int64)


def _case(a_bits, index, word, seed=0):
    net, d, shape = _layer(a_bits, index)
    x = np.random.default_rng(seed).integers(0, 1 << a_bits, shape)
    ints = dwc.integer_form(d, a_bits=a_bits, step=net.step)
    assert ints is not None
    func = dwc.dw3x3_codes_prim_func(pack_activations(x, bits=a_bits, word=word).shape, ints, stride=d.stride,
                                     pad=d.pad, a_bits=a_bits, word=word, lanes=8 if word == "uint16" else 16)
    return func, [pack_activations(x, bits=a_bits, word=word), ints.weight, ints.thresholds], \
        pack_activations(_reference(net, d, x), bits=a_bits, word=word)


def _run_host(func, args, expected):
    lib = tvm.compile(tvm.IRModule({"k": func.with_attr("global_symbol", "k")}), target="llvm")
    out = tvm.runtime.tensor(np.zeros(expected.shape, expected.dtype))
    lib["k"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in args], out)
    return out.numpy()


@pytest.fixture(params=[None, 1], ids=["whole-layer", "1-row-bands"])
def bands(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(dwc, "BAND_BYTES", request.param)
    return request.param


@pytest.mark.parametrize("a_bits", [1, 2, 3])
@pytest.mark.parametrize("index", [0, 1, 4], ids=["s1-16@16", "s2-32@16", "s1-128@4"])
def test_dw_codes_match_reference_on_host(a_bits, index, bands):
    func, args, expected = _case(a_bits, index, "uint8", seed=a_bits + index)
    np.testing.assert_array_equal(_run_host(func, args, expected), expected)


def test_integer_form_is_exact_or_refused():
    net, d, _ = _layer(2, 3)
    ints = dwc.integer_form(d, a_bits=2, step=net.step)
    # the integer thresholds reproduce the float quantizer at every reachable accumulator of one channel
    assert ints.weight.dtype == np.int16 and ints.thresholds.shape == (3, d.weight.shape[2])
    assert np.all(np.diff(ints.thresholds.astype(np.int64), axis=0) >= 0)
    off_grid = FloatDw(d.name, d.weight * np.float32(1.0 + 2.0 ** -20), d.bias, d.stride, d.pad, d.out_shape)
    assert dwc.integer_form(off_grid, a_bits=2, step=net.step) is None  # mantissas too wide for int16
    assert dwc.integer_form(d, a_bits=2, step=net.step * 3) is None  # a step that is not a power of two


@pytest.mark.qemu
@pytest.mark.parametrize("index", [1, 4], ids=["s2-32@16", "s1-128@4"])
def test_dw_codes_match_reference_under_qemu(index, monkeypatch):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tests.pi3_run import run_prim_func_on_pi3

    monkeypatch.setattr(dwc, "BAND_BYTES", 1)  # bands of one output row
    func, args, expected = _case(2, index, "uint16", seed=index)
    out = run_prim_func_on_pi3(func.with_attr("global_symbol", "dw_codes"), args, expected.shape, "uint16")
    np.testing.assert_array_equal(out, expected)
