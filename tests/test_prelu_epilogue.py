"""PRELU fused into the float kernels' epilogue (ops/common.Epilogue ("prelu",), the slopes after the biases
in the bias argument), against numpy: every candidate schedule of each kernel family (compile/choice/families
sites: GEMM loop orders and tiles, the direct conv, Winograd F(2x2) / F(4x4), depthwise channel orders) on the
host, and one graph that runs them all through the rewriter (ops/chain.py: conv / depthwise / 1x1 + residual,
each followed by relax.nn.prelu) on the host and on pi3 under qemu, against the numpy interpreter
(quant/relax_ref.py). The trained files with PRELU (face_landmark, iris_landmark, palm_detection_lite) are
checked against LiteRT in test_trained_files.py. No speed is asserted here.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.compiler import choice, lower
from edge_sdk.compiler.choice import families
from edge_sdk.compiler.ops.common import Epilogue, simd_of
from edge_sdk.quant.relax_ref import evaluate
from edge_sdk.targets import get_target
from test_float_fusions import run_host, run_prim

RNG = np.random.default_rng(21)
PRELU = Epilogue(("prelu",))


def slopes(c: int) -> np.ndarray:
    """Negative, zero, fractional and > 1 slopes: each branch of PRELU visible in the output."""
    return np.resize(np.array([0.25, -0.5, 0.0, 1.75, 0.1], "float32"), c) * RNG.uniform(0.5, 1.5, c).astype("float32")


def np_prelu(y: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.where(y >= 0, y, y * alpha.astype(np.float64))


def check_site(site, host, ref_fn, crop):
    """Each candidate schedule of the site built, run on the host and compared with ref_fn (numpy)."""
    xs = [s.random(RNG) for s in site.acts]
    ref = ref_fn(xs)
    names = choice.candidates(site.family, site.workload)
    assert len(names) >= 2
    for name in names:
        built = site.build(name, "t_prelu", xs)
        out = crop(run_prim(built.func, host, *built.args, out_shape=built.out.shape))
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()), err_msg=name)


@pytest.fixture(scope="module")
def host():
    return get_target("host")


@pytest.mark.parametrize("m,k,n,residual", [(37, 24, 20, True), (64, 32, 48, False)])
def test_gemm_prelu_every_schedule(host, m, k, n, residual):
    simd = simd_of(host.tvm_target())
    from edge_sdk.compiler.ops import conv2d as conv_ops

    nr = conv_ops.choose_nr(simd, m, n, k)
    w, b, alpha = RNG.standard_normal((k, n)).astype("float32"), RNG.standard_normal(n).astype("float32"), slopes(n)
    epi = Epilogue(("prelu",), residual)
    site = families.gemm_site(simd, m, w, np.stack([b, alpha]), epi, nr)

    def ref(xs):
        y = xs[0].astype(np.float64) @ w + b + (xs[1] if residual else 0)
        return np_prelu(y, alpha)

    check_site(site, host, ref, lambda o: o[:, :n])


@pytest.mark.parametrize("shape,co,strides,pad", [((1, 9, 11, 16), 24, (1, 1), (1, 1, 1, 1)),
                                                  ((1, 10, 7, 8), 13, (1, 1), (0, 0, 0, 0)),
                                                  ((1, 12, 12, 8), 16, (2, 2), (0, 0, 1, 1))])
def test_conv_prelu_every_schedule(host, shape, co, strides, pad):
    """3x3 convs: the direct conv both ways, and for stride 1 Winograd F(2x2) and F(4x4)."""
    simd = simd_of(host.tvm_target())
    w = (RNG.standard_normal((3, 3, shape[3], co)) / np.sqrt(9 * shape[3])).astype("float32")
    b, alpha = RNG.standard_normal(co).astype("float32"), slopes(co)
    site = families.conv_site(simd, shape, w, strides, pad, np.stack([b, alpha]), PRELU)
    check_site(site, host, lambda xs: np_prelu(families.np_conv(xs[0], w, strides, pad) + b, alpha),
               lambda o: o[..., :co])


def test_depthwise_prelu_every_schedule(host):
    simd = simd_of(host.tvm_target())
    shape, c = (1, 11, 13, 24), 24
    w, b, alpha = RNG.standard_normal((3, 3, c)).astype("float32"), RNG.standard_normal(c).astype("float32"), slopes(c)
    site = families.dw_site(simd, shape, w, (1, 1), (1, 1, 1, 1), np.stack([b, alpha]), PRELU, 1)

    def ref(xs):
        xp = np.pad(xs[0].astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
        y = sum(xp[:, i:i + 11, j:j + 13, :] * w[i, j] for i in range(3) for j in range(3))
        return np_prelu(y + b, alpha)

    check_site(site, host, ref, lambda o: o)


def prelu_net():
    """conv 3x3 + bias -> PRELU -> depthwise 3x3 -> PRELU -> 1x1 conv + the depthwise's input -> PRELU ->
    3x3 stride-2 conv -> PRELU (the shapes of mediapipe's landmark blocks, small)."""
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, 14, 14, 8), "float32"))

    def conv(y, w, **kw):
        return bb.emit(relax.op.nn.conv2d(y, relax.const(w), data_layout="NHWC", kernel_layout="HWIO", **kw))

    def prelu(y, c):
        return bb.emit(relax.op.nn.prelu(y, relax.const(slopes(c)), axis=3))

    with bb.function("main", [x]):
        with bb.dataflow():
            y = conv(x, RNG.standard_normal((3, 3, 8, 16)).astype("float32") * 0.2, padding=1)
            y = prelu(bb.emit(relax.op.add(y, relax.const(RNG.standard_normal(16).astype("float32")))), 16)
            d = conv(y, RNG.standard_normal((3, 3, 1, 16)).astype("float32") * 0.3, padding=1, groups=16)
            d = prelu(d, 16)
            z = conv(d, RNG.standard_normal((1, 1, 16, 16)).astype("float32") * 0.25)
            z = prelu(bb.emit(relax.op.add(z, y)), 16)
            z = prelu(conv(z, RNG.standard_normal((3, 3, 16, 24)).astype("float32") * 0.1, strides=2,
                           padding=1), 24)
            gv = bb.emit_output(z)
        bb.emit_func_output(gv)
    return bb.get()


def test_rewriter_fuses_every_prelu(host):
    """No relax.nn.prelu is left for TVM's default loops: each one is its producer kernel's epilogue."""
    mod = prelu_net()
    with host.tvm_target():
        mod, counts = lower.rewrite_kernels(lower.prepare(mod), host.tvm_target())
    left = []
    relax.analysis.post_order_visit(mod["main"], lambda e: left.append(e.op.name) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.prelu") else None)
    assert left == [] and counts == {"conv": 3, "dw": 1}


def test_prelu_net_on_host():
    mod = prelu_net()
    x = RNG.standard_normal((1, 14, 14, 8)).astype("float32")
    ref = np.asarray(evaluate(mod, x))
    np.testing.assert_allclose(run_host(mod, x), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.slow
@pytest.mark.qemu
def test_prelu_net_on_pi3_under_qemu():
    from test_float_fusions import run_pi3

    mod = prelu_net()
    x = RNG.standard_normal((1, 14, 14, 8)).astype("float32")
    ref = np.asarray(evaluate(mod, x))
    np.testing.assert_allclose(run_pi3(mod, x), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
