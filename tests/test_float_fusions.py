"""The float kernels and fusions MobileNetV3 / EfficientNet need (issue 14 item 3), against numpy.

- activations in the epilogue (ops/activation.py): sigmoid, swish, hard-swish with our own exp;
- depthwise on channel counts that are not a power of two times the vector (24, 72, 120: the step is
  the largest power of two dividing them), 5x5, 7x7 and stride 2, odd channels;
- squeeze-excite's gate folded into the 1x1 conv's GEMM, scaling the weights or the input rows;
- the rewriter finding swish / hard-swish / hard-sigmoid / the gate in the forms the TFLite and ONNX
  importers write, checked against the numpy interpreter (quant/relax_ref.py) on the host and, for
  one graph that runs every new kernel, on pi3 under qemu.
No speed is asserted here (benchmarks: tools/bench_float.py, edge-sdk bench --peers).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax, te

from edge_sdk.compiler import lower
from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops.activation import activate, exp_approx
from edge_sdk.compiler.ops.common import Epilogue, simd_of, vector_width
from edge_sdk.compiler.ops.depthwise import depthwise_conv2d
from edge_sdk.quant.relax_ref import evaluate
from edge_sdk.targets import get_target

RNG = np.random.default_rng(14)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def np_act(v, act):
    v = v.astype("float64")
    sig = 1.0 / (1.0 + np.exp(-v))
    return {"none": v, "relu": np.maximum(v, 0), "sigmoid": sig, "swish": v * sig,
            "hswish": v * np.clip(v + 3, 0, 6) / 6}[act[0]] if act[0] != "clip" else np.clip(v, act[1], act[2])


def close(out, ref, tol=1e-4):
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))


def run_prim(func, target, *arrays, out_shape):
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm_target())
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib[func.attrs["global_symbol"]](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


@pytest.fixture(scope="module")
def host():
    return get_target("host")


# -- activations ----------------------------------------------------------------------------------
def test_exp_approx_is_within_a_few_ulp_over_the_float_range(host):
    xs = np.concatenate([np.linspace(-87, 88, 20001), RNG.standard_normal(4096) * 4]).astype("float32")
    x = te.placeholder(xs.shape, "float32", name="X")
    y = te.compute(xs.shape, lambda i: exp_approx(x[i]), name="Y")
    out = run_prim(te.create_prim_func([x, y]).with_attr("global_symbol", "t_exp"), host, xs, out_shape=xs.shape)
    ref = np.exp(xs.astype("float64"))
    assert float(np.max(np.abs(out - ref) / ref)) < 1e-6


@pytest.mark.parametrize("act,isa", [(("sigmoid",), None), (("swish",), None), (("hswish",), None),
                                     (("clip", -0.5, 2.5), None), (("sigmoid",), "neon"), (("swish",), "neon")])
def test_activation_matches_numpy(host, act, isa):
    """isa "neon": the divide-free form (a Newton reciprocal) the pi3 kernels use, evaluated here."""
    xs = np.concatenate([np.linspace(-100, 100, 4001), [-3, 3, 0, -1e-3, 1e-3]]).astype("float32")
    x = te.placeholder(xs.shape, "float32", name="X")
    y = te.compute(xs.shape, lambda i: activate(x[i], act, isa), name="Y")
    out = run_prim(te.create_prim_func([x, y]).with_attr("global_symbol", "t_act"), host, xs, out_shape=xs.shape)
    np.testing.assert_allclose(out, np_act(xs, act), rtol=1e-6, atol=1e-6)


# -- depthwise -----------------------------------------------------------------------------------
def ref_dw(x, w, b, strides, pad):
    """x (N,H,W,C), w (KH,KW,C), pad (top, left, bottom, right); float64."""
    xp = np.pad(x.astype("float64"), ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0)))
    kh, kw, _ = w.shape
    sh, sw = strides
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i:i + sh * oh:sh, j:j + sw * ow:sw, :] * w[i, j]
    return out + b


def same(size, k, s):
    total = max((-(-size // s) - 1) * s + k - size, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("shape,k,s,act", [
    ((1, 7, 7, 120), 5, 1, ("hswish",)),    # 120 = 8 x 15: 8-wide steps
    ((1, 15, 13, 72), 5, 2, ("relu",)),     # stride 2, odd sizes, SAME asymmetric
    ((1, 9, 9, 24), 3, 2, ("swish",)),
    ((1, 11, 11, 13), 7, 1, ("swish",)),    # odd channels: scalar steps
    ((1, 7, 7, 40), 7, 2, ("none",)),
])
def test_depthwise_remainders_match_numpy(host, shape, k, s, act):
    check_depthwise(shape, k, s, act, lambda f, *a, out_shape: run_prim(f, host, *a, out_shape=out_shape),
                    simd_of(host.tvm_target()))


# wide tiles: the channel blocks go outside the pixels (depthwise._channels_outer); 5x5 stride 1 with a
# pixel tail, 3x3 stride 2 with odd sizes
DW_CHANNELS_OUTER = [((1, 9, 10, 240), 5, 1, ("swish",)), ((1, 11, 9, 200), 3, 2, ("hswish",))]


@pytest.mark.parametrize("shape,k,s,act", DW_CHANNELS_OUTER)
def test_depthwise_channels_outer_matches_numpy(host, shape, k, s, act):
    check_depthwise(shape, k, s, act, lambda f, *a, out_shape: run_prim(f, host, *a, out_shape=out_shape),
                    simd_of(host.tvm_target()))


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("shape,k,s,act", DW_CHANNELS_OUTER + [((1, 15, 13, 72), 5, 2, ("relu",))])
def test_depthwise_on_pi3_under_qemu_matches_numpy(shape, k, s, act):
    check_depthwise(shape, k, s, act, lambda f, *a, out_shape: run_prim_pi3(f, list(a), out_shape),
                    simd_of(get_target("pi3").tvm_target()))


def check_depthwise(shape, k, s, act, run, simd):
    pt, pb = same(shape[1], k, s)
    pl, pr = same(shape[2], k, s)
    x, w, b = rand(*shape), rand(k, k, shape[3]), rand(shape[3])
    func = depthwise_conv2d(shape, (k, k), (s, s), (pt, pl, pb, pr), simd, epi=Epilogue(act), name="t_dw")
    ref = np_act(ref_dw(x, w, b, (s, s), (pt, pl, pb, pr)), act)
    close(run(func, x, w, b, out_shape=ref.shape), ref)


def test_vector_width_is_a_power_of_two_dividing_the_channels():
    assert [vector_width(c, 32) for c in (120, 72, 184, 672, 13, 96)] == [8, 8, 8, 32, 1, 32]
    assert vector_width(200, 8) == 8 and vector_width(6, 8) == 2


# -- squeeze-excite gate in the GEMM -------------------------------------------------------------
@pytest.mark.parametrize("m,k,n,act,residual", [
    (100, 24, 40, ("none",), True),     # padded N <= M: the weights are scaled
    (9, 37, 96, ("hswish",), False),    # M < N: the input rows are scaled, K odd
    (1, 20, 13, ("sigmoid",), False),   # a lone row
])
def test_gated_gemm_matches_numpy(host, m, k, n, act, residual):
    simd = simd_of(host.tvm_target())
    nr = conv_ops.choose_nr(simd, m, n)
    a, w, b, g = rand(m, k), rand(k, n), rand(n), RNG.uniform(0, 1, k).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    r = rand(m, npad)
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(act, residual, gate=True), nr=nr, name="t_gated")
    args = [a, wp, conv_ops.pad_bias(b, npad), g] + ([r] if residual else [])
    out = run_prim(func, host, *args, out_shape=(m, npad))[:, :n]
    ref = (a.astype("float64") * g) @ w + b + (r[:, :n] if residual else 0)
    close(out, np_act(ref, act))


# -- the rewriter on importer-shaped graphs ------------------------------------------------------
class Net:
    """A small NHWC Relax graph written op by op as the TFLite / ONNX importers write them."""

    def __init__(self, shape):
        self.bb = relax.BlockBuilder()
        self.x = relax.Var("input", relax.TensorType(shape, "float32"))
        self.shape = shape

    def const(self, arr):
        return relax.const(np.asarray(arr, "float32"))

    def emit(self, expr):
        return self.bb.emit(expr)

    def conv(self, x, cout, k, s=1, *, depthwise=False):
        cin = int(x.ty.shape[3])
        w = rand(k, k, 1 if depthwise else cin, cin if depthwise else cout, scale=1.0 / np.sqrt(k * k * cin))
        h, wd = int(x.ty.shape[1]), int(x.ty.shape[2])
        pt, pb = same(h, k, s)
        pl, pr = same(wd, k, s)
        y = self.emit(relax.op.nn.conv2d(x, self.const(w), strides=s, padding=(pt, pl, pb, pr),
                                         groups=cin if depthwise else 1, data_layout="NHWC",
                                         kernel_layout="HWIO"))
        return self.emit(relax.op.add(y, self.const(rand(1, 1, 1, cin if depthwise else cout, scale=0.3))))

    def swish(self, x):
        return self.emit(relax.op.multiply(x, self.emit(relax.op.sigmoid(x))))

    def hswish_tflite(self, x):  # the TFLite frontend's HARD_SWISH: x * relu6(x + 3) / 6
        c = self.emit(relax.op.clip(self.emit(relax.op.add(x, self.const(3.0))), 0, 6))
        return self.emit(relax.op.divide(self.emit(relax.op.multiply(x, c)), self.const(6.0)))

    def hswish_onnx(self, x):  # the ONNX frontend's HardSwish: x * (clip(x + 3, 0, 6) / 6)
        c = self.emit(relax.op.clip(self.emit(relax.op.add(x, self.const(3.0))), 0, 6))
        return self.emit(relax.op.multiply(x, self.emit(relax.op.divide(c, self.const(6.0)))))

    def se(self, x, squeeze, gate):
        """mean -> 1x1 conv -> relu/swish -> 1x1 conv -> gate -> broadcast multiply."""
        p = self.emit(relax.op.mean(x, axis=[1, 2], keepdims=True))
        h = self.conv(p, squeeze, 1)
        h = self.swish(h) if gate == "sigmoid" else self.emit(relax.op.nn.relu(h))
        g = self.conv(h, int(x.ty.shape[3]), 1)
        if gate == "sigmoid":
            g = self.emit(relax.op.sigmoid(g))
        elif gate == "hsigmoid_tflite":  # +3 folds into the bias; relu6, then * 1/6
            g = self.emit(relax.op.multiply(self.emit(relax.op.clip(
                self.emit(relax.op.add(g, self.const(3.0))), 0, 6)), self.const(1 / 6)))
        else:  # ONNX HardSigmoid: clip(alpha x + beta, 0, 1)
            g = self.emit(relax.op.clip(self.emit(relax.op.add(
                self.emit(relax.op.multiply(self.const(1 / 6), g)), self.const(0.5))), 0, 1))
        return self.emit(relax.op.multiply(x, g))

    def module(self, body):
        with self.bb.function("main", [self.x]):
            with self.bb.dataflow():
                out = body(self)
                gv = self.bb.emit_output(out)
            self.bb.emit_func_output(gv)
        return self.bb.get()


def mbconv_swish(net):
    """EfficientNet-style: stem 3x3/2 + swish, expand 1x1 + swish, 5x5/2 depthwise + swish,
    squeeze-excite with sigmoid, project 1x1, then a second block with a residual add."""
    x = net.swish(net.conv(net.x, 16, 3, 2))
    x = net.swish(net.conv(x, 40, 1))
    x = net.swish(net.conv(x, 40, 5, 2, depthwise=True))
    x = net.conv(net.se(x, 10, "sigmoid"), 24, 1)
    y = net.swish(net.conv(x, 72, 1))
    y = net.swish(net.conv(y, 72, 3, 1, depthwise=True))
    y = net.conv(net.se(y, 18, "sigmoid"), 24, 1)
    return net.emit(relax.op.add(x, y))


def mbconv_hswish(net):
    """MobileNetV3-style, both hard-swish and both hard-sigmoid forms, odd channels, 7x7 depthwise."""
    x = net.hswish_tflite(net.conv(net.x, 16, 3, 2))
    x = net.hswish_onnx(net.conv(x, 120, 1))
    x = net.hswish_tflite(net.conv(x, 120, 5, 1, depthwise=True))
    x = net.conv(net.se(x, 32, "hsigmoid_tflite"), 40, 1)
    y = net.hswish_onnx(net.conv(x, 21, 1))
    y = net.emit(relax.op.nn.relu(net.conv(y, 21, 7, 2, depthwise=True)))
    y = net.conv(net.se(y, 8, "hsigmoid_onnx"), 40, 1)
    return net.emit(relax.op.mean(y, axis=[1, 2], keepdims=False))


GRAPHS = {"swish": (mbconv_swish, (1, 31, 29, 3)), "hswish": (mbconv_hswish, (1, 28, 28, 3))}


def leftover_ops(mod, target):
    """High-level ops still in main after our rewriter (what was not fused into a kernel)."""
    with target.tvm_target():
        out, _ = lower.rewrite_kernels(lower.prepare(mod), target.tvm_target())
    ops = []
    relax.analysis.post_order_visit(out["main"], lambda e: ops.append(e.op.name) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name != "relax.call_tir") else None)
    return ops


@pytest.mark.parametrize("name", GRAPHS)
def test_activations_and_gates_fold_into_kernels(host, name):
    build, shape = GRAPHS[name]
    left = leftover_ops(Net(shape).module(build), host)
    for op in ("relax.sigmoid", "relax.clip", "relax.multiply", "relax.divide", "relax.nn.relu", "relax.mean"):
        assert op not in left, (op, left)


@pytest.mark.slow
@pytest.mark.parametrize("name", GRAPHS)
def test_fused_graph_matches_numpy_reference(host, name):
    build, shape = GRAPHS[name]
    mod = Net(shape).module(build)
    x = RNG.uniform(-1, 1, shape).astype("float32")
    close(run_host(mod, x), np.asarray(evaluate(mod, x)))


def run_host(mod, x):
    """mod compiled for the host and run once in the Relax VM, its params in name order."""
    ex, params = lower.compile_relax(mod, get_target("host"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()


def run_pi3(mod, x):
    """mod compiled for pi3, cross-built and run once by our runner under qemu-aarch64 -cpu cortex-a53."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    ex, params = lower.compile_relax(mod, pi3)
    with tempfile.TemporaryDirectory() as d:
        lib, pfile = Path(d) / "m.so", Path(d) / "params.bin"
        ex.export_library(str(lib), fcompile=pi3.compiler())
        tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
        res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53",
                           how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    return res.output


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("name", GRAPHS)
def test_fused_graph_on_pi3_under_qemu_matches_numpy_reference(name):
    """The NEON schedules (4 lanes: other vector steps and register tiles) of every new kernel."""
    build, shape = GRAPHS[name]
    mod = Net(shape).module(build)
    x = RNG.uniform(-1, 1, shape).astype("float32")
    close(run_pi3(mod, x), np.asarray(evaluate(mod, x)))


