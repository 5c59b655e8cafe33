"""Compiled int8 (edge_sdk.compiler.int8) against TFLite's reference kernels, exactly; no float in the conv path.

The numpy reference is itself checked against TFLite in test_quant_int8.py; here the compiled code is
compared with TFLite BUILTIN_REF directly, on the host (TVM VM) and under qemu for pi3 (edge-runner).
"""
from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
OPS = sorted((DATA / "int8_ops").glob("*.tflite"))  # reshape: its SHAPE chain is dropped by the reader
FAST_MODELS = [DATA / n for n in ("awkward_37x30_int8.tflite", "awkward_37x30_int8_float_io.tflite",
                                  "mobilenet_v1_0.25_64_int8.tflite")]
SLOW_MODELS = [DATA / n for n in ("resnet18_w8_64_int8.tflite", "mobilenet_v2_0.1_64_int8.tflite",
                                  "mobilenet_v2_0.1_64_int8_float_io.tflite")]
# Measured (LiteRT 2.3.0 on x86, seeds 0-2): largest |XNNPACK - BUILTIN_REF| at the int8 output (LSB of
# the output scale). Our output equals BUILTIN_REF, so this is also our distance to XNNPACK.
XNNPACK_BOUND_LSB = {"awkward_37x30_int8": 2, "mobilenet_v1_0.25_64_int8": 2, "resnet18_w8_64_int8": 3,
                     "mobilenet_v2_0.1_64_int8": 7}


def _existing(paths):
    return [p for p in paths if p.exists()]


@functools.cache
def _host_executable(path: Path):
    """compile_int8 of a file for the host, once per test process (the same file and target compile to the same
    executable; test_distance_to_xnnpack runs each model on three inputs, and test_compiled_(bigger_)model on one more: one compile each)."""
    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.targets import get_target

    ex, params, _ = compile_int8(path, get_target("host"))
    return ex, params


# the model tests share _host_executable's compiles only inside one process: under `pytest -n 2` they are one
# unit of work (tests/xdist_units.py), so each model compiles once in the suite, not once per worker
SAME_WORKER = pytest.mark.xdist_group("test_compiler_int8-host-models")


def _run_host(path: Path, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    ex, params = _host_executable(path)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(params[k]) for k in sorted(params)]).numpy()


def _tflite(path: Path, x: np.ndarray, *, reference: bool) -> np.ndarray:
    from edge_sdk.runtime.litert import run_tflite

    return run_tflite(path, x, reference_kernels=reference)


def _input(path: Path, seed: int) -> np.ndarray:
    from edge_sdk.compiler.int8.backend import example_input
    from edge_sdk.models.tflite_int8 import read_int8_tflite

    return example_input(read_int8_tflite(path), seed=seed)


@pytest.mark.parametrize("path", OPS, ids=lambda p: p.stem)
def test_compiled_single_op_equals_tflite_reference(path):
    x = _input(path, 3)
    np.testing.assert_array_equal(_run_host(path, x), _tflite(path, x, reference=True))


@SAME_WORKER
@pytest.mark.parametrize("path", _existing(FAST_MODELS), ids=lambda p: p.stem)
def test_compiled_model_equals_tflite_reference(path):
    x = _input(path, 5)
    out, ref = _run_host(path, x), _tflite(path, x, reference=True)
    np.testing.assert_array_equal(out, ref)
    assert len(np.unique(ref)) > 1


@SAME_WORKER
@pytest.mark.slow
@pytest.mark.parametrize("path", _existing(SLOW_MODELS), ids=lambda p: p.stem)
def test_compiled_bigger_model_equals_tflite_reference(path):
    x = _input(path, 5)
    np.testing.assert_array_equal(_run_host(path, x), _tflite(path, x, reference=True))


@SAME_WORKER
@pytest.mark.parametrize("name", [
    "awkward_37x30_int8", "mobilenet_v1_0.25_64_int8",
    pytest.param("resnet18_w8_64_int8", marks=pytest.mark.slow),
    pytest.param("mobilenet_v2_0.1_64_int8", marks=pytest.mark.slow)])
