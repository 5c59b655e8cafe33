"""The float stem's tail as one kernel (bitserial/io.pool_quantize_pack_prim_func): max pool with padded taps
skipped, quantize floor(y / step + 1/2) clipped to the codes, bitpack, against numpy, exactly; on the host
and compiled for pi3 under qemu -cpu cortex-a53."""
import shutil

import numpy as np
import pytest

from edge_sdk.quant import bitserial as bs
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import io, kernels as ops  # noqa: E402

RNG = np.random.default_rng(31)
# (h, w, c, bits, word, pad (t, l, b, r)): even and odd sizes, 1-3 bit codes, asymmetric padding
CASES = [(12, 12, 32, 2, "uint16", (1, 1, 1, 1)), (11, 9, 16, 1, "uint16", (1, 1, 1, 1)),
         (10, 10, 64, 3, "uint16", (0, 0, 1, 1)), (10, 7, 16, 2, "uint8", (1, 1, 1, 1))]


def _case(h, w, c, bits, word, pad):
    x = (RNG.integers(-256, 640, (1, h, w, c)) / 128).astype("float32")
    t, l, b, r = pad
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=-np.inf)
    oh, ow = (h + t + b - 3) // 2 + 1, (w + l + r - 3) // 2 + 1
    pooled = np.array([[xp[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(0, 1)) for j in range(ow)]
                       for i in range(oh)])[None]
    q = np.clip(np.floor(pooled / 0.5 + 0.5), 0, (1 << bits) - 1).astype(np.int64)
    func = io.pool_quantize_pack_prim_func(x.shape, pool=3, stride=2, pad=pad, bits=bits, step=0.5, word=word)
    return func, x, bs.pack_activations(q, bits=bits, word=word)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}-a{c[3]}-{c[4]}" for c in CASES])
def test_pool_quantize_pack_matches_numpy_on_host(case):
    func, x, ref = _case(*case)
    ex = ops.build(func, target=get_target("host"))
    out = tvm.runtime.tensor(np.zeros(ref.shape, ref.dtype))
    ex.mod["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.qemu
@pytest.mark.parametrize("case", CASES[:3], ids=[f"{c[0]}x{c[1]}x{c[2]}-a{c[3]}" for c in CASES[:3]])
def test_pool_quantize_pack_matches_numpy_under_qemu(case, tmp_path):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tvm import relax

    from edge_sdk.runtime.execute import LocalRun, run_compiled

    func, x, ref = _case(*case)
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(list(x.shape), "float32"))
    with bb.function("main", [xv]):
        gv = bb.add_func(func.with_attr("global_symbol", "pool_pack"), "pool_pack")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, [xv], relax.TensorType(list(ref.shape), str(ref.dtype)))))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    lib, params = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({}, str(params))
    res = run_compiled(lib=lib, params=params, input=x, arch="aarch64", emulate_cpu="cortex-a53",
                       how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    np.testing.assert_array_equal(res.output, ref)


# ---- the float <-> packed passes around MobileNet's float depthwise layers ------------------------------
# (h, w, c, bits, word): 1-3 bit codes, one and several words per pixel, an odd row length
IO_CASES = [(7, 5, 32, 2, "uint16"), (4, 4, 64, 1, "uint16"), (3, 6, 16, 3, "uint16"), (5, 3, 16, 2, "uint8"),
            (1, 1, 128, 2, "uint16")]  # a 1x1 map (unit loops)


def _io_case(h, w, c, bits, word):
    """(quantize_pack func, dequant func, x, packed reference, dequantized reference)."""
    x = (RNG.integers(-256, 640, (1, h, w, c)) / 128).astype("float32")
    q = np.clip(np.floor(x / 0.5 + 0.5), 0, (1 << bits) - 1).astype(np.int64)
    packed = bs.pack_activations(q, bits=bits, word=word)
    return (io.quantize_pack_prim_func(x.shape, bits=bits, step=0.5, word=word),
            io.unpack_dequant_prim_func(packed.shape, word=word, channels=c, step=0.5),
            x, packed, (q * 0.5).astype("float32"))


@pytest.mark.parametrize("case", IO_CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}-a{c[3]}-{c[4]}" for c in IO_CASES])
def test_quantize_pack_and_dequant_match_numpy_on_host(case):
    qp, dq, x, packed, values = _io_case(*case)
    host = get_target("host")
    out = tvm.runtime.tensor(np.zeros(packed.shape, packed.dtype))
    ops.build(qp, target=host).mod["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy(), packed)
    back = tvm.runtime.tensor(np.zeros(values.shape, "float32"))
    ops.build(dq, target=host).mod["main"](tvm.runtime.tensor(packed), back)
    np.testing.assert_array_equal(back.numpy(), values)


def _run_pi3(x, funcs, tmp_path):
    """x through the chain of PrimFuncs `funcs` (the last one's output returned), compiled for pi3, under qemu."""
    from tvm import relax

    from edge_sdk.runtime.execute import LocalRun, run_compiled

    pi3 = get_target("pi3")
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(list(x.shape), "float32"))
    with bb.function("main", [xv]):
        v = xv
        for i, (f, shape, dtype) in enumerate(funcs):
            gv = bb.add_func(f.with_attr("global_symbol", f"k{i}"), f"k{i}")
            v = bb.emit(relax.call_tir(gv, [v], relax.TensorType(list(shape), dtype)))
        bb.emit_func_output(v)
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    lib, params = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file({}, str(params))
    res = run_compiled(lib=lib, params=params, input=x, arch="aarch64", emulate_cpu="cortex-a53",
                       how=LocalRun(warmup=0, repeat=1))
    assert res.emulated
    return res.output


@pytest.mark.qemu
@pytest.mark.parametrize("case", IO_CASES[:3] + IO_CASES[4:], ids=[f"{c[0]}x{c[1]}x{c[2]}-a{c[3]}"
                                                                   for c in IO_CASES[:3] + IO_CASES[4:]])
def test_quantize_pack_then_dequant_match_numpy_under_qemu(case, tmp_path):
    """quantize_pack alone (x -> packed words), then quantize_pack + dequant (x -> values; the runner's
    input is float), on pi3."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    qp, dq, x, packed, values = _io_case(*case)
    first = (qp, packed.shape, str(packed.dtype))
    np.testing.assert_array_equal(_run_pi3(x, [first], tmp_path), packed)
    got = _run_pi3(x, [first, (dq, values.shape, "float32")], tmp_path)
    np.testing.assert_array_equal(got, values)
