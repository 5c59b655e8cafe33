"""The int8 depthwise conv on each x86 path, bit-exact against the numpy int8 reference, and the step each kind gets.

VNNI paths (compiler/int8/dwconv_u8s8_vpdpbusd_x86.py: a window column's rows per vpdpbusd lane) and AVX2 only
(dwconv.py's 32-bit products): a path runs here only where this CPU has its instructions (else skipped with
the reason); the instruction check compiles for every kind whatever the host is.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tests.test_int8_x86_vnni import FLAGS, PATHS, _simd, _target

tvm = pytest.importorskip("tvm")

CASES = [  # (x shape, kernel, stride, padding, a channel with rounding shift 0)
    ((1, 9, 11, 64), 3, 1, "SAME", False),   # 4 vectors a chunk (zmm): the packed narrowing
    ((1, 9, 11, 64), 3, 1, "SAME", True),    # the same with x86_requant's general rounding
    ((1, 10, 7, 48), 3, 2, "SAME", True),    # 3 vectors a chunk, stride 2, odd width
    ((2, 6, 5, 16), 3, 1, "VALID", False),   # batch 2, no padding
    ((1, 12, 11, 32), 5, 2, "SAME", False),  # 5x5: two row groups, the second with one row
    ((1, 7, 8, 24), 3, 1, "SAME", True),     # 24 channels: 3 ymm vectors, not whole zmm ones (dwconv.py there)
]


def _layer(rng, kk, c, *, zero_shift=True):
    w = rng.integers(-128, 128, (1, kk, kk, c)).astype(np.int8)
    w[0, 0, 0, :2] = (127, -128)  # extreme operands: 255 * 127 and 0 * -128 products
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, c).astype(np.int32)
    # a channel without a rounding shift (r = 0) takes x86_requant's general rounding, none its r >= 1 form
    shift = -rng.integers(0 if zero_shift else 1, 12, c)
    if zero_shift:
        shift[1] = 0
    return w, bias, mult, shift


def test_rounding_divide_for_shifts_of_at_least_one():
    """x86_requant._rdbpot_r1's identity in numpy: (h - [h < 0]) >> (r - 1) = t, t - (t >> 1) is TFLite's
    RoundingDivideByPOT for every r in 1..31 and int32 h > INT32_MIN (ties away from zero)."""
    from edge_sdk.quant.int8 import rounding_divide_by_pot

    rng = np.random.default_rng(3)
    h = np.concatenate([rng.integers(-2**31 + 1, 2**31, 200_000), np.arange(-3000, 3000),
                        [2**31 - 1, 2**31 - 2, -2**31 + 1, -2**31 + 2]]).astype(np.int32)
    for r in range(1, 32):
        t = (h + (h >> 31)) >> np.int32(r - 1)
        np.testing.assert_array_equal((t - (t >> 1)).astype(np.int64), rounding_divide_by_pot(h, r), err_msg=f"r {r}")


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[1]}s{c[2]}{c[3]}"
                         + ("-r0" if c[4] else ""))
def test_depthwise_equals_numpy_reference(path, case):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.quant import int8 as q8

    mcpu, _, need = PATHS[path]
    if not need <= FLAGS:
        pytest.skip(f"this CPU lacks {sorted(need - FLAGS)} for the {path} path ({mcpu})")
    xs, kk, s, padding, zero_shift = case
    rng = np.random.default_rng(sum(xs) + kk)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    x.reshape(-1)[:7] = (-128, 127, -128, 127, 0, -1, 1)
    w, bias, mult, shift = _layer(rng, kk, xs[-1], zero_shift=zero_shift)
    win = q8.Window((s, s), (1, 1), padding)
    for zp, act in ((-128, (-128, 127)), (127, (-100, 90))):  # the offset u = Z + 128 at both ends; a clamp
        rq = q8.Requant(in_zp=zp, multiplier=mult, shift=shift, out_zp=-5, act=act)
        ref = q8.depthwise_conv2d(x, w, bias, rq, win, depth_multiplier=1)
        k = kernels.depthwise(xs, w, bias, rq, win, depth_multiplier=1, simd=_simd(path), name="k")
        lib = tvm.compile(tvm.IRModule({"main": k.func.with_attr("global_symbol", "main")}), target=_target(mcpu))
        out = tvm.runtime.tensor(np.zeros(k.out_shape, k.out_dtype))
        lib["main"](*[tvm.runtime.tensor(a) for a in [x, *k.consts]], out)
        np.testing.assert_array_equal(out.numpy(), ref, err_msg=f"in_zp {zp}")
        assert len(np.unique(ref)) > 10


# the depthwise step each kind of x86 CPU gets (3x3 over 64 channels), read from the object code
ASM_KINDS = {
    "znver3": (("vpmulld",), ("vpdpbusd",)),                  # AVX2 only: 32-bit products per tap
    "icelake-server": (("vpdpbusd", "%zmm"), ("vpmulld",)),   # AVX-512 VNNI: 4 window rows a lane
    "znver4": (("vpdpbusd", "%zmm"), ("vpmulld",)),
    "alderlake": (("{vex} vpdpbusd", "%ymm"), ("%zmm", "vpmulld")),  # AVX-VNNI: VEX-encoded, ymm only
}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils")
@pytest.mark.parametrize("mcpu", sorted(ASM_KINDS))
def test_depthwise_step_per_x86_kind(tmp_path, mcpu):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.quant import int8 as q8

    w, bias, mult, shift = _layer(np.random.default_rng(0), 3, 64)
    rq = q8.Requant(in_zp=-7, multiplier=mult, shift=shift, out_zp=3, act=(-128, 127))
    k = kernels.depthwise((1, 14, 14, 64), w, bias, rq, q8.Window(), depth_multiplier=1,
                          simd=simd_of(_target(mcpu)), name="qdw")
    tvm.compile(tvm.IRModule({"qdw": k.func}), target=_target(mcpu)).export_library(str(tmp_path / "q.so"))
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(tmp_path / "q.so")], capture_output=True,
                         text=True, check=True).stdout
    has, lacks = ASM_KINDS[mcpu]
    for text in has:
        assert text in asm, f"{mcpu}: no {text}"
    for text in lacks:
        assert text not in asm, f"{mcpu}: {text} in a depthwise kernel for this CPU"


DENSE_CASES = [(1, 1024, 1000), (3, 36, 19), (1, 5, 3), (2, 130, 64)]  # (batch, K, CO): MobileNet's classifier,
# an odd count of k steps and CO % 16, K % 4, whole 4-vector chunks


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: "b{}-k{}-co{}".format(*c))
def test_dense_equals_numpy_reference(path, case):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.quant import int8 as q8

    mcpu, _, need = PATHS[path]
    if not need <= FLAGS:
        pytest.skip(f"this CPU lacks {sorted(need - FLAGS)} for the {path} path ({mcpu})")
    batch, kk, co = case
    rng = np.random.default_rng(kk + co)
    x = rng.integers(-128, 128, (batch, kk)).astype(np.int8)
    x.reshape(-1)[:4] = (-128, 127, -128, 127)
    w = rng.integers(-128, 128, (co, kk)).astype(np.int8)
    w[0, :2] = (127, -128)
    bias = rng.integers(-5000, 5000, co).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    shift = -rng.integers(0, 12, co)
    shift[::5] = 1  # a left shift: total shift 30
    for zp, act in ((-128, (-128, 127)), (127, (-100, 90))):
        rq = q8.Requant(in_zp=zp, multiplier=mult, shift=shift, out_zp=-5, act=act)
        ref = q8.fully_connected(x, w, bias, rq)
        k = kernels.dense(batch, w, bias, rq, simd=_simd(path), name="k")
        lib = tvm.compile(tvm.IRModule({"main": k.func.with_attr("global_symbol", "main")}), target=_target(mcpu))
        out = tvm.runtime.tensor(np.zeros(k.out_shape, k.out_dtype))
        lib["main"](*[tvm.runtime.tensor(a) for a in [x, *k.consts]], out)
        np.testing.assert_array_equal(out.numpy()[:, :co], ref, err_msg=f"in_zp {zp}")
        assert ref.size < 10 or len(np.unique(ref)) > 10


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("zero_shift", [False, True], ids=["r_ge_1", "r_0"])
def test_conv_rounding_forms_equal_numpy_reference(path, zero_shift):
    """The GEMM's epilogue in both of x86_requant's rounding forms (a channel with r = 0, or every r >= 1)."""
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.quant import int8 as q8

    mcpu, _, need = PATHS[path]
    if not need <= FLAGS:
        pytest.skip(f"this CPU lacks {sorted(need - FLAGS)} for the {path} path ({mcpu})")
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 6, 7, 40)).astype(np.int8)
    w = rng.integers(-128, 128, (48, 1, 1, 40)).astype(np.int8)
    _, bias, mult, shift = _layer(rng, 1, 48, zero_shift=zero_shift)
    rq = q8.Requant(in_zp=-3, multiplier=mult, shift=shift, out_zp=6, act=(-128, 127))
    ref = q8.conv2d(x, w, bias, rq, q8.Window())
    k = kernels.conv2d(x.shape, w, bias, rq, q8.Window(), simd=_simd(path), name="k")
    lib = tvm.compile(tvm.IRModule({"main": k.func.with_attr("global_symbol", "main")}), target=_target(mcpu))
    out = tvm.runtime.tensor(np.zeros(k.out_shape, k.out_dtype))
    lib["main"](*[tvm.runtime.tensor(a) for a in [x, *k.consts]], out)
    np.testing.assert_array_equal(out.numpy()[..., :48].reshape(ref.shape), ref)