def test_distance_to_xnnpack_is_within_the_measured_bound(name):
    path = DATA / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{path} not generated")
    worst = 0
    for seed in range(3):
        x = _input(path, seed)
        ours = _run_host(path, x).astype(np.int32)
        assert np.array_equal(ours, _tflite(path, x, reference=True))
        worst = max(worst, int(np.abs(ours - _tflite(path, x, reference=False).astype(np.int32)).max()))
    assert worst <= XNNPACK_BOUND_LSB[name]


def _conv_kernel(target_name: str):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.models.tflite_int8 import read_int8_tflite
    from edge_sdk.quant.int8 import Window
    from edge_sdk.quant.tflite_int8_ref import conv_params
    from edge_sdk.targets import get_target

    g = read_int8_tflite(DATA / "int8_ops" / "conv_relu6_s2_same.tflite")
    op = next(o for o in g.ops if o.kind == "CONV_2D")
    tgt = get_target(target_name)
    k = kernels.conv2d(g.tensors[op.inputs[0]].shape, *conv_params(g, op), Window.of(op.opts),
                       simd=simd_of(tgt.tvm_target()), name="qconv")
    return k, tgt


def test_conv_kernel_tir_has_no_floating_point():
    from edge_sdk.compiler.ops.common import simd_of

    k, tgt = _conv_kernel("host")
    text = k.func.script()  # every dtype of every buffer, cast and constant is spelled out in TVMScript
    assert "float" not in text
    # the widening chain really is there: int16 products, or (VNNI host) u8 x s8 dot products into int32
    middle = "uint8" if simd_of(tgt.tvm_target()).vnni else "int16"
    for dtype in ("int8", middle, "int32", "int64"):
        assert dtype in text


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-objdump") is None or shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="needs binutils-aarch64-linux-gnu and g++-aarch64-linux-gnu")
def test_conv_kernel_aarch64_asm_is_integer_neon(tmp_path):
    import subprocess

    import tvm

    k, tgt = _conv_kernel("pi3")
    lib = tvm.compile(tvm.IRModule({"qconv": k.func}), target=tgt.tvm_target())
    obj = tmp_path / "qconv.so"
    lib.export_library(str(obj), fcompile=tgt.compiler())
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    mnemonics = {line.split("\t")[2].split()[0] for line in asm.splitlines() if line.count("\t") >= 2}
    # fmov alone is allowed: LLVM uses it to move integer bits between general and vector registers
    float_ops = {m for m in mnemonics if m.startswith(("fmul", "fadd", "fmla", "fsub", "fdiv", "scvtf", "fcvt",
                                                        "ucvtf", "fmadd", "fmax", "fmin", "frint"))}
    assert not float_ops, float_ops
    assert mnemonics & {"smull", "smull2", "smlal", "smlal2", "sadalp", "saddw", "saddw2", "mla"}, sorted(mnemonics)
    assert "sdot" not in mnemonics  # the Cortex-A53 has no dot-product instructions


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
@pytest.mark.parametrize("name", ["awkward_37x30_int8", "mobilenet_v1_0.25_64_int8",
                                  pytest.param("mobilenet_v2_0.1_64_int8", marks=pytest.mark.slow),
                                  pytest.param("resnet18_w8_64_int8", marks=pytest.mark.slow)])
def test_pi3_under_qemu_equals_tflite_reference(tmp_path, name):
    """NEON tiles: odd sizes, stride 2, depth multiplier 2 (awkward); 1x1 GEMMs with 8..256 channels, the
    8x8 by-lane tile and the < 8 row 6x16 one, the 1x1x256 -> classes conv (MobileNetV1); residual adds
    and narrow odd channel counts (MobileNetV2 0.1)."""
    _assert_pi3_equals_tflite(DATA / f"{name}.tflite", tmp_path)


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
@pytest.mark.parametrize("name", ["add", "add_relu", "maxpool_same"])
def test_pi3_glue_op_under_qemu_equals_tflite_reference(tmp_path, name):
    """The same-shape ADD as one flat loop with the NEON rescales (sqrdmulh / srshl, 4 int32 lanes) and
    MAX_POOL_2D in int8 lanes over channels (3 here: a vector narrower than 16), on the Cortex-A53."""
    _assert_pi3_equals_tflite(DATA / "int8_ops" / f"{name}.tflite", tmp_path)


