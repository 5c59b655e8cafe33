"""Our float kernels and the float lowering against plain numpy (and LiteRT for a real .tflite).

Odd shapes on purpose: odd H/W, channel counts that are not a multiple of the vector width,
stride 2 with TF SAME (asymmetric) padding, a residual add, a dense layer with a channel tail.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import tvm
from tvm import relax

from edge_sdk.compiler import lower
from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops.common import Epilogue, simd_of
from edge_sdk.compiler.ops.depthwise import depthwise_conv2d
from edge_sdk.compiler.ops.pool import pool2d
from edge_sdk.targets import get_target

DATA = os.path.join(os.path.dirname(__file__), "data")
RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def host():
    return get_target("host")


# -- numpy references (float64) -------------------------------------------------------------------
def same_pad(size: int, k: int, s: int) -> tuple[int, int]:
    """TF SAME: the extra pixel of an odd total goes to the bottom/right."""
    total = max((-(-size // s) - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def ref_conv(x, w_hwio, strides, pad, *, groups=1):
    """NHWC conv as a sum of shifted slices; pad = (top, left, bottom, right)."""
    x = np.pad(x.astype("float64"), ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0)))
    kh, kw, _, co = w_hwio.shape
    sh, sw = strides
    oh, ow = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + sh * oh:sh, j:j + sw * ow:sw, :]
            if groups == 1:
                out += patch @ w_hwio[i, j].astype("float64")
            else:
                out += np.repeat(patch, co // patch.shape[3], axis=3) * w_hwio[i, j, 0].astype("float64")
    return out


def ref_pool(x, kind, k, s, pad):
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype("float64"), ((0, 0), (pad[0], pad[2]), (pad[1], pad[3]), (0, 0)), constant_values=fill)
    ones = np.pad(np.ones(x.shape[1:3]), ((pad[0], pad[2]), (pad[1], pad[3])))
    oh, ow = (xp.shape[1] - k[0]) // s[0] + 1, (xp.shape[2] - k[1]) // s[1] + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for y in range(oh):
        for z in range(ow):
            win = xp[:, y * s[0]:y * s[0] + k[0], z * s[1]:z * s[1] + k[1], :]
            if kind == "max":
                out[:, y, z] = win.max(axis=(1, 2))
            else:
                out[:, y, z] = win.sum(axis=(1, 2)) / ones[y * s[0]:y * s[0] + k[0], z * s[1]:z * s[1] + k[1]].sum()
    return out


def close(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def run_prim(func, target, *arrays, out_shape):
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm_target())
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib[func.attrs["global_symbol"]](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


# -- kernels one by one ---------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n,act,residual", [
    (15, 7, 5, ("none",), False),
    (49, 33, 40, ("clip", 0.0, 6.0), True),
    (1, 50, 13, ("relu",), False),
])
def test_gemm_matches_numpy(host, m, k, n, act, residual):
    simd = simd_of(host.tvm_target())
    nr = conv_ops.choose_nr(simd, m, n)
    a, w, b = rand(m, k), rand(k, n), rand(n)
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    r = rand(m, npad)
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(act, residual), nr=nr, name="t_gemm")
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([r] if residual else [])
    out = run_prim(func, host, *args, out_shape=(m, npad))[:, :n]
    ref = a.astype("float64") @ w + b + (r[:, :n] if residual else 0)
    ref = np.maximum(ref, 0) if act[0] == "relu" else np.clip(ref, act[1], act[2]) if act[0] == "clip" else ref
    close(out, ref)


@pytest.mark.parametrize("shape,k,s,co", [
    ((1, 9, 11, 3), 3, 2, 5),  # first-layer-like, odd sizes, SAME asymmetric, channel tail
    ((1, 7, 7, 6), 3, 1, 24),
    ((1, 8, 6, 16), 1, 2, 8),  # strided 1x1
    ((1, 10, 10, 4), 5, 1, 17),
])
def test_conv2d_direct_matches_numpy(host, shape, k, s, co):
    simd = simd_of(host.tvm_target())
    pt, pb = same_pad(shape[1], k, s)
    pl, pr = same_pad(shape[2], k, s)
    x, w, b = rand(*shape), rand(k, k, shape[3], co), rand(co)
    nr = conv_ops.choose_nr(simd, 2, co)
    wp = conv_ops.pack_conv_weight(w, nr)
    cpad = wp.shape[0] * nr
    func = conv_ops.conv2d_direct(shape, (k, k), (s, s), (pt, pl, pb, pr), cpad, simd, epi=Epilogue(("relu",)), name="t_conv")
    ref = np.maximum(ref_conv(x, w, (s, s), (pt, pl, pb, pr)) + b, 0)
    out = run_prim(func, host, x, wp, conv_ops.pad_bias(b, cpad), out_shape=ref.shape[:3] + (cpad,))
    close(out[..., :co], ref)


@pytest.mark.parametrize("shape,k,s", [((1, 9, 7, 5), 3, 1), ((1, 11, 9, 24), 3, 2), ((1, 6, 6, 12), 5, 2)])
def test_depthwise_matches_numpy(host, shape, k, s):
    simd = simd_of(host.tvm_target())
    pt, pb = same_pad(shape[1], k, s)
    pl, pr = same_pad(shape[2], k, s)
    x, w, b = rand(*shape), rand(k, k, shape[3]), rand(shape[3])
    func = depthwise_conv2d(shape, (k, k), (s, s), (pt, pl, pb, pr), simd, epi=Epilogue(("clip", 0.0, 6.0)), name="t_dw")
    ref = np.clip(ref_conv(x, w[:, :, None, :], (s, s), (pt, pl, pb, pr), groups=shape[3]) + b, 0, 6)
    close(run_prim(func, host, x, w, b, out_shape=ref.shape), ref)


@pytest.mark.parametrize("shape,k,s,m", [((1, 9, 7, 5), 3, 2, 2), ((1, 8, 8, 3), 3, 1, 3)])
def test_depthwise_multiplier_matches_numpy(host, shape, k, s, m):
    """Depth multiplier M: output channel c*M+j reads input channel c (TensorFlow's order)."""
    simd = simd_of(host.tvm_target())
    pt, pb = same_pad(shape[1], k, s)
    pl, pr = same_pad(shape[2], k, s)
    x, w, b = rand(*shape), rand(k, k, shape[3] * m), rand(shape[3] * m)
    func = depthwise_conv2d(shape, (k, k), (s, s), (pt, pl, pb, pr), simd, multiplier=m, name="t_dwm")
    ref = ref_conv(x, w[:, :, None, :], (s, s), (pt, pl, pb, pr), groups=shape[3]) + b
    close(run_prim(func, host, x, w, b, out_shape=ref.shape), ref)


@pytest.mark.parametrize("kind,shape,k,s,same", [
    ("max", (1, 9, 9, 12), 3, 2, True), ("avg", (1, 7, 5, 10), 3, 1, True), ("avg", (1, 7, 7, 40), 7, 1, False)])
def test_pool_matches_numpy(host, kind, shape, k, s, same):
    simd = simd_of(host.tvm_target())
    pad = (0, 0, 0, 0)
    if same:
        (pt, pb), (pl, pr) = same_pad(shape[1], k, s), same_pad(shape[2], k, s)
        pad = (pt, pl, pb, pr)
    x = rand(*shape)
    ref = ref_pool(x, kind, (k, k), (s, s), pad)
    close(run_prim(pool2d(shape, kind, (k, k), (s, s), pad, simd, name="t_pool"), host, x, out_shape=ref.shape), ref)


# -- the lowering: a small network, exported, reloaded, run as the device runner does -------------
def _small_net(rng):
    """conv s2 SAME + BN + relu6, dw + relu, pw, pw + residual, pw (OIHW, channel tail) + relu, max pool SAME,
    spatial mean, dense (TFLite style: matmul with a transposed constant), softmax. Returns the
    Relax module and a float64 numpy function computing the same thing."""
    def const(a):
        return relax.const(np.asarray(a, "float32"))

    w1, b1 = rng.standard_normal((3, 3, 3, 8)) * 0.4, rng.standard_normal(8) * 0.1
    gamma, beta = rng.random(8) + 0.5, rng.standard_normal(8) * 0.1
    mean, var = rng.standard_normal(8) * 0.1, rng.random(8) + 0.5
    wd, bd = rng.standard_normal((3, 3, 8, 1)) * 0.4, rng.standard_normal(8) * 0.1
    w2, b2 = rng.standard_normal((1, 1, 8, 16)) * 0.4, rng.standard_normal(16) * 0.1
    w3, b3 = rng.standard_normal((1, 1, 16, 16)) * 0.3, rng.standard_normal(16) * 0.1
    w4 = rng.standard_normal((12, 16, 1, 1)) * 0.3  # OIHW, and a channel tail
    wf, bf = rng.standard_normal((10, 12)) * 0.3, rng.standard_normal(10) * 0.1
    pad1 = same_pad(17, 3, 2) + same_pad(15, 3, 2)
    pad1 = (pad1[0], pad1[2], pad1[1], pad1[3])
    pool_pad = same_pad(9, 3, 2) + same_pad(8, 3, 2)
    pool_pad = (pool_pad[0], pool_pad[2], pool_pad[1], pool_pad[3])

    bb = relax.BlockBuilder()
    x = relax.Var("input", relax.TensorType((1, 17, 15, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.conv2d(x, const(w1), strides=2, padding=pad1, data_layout="NHWC",
                                           kernel_layout="HWIO"))
            h = bb.emit(relax.op.add(h, const(b1)))
            bn = bb.emit(relax.op.nn.batch_norm(h, const(gamma), const(beta), const(mean), const(var),
                                                axis=3, epsilon=1e-3, training=False))
            h = bb.emit(relax.op.clip(bb.emit(relax.TupleGetItem(bn, 0)), 0, 6))
            h = bb.emit(relax.op.nn.conv2d(h, const(wd), padding=1, groups=8, data_layout="NHWC",
                                           kernel_layout="HWOI"))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, const(bd)))))
            h = bb.emit(relax.op.nn.conv2d(h, const(w2), data_layout="NHWC", kernel_layout="HWIO"))
            h = bb.emit(relax.op.add(h, const(b2)))
            r = bb.emit(relax.op.nn.conv2d(h, const(w3), data_layout="NHWC", kernel_layout="HWIO"))
            r = bb.emit(relax.op.add(relax.op.add(r, const(b3)), h))
            r = bb.emit(relax.op.nn.conv2d(r, const(w4), data_layout="NHWC", kernel_layout="OIHW"))
            h = bb.emit(relax.op.nn.relu(r))
            h = bb.emit(relax.op.nn.max_pool2d(h, 3, 2, padding=pool_pad, layout="NHWC"))
            h = bb.emit(relax.op.mean(h, axis=[1, 2]))
            h = bb.emit(relax.op.matmul(h, relax.op.permute_dims(const(wf), [1, 0])))
            h = bb.emit(relax.op.nn.softmax(relax.op.add(h, const(bf)), axis=-1))
            out = bb.emit_output(h)
        bb.emit_func_output(out)

    def reference(xv):
        h = ref_conv(xv, w1, (2, 2), pad1) + b1
        h = np.clip((h - mean) / np.sqrt(var + 1e-3) * gamma + beta, 0, 6)
        h = np.maximum(ref_conv(h, wd.transpose(0, 1, 3, 2), (1, 1), (1, 1, 1, 1), groups=8) + bd, 0)
        h = ref_conv(h, w2, (1, 1), (0, 0, 0, 0)) + b2
        h = ref_conv(h, w3, (1, 1), (0, 0, 0, 0)) + b3 + h
        h = np.maximum(ref_conv(h, w4.transpose(2, 3, 1, 0), (1, 1), (0, 0, 0, 0)), 0)
        h = ref_pool(h, "max", (3, 3), (2, 2), pool_pad).mean(axis=(1, 2))
        z = h @ wf.T + bf
        e = np.exp(z - z.max())
        return e / e.sum()

    return bb.get(), reference