def nchw_hswish_net():
    """An ONNX-shaped NCHW graph: conv, Hardswish (x * clip(x + 3, 0, 6) / 6), conv, ReLU6 as Clip, conv."""
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, 5, 11, 9), "float32"))
    w1, w2, w3 = rand(12, 5, 3, 3, scale=0.3), rand(7, 12, 1, 1, scale=0.3), rand(3, 7, 1, 1, scale=0.3)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(w1), strides=2, padding=1))
            c = bb.emit(relax.op.clip(bb.emit(relax.op.add(y, relax.const(np.float32(3.0)))), 0, 6))
            y = bb.emit(relax.op.multiply(y, bb.emit(relax.op.divide(c, relax.const(np.float32(6.0))))))
            y = bb.emit(relax.op.clip(bb.emit(relax.op.nn.conv2d(y, relax.const(w2))), 0, 6))
            gv = bb.emit_output(bb.emit(relax.op.nn.conv2d(y, relax.const(w3))))
        bb.emit_func_output(gv)
    return bb.get()


def test_nchw_activations_lose_their_transposes_and_fold(host):
    left = leftover_ops(nchw_hswish_net(), host)
    assert "relax.clip" not in left and "relax.multiply" not in left, left
    assert left.count("relax.permute_dims") == 2, left  # the input's and the output's only