def _assert_pi3_equals_tflite(path: Path, tmp_path: Path) -> None:
    import tvm

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.runtime.execute import LocalRun, run_compiled
    from edge_sdk.targets import get_target

    tgt = get_target("pi3")
    ex, params, _ = compile_int8(path, tgt)
    lib, pfile = tmp_path / "model.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=tgt.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    x = _input(path, 9)
    ref = _tflite(path, x, reference=True)
    for threads in (1, 4):  # each thread's stack scratch is its own (compiler/stack_scratch)
        res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53",
                           how=LocalRun(threads=threads, warmup=0, repeat=1))
        np.testing.assert_array_equal(res.output, ref)
    assert len(np.unique(ref)) > 1
    from edge_sdk.compiler.stack_scratch import workspace_hooks

    assert workspace_hooks(lib) == []  # every kernel's scratch fits the stack budget: no runtime allocation


# -- the tiled kernels' tile shapes and tails, against the numpy reference (itself checked against TFLite) --
def _layer(rng, co, k, *, left_shift=False):
    w = rng.integers(-127, 128, (co, *k)).astype(np.int8)
    bias = rng.integers(-20000, 20000, co).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    shift = -rng.integers(6, 12, co)
    if left_shift:
        shift[::3] = 1  # a real multiplier >= 1: the int64-epilogue fallback kernels
    return w, bias, mult, shift


def _run_kernel(k, x: np.ndarray) -> np.ndarray:
    import tvm

    from edge_sdk.targets import get_target

    lib = tvm.compile(tvm.IRModule({"main": k.func.with_attr("global_symbol", "main")}),
                      target=get_target("host").tvm_target())
    args = [tvm.runtime.tensor(a) for a in [x, *k.consts]] + [tvm.runtime.tensor(np.zeros(k.out_shape, k.out_dtype))]
    lib["main"](*args)
    return args[-1].numpy()


