"""Compiled int8 (edge_sdk.compiler.int8) against TFLite's reference kernels, exactly; no float in the conv path.

The numpy reference is itself checked against TFLite in test_quant_int8.py; here the compiled code is
compared with TFLite BUILTIN_REF directly, on the host (TVM VM) and under qemu for pi3 (edge-runner).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
OPS = sorted(p for p in (DATA / "int8_ops").glob("*.tflite") if p.stem != "reshape")
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


def _run_host(path: Path, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.targets import get_target

    ex, params, _ = compile_int8(path, get_target("host"))
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


@pytest.mark.parametrize("path", _existing(FAST_MODELS), ids=lambda p: p.stem)
def test_compiled_model_equals_tflite_reference(path):
    x = _input(path, 5)
    out, ref = _run_host(path, x), _tflite(path, x, reference=True)
    np.testing.assert_array_equal(out, ref)
    assert len(np.unique(ref)) > 1


@pytest.mark.slow
@pytest.mark.parametrize("path", _existing(SLOW_MODELS), ids=lambda p: p.stem)
def test_compiled_bigger_model_equals_tflite_reference(path):
    x = _input(path, 5)
    np.testing.assert_array_equal(_run_host(path, x), _tflite(path, x, reference=True))


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
    from edge_sdk.models.tflite_int8 import conv_params, read_int8_tflite
    from edge_sdk.targets import get_target

    g = read_int8_tflite(DATA / "int8_ops" / "conv_relu6_s2_same.tflite")
    op = next(o for o in g.ops if o.kind == "CONV_2D")
    p, o = conv_params(g, op), op.opts
    tgt = get_target(target_name)
    k = kernels.conv2d(g.tensors[op.inputs[0]].shape, p["w"], p["bias"], in_zp=p["in_zp"], mult=p["multiplier"],
                       shift=p["shift"], out_zp=p["out_zp"], act=p["act"], stride=o["stride"],
                       dilation=o["dilation"], padding=o["padding"], simd=simd_of(tgt.tvm_target()), name="qconv")
    return k, tgt


def test_conv_kernel_tir_has_no_floating_point():
    k, _ = _conv_kernel("host")
    text = k.func.script()  # every dtype of every buffer, cast and constant is spelled out in TVMScript
    assert "float" not in text
    for dtype in ("int8", "int16", "int32", "int64"):  # the widening chain really is there
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
def test_pi3_under_qemu_equals_tflite_reference(tmp_path):
    import tvm

    from edge_sdk.compiler.int8.backend import compile_int8
    from edge_sdk.runtime.execute import run_compiled
    from edge_sdk.targets import get_target

    path = DATA / "awkward_37x30_int8.tflite"
    tgt = get_target("pi3")
    ex, params, _ = compile_int8(path, tgt)
    lib, pfile = tmp_path / "model.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=tgt.compiler())
    tvm.runtime.save_param_dict_to_file({k: tvm.runtime.tensor(v) for k, v in params.items()}, str(pfile))
    x = _input(path, 9)
    res = run_compiled(lib=lib, params=pfile, input=x, arch="aarch64", emulate_cpu="cortex-a53", repeat=1)
    np.testing.assert_array_equal(res.output, _tflite(path, x, reference=True))