def test_small_network_round_trip(host, tmp_path):
    mod, reference = _small_net(np.random.default_rng(3))
    rewritten, counts = lower.rewrite_kernels(lower.prepare(mod), host.tvm_target())
    assert lower.unscheduled_heavy_ops(rewritten) == []
    assert counts == {"conv": 4, "dw": 1, "pool": 2, "dense": 1}
    ex, params = lower.compile_relax(mod, host)
    assert sorted(params) == [f"p{i:04d}" for i in range(len(params))]
    so, pbin = str(tmp_path / "model.so"), str(tmp_path / "params.bin")
    ex.export_library(so, fcompile=host.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, pbin)
    loaded = tvm.runtime.load_param_dict_from_file(pbin)
    vm = relax.VirtualMachine(tvm.runtime.load_module(so), tvm.cpu())
    xv = RNG.standard_normal((1, 17, 15, 3)).astype("float32")
    out = vm["main"](tvm.runtime.tensor(xv), *[loaded[k] for k in sorted(loaded)]).numpy()
    close(out, reference(xv))


@pytest.mark.parametrize("name", [
    "mobilenet_v1_0.25_64_float.tflite", "mobilenet_v2_0.1_64_float.tflite",
    "awkward_37x30_float.tflite", "resnet18_w8_64_float.tflite"])
def test_tflite_matches_litert(host, name):
    """Converter-made .tflite files (tools/make_test_models.py) against the LiteRT interpreter."""
    path = os.path.join(DATA, name)
    assert os.path.exists(path), f"{path} is missing (tests/data is committed; tools/make_test_models.py makes it)"
    import ai_edge_litert.interpreter as litert
    import tflite
    from tvm.relax.frontend.tflite import from_tflite

    with open(path, "rb") as f:
        mod = from_tflite(tflite.Model.GetRootAsModel(f.read(), 0))
    rewritten, _ = lower.rewrite_kernels(lower.prepare(mod), host.tvm_target())
    assert lower.unscheduled_heavy_ops(rewritten) == []
    assert "R.nn.pad" not in rewritten["main"].script()  # ZeroPadding2D folded into the convs
    ex, params = lower.compile_relax(mod, host)
    interp = litert.Interpreter(model_path=path, num_threads=1)
    interp.allocate_tensors()
    inp, outd = interp.get_input_details()[0], interp.get_output_details()[0]
    xv = RNG.uniform(-1, 1, inp["shape"]).astype("float32")
    interp.set_tensor(inp["index"], xv)
    interp.invoke()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(xv), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()
    close(out, interp.get_tensor(outd["index"]))