CONV_CASES = [  # (x shape, co, kernel, stride, dilation, padding): tail rows (M % 6), channel padding
    ((1, 7, 5, 6), 20, (1, 1), (1, 1), (1, 1), "VALID"),    # (CO % 16), GEMM view of a 1x1 conv
    ((1, 9, 9, 3), 32, (3, 3), (2, 2), (1, 1), "SAME"),     # odd CI (pairs padded), SAME pad = zero point
    ((2, 6, 7, 5), 9, (3, 2), (1, 2), (1, 1), "VALID"),     # batch 2, rectangular kernel, CO < 16
    ((1, 11, 10, 4), 17, (3, 3), (1, 1), (2, 2), "SAME"),   # dilation
    ((1, 2, 2, 64), 96, (1, 1), (1, 1), (1, 1), "VALID"),   # weights bigger than activations: weights outer
    ((1, 5, 5, 16), 24, (5, 5), (1, 1), (1, 1), "SAME"),    # K*K taps over a small image
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-co{c[1]}-k{c[2][0]}")
@pytest.mark.parametrize("left_shift", [False, True], ids=["gemm", "fallback"])
def test_conv_kernel_tiles_and_tails_equal_reference(case, left_shift):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8
    from edge_sdk.targets import get_target

    xs, co, kk, stride, dil, padding = case
    rng = np.random.default_rng(sum(xs) + co)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w, bias, mult, shift = _layer(rng, co, (*kk, xs[-1]), left_shift=left_shift)
    rq = q8.Requant(in_zp=-7, multiplier=mult, shift=shift, out_zp=3, act=(-128, 127))
    win = q8.Window(stride, dil, padding)
    ref = q8.conv2d(x, w, bias, rq, win)
    k = kernels.conv2d(xs, w, bias, rq, win, simd=simd_of(get_target("host").tvm_target()), name="k")
    out = _run_kernel(k, x)
    np.testing.assert_array_equal(out[..., :co].reshape(ref.shape), ref)
    assert (len(k.out_shape) == 2) != left_shift  # the GEMM writes (pixels, padded channels); the fallback NHWC


@pytest.mark.parametrize("batch,k,co", [(1, 1024, 70), (3, 36, 19), (1, 5, 3)])
def test_dense_kernel_equals_reference(batch, k, co):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8
    from edge_sdk.targets import get_target

    rng = np.random.default_rng(k + co)
    x = rng.integers(-128, 128, (batch, k)).astype(np.int8)
    w, bias, mult, shift = _layer(rng, co, (k,))
    rq = q8.Requant(in_zp=5, multiplier=mult, shift=shift, out_zp=-2, act=(-100, 127))
    ref = q8.fully_connected(x, w, bias, rq)
    kern = kernels.dense(batch, w, bias, rq, simd=simd_of(get_target("host").tvm_target()), name="k")
    np.testing.assert_array_equal(_run_kernel(kern, x)[:, :co], ref)


@pytest.mark.parametrize("xs,dm,stride,padding", [((1, 9, 11, 12), 1, (1, 1), "SAME"), ((1, 10, 7, 6), 2, (2, 2), "SAME"),
                                                  ((1, 8, 9, 40), 1, (2, 2), "VALID"), ((2, 5, 6, 3), 3, (1, 1), "SAME")])
@pytest.mark.parametrize("left_shift", [False, True], ids=["fast", "fallback"])
def test_depthwise_kernel_tails_equal_reference(xs, dm, stride, padding, left_shift):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8
    from edge_sdk.targets import get_target

    rng = np.random.default_rng(sum(xs) + dm)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w, bias, mult, shift = _layer(rng, 1, (3, 3, xs[-1] * dm), left_shift=left_shift)
    bias, mult, shift = (rng.permutation(np.resize(v, xs[-1] * dm)) for v in (bias, mult, shift))
    rq = q8.Requant(in_zp=11, multiplier=mult, shift=shift, out_zp=-5, act=(-128, 90))
    win = q8.Window(stride, (1, 1), padding)
    ref = q8.depthwise_conv2d(x, w, bias, rq, win, depth_multiplier=dm)
    k = kernels.depthwise(xs, w, bias, rq, win, depth_multiplier=dm, simd=simd_of(get_target("host").tvm_target()),
                          name="k")
    np.testing.assert_array_equal(_run_kernel(k, x), ref)


@pytest.mark.parametrize("xs,kk,stride", [((1, 9, 10, 120), 5, (1, 1)), ((1, 11, 9, 72), 3, (1, 1)),
                                          ((1, 12, 11, 144), 5, (2, 2)), ((1, 7, 8, 200), 3, (1, 1))])
def test_depthwise_wide_channels_equal_reference(xs, kk, stride):
    """MobileNetV3-Large / EfficientNet-B0 channel counts (not powers of two) with their 5x5 and stride-2
    windows: the vector step is a power of two dividing C (dwconv.py), the tail of C none."""
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8
    from edge_sdk.targets import get_target

    rng = np.random.default_rng(sum(xs) + kk)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w, bias, mult, shift = _layer(rng, 1, (kk, kk, xs[-1]))
    bias, mult, shift = (rng.permutation(np.resize(v, xs[-1])) for v in (bias, mult, shift))
    rq = q8.Requant(in_zp=-7, multiplier=mult, shift=shift, out_zp=3, act=(-128, 127))
    win = q8.Window(stride, (1, 1), "SAME")
    ref = q8.depthwise_conv2d(x, w, bias, rq, win, depth_multiplier=1)
    k = kernels.depthwise(xs, w, bias, rq, win, depth_multiplier=1, simd=simd_of(get_target("host").tvm_target()),
                          name="k")
    np.testing.assert_array_equal(_run_kernel(k, x), ref)


# Both kinds of x86 machine this project runs on, whatever this host is: AVX2 only (AMD Zen 3: the int16 pair
# step vpmaddwd) and AVX-512 with VNNI (Intel Xeon Ice Lake and later, AMD Zen 4: the u8 x s8 kernel of
# x86_vnni.py, vpdpbusd; tests/test_int8_x86_vnni.py checks every kind's step in detail).
X86_KINDS = {"znver3": ("vpmaddwd",), "icelake-server": ("vpdpbusd",), "znver4": ("vpdpbusd",)}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils")
@pytest.mark.parametrize("mcpu", sorted(X86_KINDS))
def test_conv_kernel_x86_asm_has_the_gemm_step(tmp_path, mcpu):
    import subprocess

    import tvm

    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.models.tflite_int8 import read_int8_tflite
    from edge_sdk.quant.int8 import Window
    from edge_sdk.quant.tflite_int8_ref import conv_params

    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": mcpu})
    g = read_int8_tflite(DATA / "int8_ops" / "conv_relu6_s2_same.tflite")
    op = next(o for o in g.ops if o.kind == "CONV_2D")
    k = kernels.conv2d(g.tensors[op.inputs[0]].shape, *conv_params(g, op), Window.of(op.opts),
                       simd=simd_of(target), name="qconv")
    lib = tvm.compile(tvm.IRModule({"qconv": k.func}), target=target)
    lib.export_library(str(tmp_path / "q.so"))  # not run: the object code is what is checked
    asm = subprocess.run(["objdump", "-d", str(tmp_path / "q.so")], capture_output=True, text=True, check=True).stdout
    assert any(i in asm for i in X86_KINDS[mcpu]) and "vpbroadcastd" in asm  # the GEMM's step, activations broadcast
    assert "vpmuldq" in asm  # the requantize's widening multiply, vectorized and 32x32->64


def test_conv_kernel_x86_row_tiles_allocate_no_workspace():
    """The x86 GEMM's accumulator tile and pmaddwd pair are registers: as "local" buffers TVM allocated them
    with TVMBackendAllocWorkspace in every 6-pixel row tile (the 12 accumulators then lived in memory)."""
    import tvm

    from edge_sdk.compiler.ops.common import simd_of

    k, tgt = _conv_kernel("host")
    if simd_of(tgt.tvm_target()).isa not in ("avx2", "avx512"):
        pytest.skip("host without AVX2")
    with tgt.tvm_target() as t:
        ir = tvm.compile(tvm.IRModule({"qconv": k.func}), target=t).mod.inspect_source("ll")
    assert "pmadd.wd" in ir or "vpdpwssd" in ir or "vpdpbusd" in ir  # the pair step (VNNI: the u8 x s8 step)
    assert "load ptr, ptr @__TVMBackendAllocWorkspace" not in ir


def test_reader_drops_only_shape_arithmetic_that_feeds_a_reshape():
    """TF 2.16 writes Flatten as SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE's shape input; shapes are static,
    so that chain goes; the same ops feeding anything else stay (and validation then names them)."""
    from types import SimpleNamespace

    from edge_sdk.models.tflite_int8 import Op, _drop_shape_arithmetic

    t = {i: SimpleNamespace(dtype="int32") for i in range(10)} | {0: SimpleNamespace(dtype="int8"),
                                                                   5: SimpleNamespace(dtype="int8")}
    chain = [Op(1, "SHAPE", [0], [1]), Op(2, "STRIDED_SLICE", [1, 7, 8, 9], [2]), Op(3, "PACK", [2, 6], [3])]
    kept = _drop_shape_arithmetic(chain + [Op(4, "RESHAPE", [0, 3], [5])], t)
    assert [o.kind for o in kept] == ["RESHAPE"]
    kept = _drop_shape_arithmetic(chain + [Op(4, "RESHAPE", [0, 3], [5]), Op(5, "ADD", [2, 2], [4])], t)
    assert [o.kind for o in kept] == ["SHAPE", "STRIDED_SLICE", "RESHAPE", "ADD"]
