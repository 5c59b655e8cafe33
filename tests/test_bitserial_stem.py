"""The integer stem of the binarized networks (bitserial/stem.py, models/binarized.py, bitserial_net_ref).

Checked against plain numpy written here (int64 loops over the kernel taps, the fixed-point requantize
spelled out), not against quant/int8.py, which the reference itself uses.
"""
import dataclasses

import numpy as np
import pytest

from edge_sdk.errors import ModelError
from edge_sdk.models.binarized import binarized_mobilenet_v1, binarized_resnet18, golden_input
from edge_sdk.quant import bitserial_net_ref as ref

RNG = np.random.default_rng(77)


def _net(ab=2, wb=1, **kw):
    # the integer stem is what this file tests (the default, models/binarized.py DEFAULT_STEM; named here)
    return binarized_resnet18(a_bits=ab, w_bits=wb, **(dict(alpha=0.25, resolution=32, classes=10, seed=5,
                                                            stem="int8") | kw))


# ---- plain numpy, independent of quant/int8.py --------------------------------------------------

def plain_quantize_input(x, scale):
    v = np.asarray(x, np.float64) / scale
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)  # half away from zero
    return np.clip(r, -128, 127).astype(np.int64)


def plain_conv_int(xq, w, *, stride, pad):
    """NHWC int64 conv, w HWIO int64, zero padding (top, left, bottom, right), loops over the taps."""
    t, l, b, r = pad
    xp = np.pad(xq, ((0, 0), (t, b), (l, r), (0, 0)))
    kh, kw, _, co = w.shape
    oh, ow = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    acc = np.zeros((xq.shape[0], oh, ow, co), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            win = xp[:, ky:ky + stride * (oh - 1) + 1:stride, kx:kx + stride * (ow - 1) + 1:stride, :]
            acc += np.einsum("nhwc,co->nhwo", win, w[ky, kx])
    return acc


def plain_requantize(acc, mult, shift, qmax):
    """round(acc * mult / 2^31) to nearest, then divide by 2^-shift rounding half away from zero (TFLite's
    two roundings for a positive multiplier and a right shift), clamp [0, qmax]."""
    h = (acc * mult + (1 << 30)) >> 31  # floor: the SRDHM nudge for b > 0
    rs = -shift
    half = np.where(rs > 0, np.int64(1) << np.maximum(rs - 1, 0), 0)
    mag = (np.abs(h) + half) >> rs
    return np.clip(np.sign(h) * mag, 0, qmax)


def plain_max_pool(codes, *, k, stride, pad):
    t, l, b, r = pad
    xp = np.pad(codes, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=-1)
    oh, ow = (xp.shape[1] - k) // stride + 1, (xp.shape[2] - k) // stride + 1
    out = np.full((codes.shape[0], oh, ow, codes.shape[3]), -1, np.int64)
    for y in range(oh):
        for x in range(ow):
            out[:, y, x] = xp[:, y * stride:y * stride + k, x * stride:x * stride + k].max(axis=(1, 2))
    return out


def plain_stem(net, x, *, pool=True):
    s = net.stem
    acc = plain_conv_int(plain_quantize_input(x, s.in_scale), s.qweight.astype(np.int64), stride=s.stride, pad=s.pad)
    codes = plain_requantize(acc + s.qbias, s.mult, s.shift, (1 << net.a_bits) - 1)
    return plain_max_pool(codes, k=s.pool, stride=s.pool_stride, pad=s.pool_pad) if pool and s.pool else codes


# ---- the model's integer stem ---------------------------------------------------------------------

def test_int8_stem_params_and_reference_match_plain_numpy():
    for ab in (1, 2, 3):
        net = _net(ab)
        s = net.stem
        assert s.integer and s.qweight.dtype == np.int8 and np.abs(s.qweight).max() == 127
        assert s.qbias.dtype == np.int32 and np.all(s.shift <= 0) and np.all(s.mult >= 1 << 30)
        # the requantize multiplier is in_scale * w_scale / step, to TFLite's 31-bit precision
        m = s.mult * np.exp2(s.shift.astype(np.float64) - 31)
        np.testing.assert_allclose(m, s.in_scale * s.w_scale / net.step, rtol=2 ** -30)
        for x in (golden_input(net.input_shape, seed=3), RNG.uniform(-1.2, 1.2, net.input_shape).astype(np.float32)):
            np.testing.assert_array_equal(ref.stem_codes(net, x), plain_stem(net, x))


def test_golden_input_is_exact_in_int8_and_one_saturates():
    net = _net()
    x = golden_input(net.input_shape, seed=0)
    q = plain_quantize_input(x, net.stem.in_scale)
    np.testing.assert_array_equal(q * net.stem.in_scale, x)
    assert plain_quantize_input(np.array([1.0, -1.0]), net.stem.in_scale).tolist() == [127, -128]


def test_float_stem_still_selectable_and_close():
    x = golden_input((1, 32, 32, 3), seed=4)
    i8, f32 = _net(stem="int8"), _net(stem="float32")
    assert not f32.stem.integer
    a, b = ref.stem_codes(i8, x), ref.stem_codes(f32, x)
    assert a.shape == b.shape and np.mean(a != b) < 0.05 and np.abs(a - b).max() <= 1
    with pytest.raises(ModelError, match="stem 'int4'"):
        _net(stem="int4")


def test_max_pool_commutes_with_the_requantizer():
    """q is monotone non-decreasing per channel, so max(q(a), q(b)) == q(max(a, b)): pooling codes (what
    the compiled stem does) equals quantizing the pooled accumulators (the float stem's order)."""
    net = _net(2)
    s = net.stem
    c = s.qweight.shape[3]
    ramp = np.arange(-(1 << 20), 1 << 20, 37, dtype=np.int64)[:, None] + np.zeros((1, c), np.int64)
    q = ref.int8_stem_requantize(s, ramp, a_bits=2)
    assert np.all(np.diff(q, axis=0) >= 0)  # monotone on a dense ramp, every channel
    scale = np.ceil(net.step / (s.in_scale * s.w_scale)).astype(np.int64)  # about one code step
    acc = RNG.integers(-3, 6, (1, 16, 16, c)) * scale + RNG.integers(-2, 3, (1, 16, 16, c))  # many ties
    k = dict(k=3, stride=2, pad=(0, 0, 1, 1))
    pooled_codes = plain_max_pool(ref.int8_stem_requantize(s, acc, a_bits=2), **k)
    codes_of_pooled = ref.int8_stem_requantize(s, plain_max_pool(acc, **k), a_bits=2)
    np.testing.assert_array_equal(pooled_codes, codes_of_pooled)
    assert len(np.unique(pooled_codes)) == 4


@pytest.mark.parametrize("ab", [1, 2, 3])
def test_code_thresholds_equal_the_requantizer(ab):
    """The pi3 stem's codes by compares (bitserial/stem_conv_codes_gemm8): code >= j iff the biased accumulator
    reaches T_j, at every accumulator of a dense ramp around each threshold, every channel; refused when the
    multiplier is not positive (the requantizer is then not non-decreasing)."""
    from edge_sdk.compiler.bitserial.stem_conv_codes_gemm8 import code_thresholds

    s = _net(ab).stem
    t = code_thresholds(s.mult, s.shift, ab)
    assert t.shape == ((1 << ab) - 1, s.qweight.shape[3])
    near = (t[:, None, :] + np.arange(-40, 41)[None, :, None]).reshape(-1, t.shape[1])
    ramp = np.concatenate([near, np.arange(-(1 << 20), 1 << 20, 997)[:, None] + np.zeros((1, t.shape[1]), np.int64)])
    by_compare = (ramp[None] >= t[:, None, :]).sum(axis=0)
    np.testing.assert_array_equal(by_compare, ref.int8_stem_requantize(s, ramp, a_bits=ab))
    assert code_thresholds(-np.asarray(s.mult), s.shift, ab) is None


# ---- compiled -------------------------------------------------------------------------------------

tvm = pytest.importorskip("tvm")


def _compile_stem(net, target, out, simd=None):
    from tvm import relax

    from edge_sdk.compiler.lower import compile_relax
    from edge_sdk.compiler.bitserial.schedule import network_word
    from edge_sdk.compiler.bitserial.stem import emit_int8_stem
    from edge_sdk.compiler.ops.common import simd_of

    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType(net.input_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v, _ = emit_int8_stem(bb, x, net, simd=simd or simd_of(target.tvm_target()),
                                  word=network_word(target.arch), out=out)
            gv = bb.emit_output(v)
        bb.emit_func_output(gv)
    return compile_relax(bb.get(), target)


def _run(ex, params, x):
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()


@pytest.mark.parametrize("res,ab", [(32, 2), (30, 1), (29, 3)])
def test_compiled_int8_conv_and_pool_equal_plain_numpy(res, ab):
    """The int8 conv with its code epilogue (pool off), and conv + pool, against plain numpy; odd sizes
    exercise the asymmetric SAME padding of conv and pool."""
    from edge_sdk.targets import get_target

    host = get_target("host")
    net = _net(ab, resolution=res)
    x = RNG.uniform(-1.1, 1.1, net.input_shape).astype(np.float32)  # off the grid: the stem is exact anyway
    no_pool = dataclasses.replace(net, stem=dataclasses.replace(net.stem, pool=0))
    np.testing.assert_array_equal(_run(*_compile_stem(no_pool, host, "codes"), x), plain_stem(net, x, pool=False))
    np.testing.assert_array_equal(_run(*_compile_stem(net, host, "codes"), x), plain_stem(net, x))


@pytest.mark.qemu
@pytest.mark.parametrize("res,ab,pool", [(32, 2, True), (64, 3, False), (30, 1, True)])
def test_pi3_stem_equals_plain_numpy_under_qemu(res, ab, pool):
    """The aarch64 stem (the int8 backend's conv: pre-padded im2col rows, the 8-bit A53 tile in assembly) under
    qemu -cpu cortex-a53, codes with and without the pool, against plain numpy (30: a width the tile's
    4-pixel rows do not divide)."""
    import shutil

    from edge_sdk.targets import get_target
    from tests.pi3_run import run_executable_on_pi3

    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    net = _net(ab, resolution=res)
    if not pool:
        net = dataclasses.replace(net, stem=dataclasses.replace(net.stem, pool=0))
    x = RNG.uniform(-1.1, 1.1, net.input_shape).astype(np.float32)
    ex, params = _compile_stem(net, pi3, "codes")
    got = run_executable_on_pi3(ex, [x, *[params[k] for k in sorted(params)]])
    np.testing.assert_array_equal(got, plain_stem(net, x, pool=pool))


def test_compiled_packed_stem_unpacks_to_the_codes():
    from edge_sdk.quant.bitserial import bitunpack
    from edge_sdk.targets import get_target

    host = get_target("host")
    net = _net(2)
    x = golden_input(net.input_shape, seed=8)
    p = _run(*_compile_stem(net, host, "packed"), x)
    codes = bitunpack(p, length=net.stem.out_shape[3], pack_axis=3, bit_axis=4)
    np.testing.assert_array_equal(codes, plain_stem(net, x))


def test_compiled_mobilenet_stem_values():
    from edge_sdk.targets import get_target

    net = binarized_mobilenet_v1(a_bits=2, w_bits=1, alpha=0.25, resolution=32, classes=10, seed=5, stem="int8")
    x = golden_input(net.input_shape, seed=9)
    got = _run(*_compile_stem(net, get_target("host"), "values"), x)
    np.testing.assert_array_equal(got, plain_stem(net, x) * net.step)