@pytest.mark.slow
def test_nchw_graph_matches_numpy_reference(host):
    mod = nchw_hswish_net()
    x = RNG.uniform(-1, 1, (1, 5, 11, 9)).astype("float32")
    ex, params = lower.compile_relax(mod, host)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    close(out, np.asarray(evaluate(mod, x)))


# -- GEMM register tiles ----------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n", [(1, 50, 1000), (1, 33, 24), (37, 24, 72), (20, 120, 40)])
def test_chosen_gemm_tile_matches_numpy(host, m, k, n):
    """The tile choose_nr picks (a lone row: up to 4 vectors, a power of two; AVX: half, one or two
    vectors by cost, so 72 channels from 24 take 8-wide tiles and need no slice) computes the GEMM."""
    simd = simd_of(host.tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    assert nr % max(1, simd.lanes // 2) == 0 and (nr // simd.lanes) in (0, 1, 2, 4)
    a, w, b = rand(m, k), rand(k, n), rand(n)
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(("relu",)), nr=nr, name="t_tile")
    out = run_prim(func, host, a, wp, conv_ops.pad_bias(b, npad), out_shape=(m, npad))[:, :n]
    close(out, np.maximum(a.astype("float64") @ w + b, 0))


# -- an input Rescaling / Normalization folded into the stem conv -------------------------------
def stem_net(explicit_pad: bool):
    """x * s + t per RGB channel (Keras Rescaling + Normalization), then a 3x3 stride-2 conv with
    SAME padding (MobileNetV3) or ZeroPadding2D + VALID (EfficientNet): the border must read the
    value the affine maps to 0, -t / s, once the affine is in the weights."""
    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, 15, 14, 3), "float32"))
    w = rand(3, 3, 3, 8)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.multiply(x, relax.const(np.array([0.5, -2.0, 4.0], "float32"))))
            y = bb.emit(relax.op.subtract(y, relax.const(np.array([[[[1.0, -0.5, 3.0]]]], "float32"))))
            if explicit_pad:
                y = bb.emit(relax.op.nn.pad(y, [0, 0, 0, 1, 0, 1, 0, 0]))
            pad = (0, 0, 0, 0) if explicit_pad else (0, 0, 1, 1)
            y = bb.emit(relax.op.nn.conv2d(y, relax.const(w), strides=2, padding=pad, data_layout="NHWC",
                                           kernel_layout="HWIO"))
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


