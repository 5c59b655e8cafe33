"""The x86 VNNI int8 GEMM (compiler/int8/x86_vnni.py): the u8 offset identity, its kernels bit-exact against the
numpy int8 reference on each x86 path, and the instruction each kind of x86 CPU gets.

Paths: AVX-512 VNNI (zmm, 16 lanes: Intel Ice Lake server and later, AMD Zen 4), AVX-VNNI (ymm, 8 lanes: Alder
Lake and later without AVX-512) and AVX2 only (AMD Zen 3: the int16 vpmaddwd kernel). A path runs here only if
this CPU has its instructions (/proc/cpuinfo flags), else it is skipped with the reason; the instruction
checks compile for every kind whatever the host is (object code, not run).
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from tests.host_cpu import host_cpu_flags

tvm = pytest.importorskip("tvm")


FLAGS = host_cpu_flags()
# path: (LLVM -mcpu compiled for, Simd.vnni override or None, the cpuinfo flags it needs to run)
PATHS = {
    "avx512-vnni": ("icelake-server", None, {"avx512f", "avx512_vnni"}),
    # the 8-lane kernel as EVEX ymm (AVX-512 VNNI + VL): the same TIR AVX-VNNI CPUs get, runnable on an AVX-512 host
    "vnni-ymm-evex": ("icelake-server", 8, {"avx512vl", "avx512_vnni"}),
    "avx-vnni": ("alderlake", None, {"avx_vnni"}),
    "avx2": ("znver3", None, {"avx2"}),
}


def _target(mcpu: str):
    return tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": mcpu})


def _simd(path: str):
    from edge_sdk.compiler.ops.common import simd_of

    mcpu, vnni, _ = PATHS[path]
    simd = simd_of(_target(mcpu))
    return dataclasses.replace(simd, vnni=vnni) if vnni is not None else simd


def test_offset_identity_with_zero_point_and_padding():
    """sum (x - Z) w == sum (x + 128) w - (128 + Z) sum w, padded taps reading Z (u = Z + 128): the bias fold."""
    rng = np.random.default_rng(5)
    for z in (-128, -7, 0, 127):
        x = rng.integers(-128, 128, (50, 37)).astype(np.int64)
        x[:, :5] = z  # padding taps
        w = rng.integers(-128, 128, (37, 11)).astype(np.int64)
        u = (x.astype(np.int8).view(np.uint8) ^ 0x80).astype(np.int64)  # the kernel's XOR of the sign bit
        assert u.min() >= 0 and u.max() <= 255
        np.testing.assert_array_equal(u, x + 128)
        np.testing.assert_array_equal((x - z) @ w, u @ w - (128 + z) * w.sum(0))


def test_offset_correction_is_minus_128_column_sums():
    from edge_sdk.compiler.int8.x86_vnni import offset_correction

    w = np.random.default_rng(1).integers(-128, 128, (3, 3, 5, 7)).astype(np.int8)
    np.testing.assert_array_equal(offset_correction(w), -128 * w.astype(np.int64).reshape(-1, 7).sum(0))


def test_simd_reads_vnni_from_the_target_not_the_host():
    from edge_sdk.compiler.ops.common import simd_of

    assert simd_of(_target("znver3")).vnni == 0  # Zen 3: AVX2 only
    assert simd_of(_target("znver4")).vnni == 16 and simd_of(_target("icelake-server")).vnni == 16
    assert simd_of(_target("alderlake")).vnni == 8  # AVX-VNNI, no AVX-512
    assert simd_of(tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a53"})).vnni == 0


CASES = [  # (x shape, co, kernel, stride, dilation, padding)
    ((1, 7, 5, 6), 20, (1, 1), (1, 1), (1, 1), "VALID"),   # tail rows (M % mr), CI % 4, CO % 16
    ((1, 9, 9, 3), 32, (3, 3), (2, 2), (1, 1), "SAME"),    # a stem: CI 3 padded to 4, SAME pad = zero point
    ((2, 6, 7, 5), 9, (3, 2), (1, 2), (1, 1), "VALID"),    # batch 2, rectangular kernel, CO < lanes
    ((1, 11, 10, 4), 17, (3, 3), (1, 1), (2, 2), "SAME"),  # dilation
    ((1, 2, 2, 64), 96, (1, 1), (1, 1), (1, 1), "VALID"),  # weights bigger than activations: weights outer
    ((1, 1, 1, 64), 70, (1, 1), (1, 1), (1, 1), "VALID"),  # one row (a 1x1 output): the wide tile
    ((1, 14, 14, 128), 64, (1, 1), (1, 1), (1, 1), "VALID"),  # the XOR copy vectorized; K = 128: 6-row zmm tile
    ((1, 12, 12, 64), 40, (1, 1), (1, 1), (1, 1), "VALID"),  # K = 64, 144 rows: whole 6-row zmm tiles
]


def _layer(rng, co, kshape):
    w = rng.integers(-128, 128, (co, *kshape)).astype(np.int8)
    w[0] = 127  # extreme operands: 255 * 127 and 0 * -128 products
    w[1 % co] = -128
    bias = rng.integers(-5000, 5000, co).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    shift = -rng.integers(4, 12, co)
    return w, bias, mult, shift


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-co{c[1]}-k{c[2][0]}")
def test_vnni_kernel_equals_numpy_reference(path, case):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.quant import int8 as q8

    mcpu, _, need = PATHS[path]
    if not need <= FLAGS:
        pytest.skip(f"this CPU lacks {sorted(need - FLAGS)} for the {path} path ({mcpu})")
    xs, co, kk, stride, dil, padding = case
    rng = np.random.default_rng(sum(xs) + co)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    x.reshape(-1)[:7] = (-128, 127, -128, 127, 0, -1, 1)
    w, bias, mult, shift = _layer(rng, co, (*kk, xs[-1]))
    for zp in (-128, 127):  # the offset u = Z + 128 at both ends of its range
        rq = q8.Requant(in_zp=zp, multiplier=mult, shift=shift, out_zp=3, act=(-128, 127))
        win = q8.Window(stride, dil, padding)
        ref = q8.conv2d(x, w, bias, rq, win)
        k = kernels.conv2d(xs, w, bias, rq, win, simd=_simd(path), name="k")
        lib = tvm.compile(tvm.IRModule({"main": k.func.with_attr("global_symbol", "main")}), target=_target(mcpu))
        args = [tvm.runtime.tensor(a) for a in [x, *k.consts]]
        out = tvm.runtime.tensor(np.zeros(k.out_shape, k.out_dtype))
        lib["main"](*args, out)
        np.testing.assert_array_equal(out.numpy()[..., :co].reshape(ref.shape), ref, err_msg=f"in_zp {zp}")


# The int8 conv's multiply-add step each kind of x86 CPU gets, read from the object code
ASM_KINDS = {
    "znver3": (("vpmaddwd",), ("vpdpbusd", "%zmm")),              # AVX2 only: the int16 pair step, no VNNI
    # VNNI kinds: x86_requant's even / odd vpmuldq, so no 64-bit halves narrowed back (vpmovqd)
    "icelake-server": (("vpdpbusd", "%zmm"), ("vpmaddwd", "vpmovqd")),     # AVX-512 VNNI
    "znver4": (("vpdpbusd", "%zmm"), ("vpmaddwd", "vpmovqd")),             # AVX-512 VNNI (this project's Zen 4 host)
    "alderlake": (("{vex} vpdpbusd", "%ymm"), ("%zmm", "vpmovqd")),       # AVX-VNNI: VEX-encoded, ymm only
}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils")
@pytest.mark.parametrize("mcpu", sorted(ASM_KINDS))
def test_conv_kernel_step_per_x86_kind(tmp_path, mcpu):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8

    rng = np.random.default_rng(0)
    w, bias, mult, shift = _layer(rng, 64, (1, 1, 64))
    rq = q8.Requant(in_zp=-7, multiplier=mult, shift=shift, out_zp=3, act=(-128, 127))
    k = kernels.conv2d((1, 14, 14, 64), w, bias, rq, q8.Window(), simd=simd_of(_target(mcpu)), name="qconv")
    tvm.compile(tvm.IRModule({"qconv": k.func}), target=_target(mcpu)).export_library(str(tmp_path / "q.so"))
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(tmp_path / "q.so")], capture_output=True,
                         text=True, check=True).stdout
    has, lacks = ASM_KINDS[mcpu]
    for text in has:
        assert text in asm, f"{mcpu}: no {text}"
    for text in lacks:
        assert text not in asm, f"{mcpu}: {text} in a kernel for this CPU"
    assert "vpbroadcastd" in asm and "vpmuldq" in asm  # the activation broadcast; the requantize's 32x32->64


def test_host_cpu_override_compiles_the_avx2_kernels(monkeypatch):
    """EDGE_SDK_HOST_CPU=znver3 on any x86 host: the host row's code is the AVX2 kind's (no VNNI, uint8 words)."""
    import platform

    from edge_sdk.compiler.bitserial.x86_popcnt import schedule_arch
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.targets import get_target, host_target

    if platform.machine() != "x86_64":
        pytest.skip("an x86 host")
    monkeypatch.setenv("EDGE_SDK_HOST_CPU", "znver3")
    host_target.cache_clear()
    try:
        t = get_target("host")
        assert t.llvm["mcpu"] == "znver3" and "EDGE_SDK_HOST_CPU" in t.description
        assert simd_of(t.tvm_target()).vnni == 0 and schedule_arch(t) == "x86_64"
    finally:
        monkeypatch.delenv("EDGE_SDK_HOST_CPU")
        host_target.cache_clear()
    assert get_target("host").llvm["mcpu"] != "znver3" or "EDGE_SDK_HOST_CPU" not in get_target("host").description