@pytest.mark.parametrize("explicit_pad", [False, True])
def test_input_affine_folds_into_the_stem_conv(host, explicit_pad):
    mod = stem_net(explicit_pad)
    left = leftover_ops(mod, host)
    assert not {"relax.multiply", "relax.subtract", "relax.nn.pad"} & set(left), left
    x = RNG.uniform(0, 255, (1, 15, 14, 3)).astype("float32")
    ex, params = lower.compile_relax(mod, host)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    close(out, np.asarray(evaluate(mod, x)))


@pytest.mark.slow
@pytest.mark.qemu
def test_stem_with_folded_input_affine_on_pi3_under_qemu():
    mod = stem_net(False)
    x = RNG.uniform(0, 255, (1, 15, 14, 3)).astype("float32")
    close(run_pi3(mod, x), np.asarray(evaluate(mod, x)))


def run_prim_pi3(func, arrays, out_shape):
    """One PrimFunc called from a Relax main (input, p0000, ...), run on pi3 under qemu."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from pi3_run import run_executable_on_pi3

    name = func.attrs["global_symbol"]
    bb = relax.BlockBuilder()
    xv = relax.Var("input", relax.TensorType(arrays[0].shape, "float32"))
    pv = [relax.Var(f"p{i:04d}", relax.TensorType(a.shape, "float32")) for i, a in enumerate(arrays[1:])]
    with bb.function("main", [xv, *pv]):
        gv = bb.add_func(func, name)
        bb.emit_func_output(bb.emit(relax.call_tir(gv, [xv, *pv], relax.TensorType(out_shape, "float32"))))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    return run_executable_on_pi3(ex, arrays)


# rows outer with the row tile packed (K > 64); weight panels blocked over all rows; gated (weights, then
# the packed input rows)
PI3_GEMMS = [(37, 72, 24, False), (150, 112, 320, False), (61, 120, 40, True), (9, 72, 40, True)]


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("m,k,n,gate", PI3_GEMMS)
def test_gemm_tile_orders_on_pi3_under_qemu(m, k, n, gate):
    simd = simd_of(get_target("pi3").tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    a, w, b, g = rand(m, k), rand(k, n), rand(n), RNG.uniform(0, 1, k).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(("hswish",), gate=gate), nr=nr, name="t_pi3_gemm")
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([g] if gate else [])
    out = run_prim_pi3(func, args, (m, npad))[:, :n]
    close(out, np_act((a.astype("float64") * (g if gate else 1)) @ w + b, ("hswish",)))


@pytest.mark.parametrize("m,k,n,gate", PI3_GEMMS + [(200, 112, 672, False)])
def test_gemm_tile_orders_on_host(host, m, k, n, gate):
    simd = simd_of(host.tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    a, w, b, g = rand(m, k), rand(k, n), rand(n), RNG.uniform(0, 1, k).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(("hswish",), gate=gate), nr=nr, name="t_host_gemm")
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([g] if gate else [])
    out = run_prim(func, host, *args, out_shape=(m, npad))[:, :n]
    close(out, np_act((a.astype("float64") * (g if gate else 1)) @ w + b, ("hswish",)))
