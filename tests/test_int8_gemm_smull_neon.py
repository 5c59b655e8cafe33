"""The aarch64 8-bit int8 GEMM (compiler/int8/gemm_int8_smull_neon.py: smull/smlal2 into 16 bits, sadalp into 32) against
the numpy int8 reference (quant/int8.py, itself checked against TFLite BUILTIN_REF in test_quant_int8.py),
under qemu for pi3: odd sizes, tails, padding, stride, dilation, the flattened-K stem layout; and the
int8 weights it reads: packed 1 byte a weight, with the int16 kernel kept for a -128 weight."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

# (x shape, co, kernel, stride, dilation, padding)
CASES = [
    ((1, 7, 5, 32), 20, (1, 1), (1, 1), (1, 1), "VALID"),    # 35 rows (tail of 3), CO % 4 = 0, K = 2 blocks
    ((1, 9, 9, 3), 30, (3, 3), (2, 2), (1, 1), "SAME"),      # the stem: K = 27 one padded row, CO % 4 = 2
    ((2, 6, 7, 16), 9, (3, 2), (1, 2), (1, 1), "VALID"),     # batch 2, rectangular kernel, CI = 16 natural
    ((1, 11, 10, 20), 17, (3, 3), (1, 1), (2, 2), "SAME"),   # dilation, CI % 16 = 4 (flattened K)
    ((1, 2, 3, 200), 96, (1, 1), (1, 1), (1, 1), "VALID"),   # weights bigger than activations: weights outer
    ((1, 5, 5, 7), 5, (1, 1), (1, 1), (1, 1), "VALID"),      # K = 7 < one block
    ((1, 4, 4, 48), 64, (3, 3), (1, 1), (1, 1), "SAME"),     # 3x3 over CI = 48 (3 blocks a tap)
    ((1, 4, 6, 64), 12, (1, 1), (1, 1), (1, 1), "VALID"),    # rows are slices of x: the vector copy
    ((1, 20, 18, 3), 12, (7, 7), (2, 2), (1, 1), "SAME"),    # 7x7x3 stem, pre-padded rows: 11 blocks (K pad half)
    ((2, 7, 9, 5), 8, (3, 3), (1, 1), (2, 1), "VALID"),      # pre-padded rows with dilation along y only
    ((1, 8, 8, 24), 16, (3, 3), (2, 2), (1, 1), "SAME"),     # CI = 24: 9 halves a kernel row, 14 blocks
]


def _case(i, case):
    from edge_sdk.quant import int8 as q8

    xs, co, kk, stride, dil, padding = case
    rng = np.random.default_rng(100 + i)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, (co, *kk, xs[-1])).astype(np.int8)
    w.reshape(-1)[:: 7] = -127  # the extreme pair (-128 x -127) twice in an int16 lane
    x.reshape(-1)[:: 5] = -128
    bias = rng.integers(-20000, 20000, co).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    shift = -rng.integers(6, 12, co)
    rq = q8.Requant(in_zp=int(rng.integers(-128, 128)), multiplier=mult, shift=shift,
                    out_zp=int(rng.integers(-20, 20)), act=(-128, 127))
    win = q8.Window(stride, dil, padding)
    return x, w, bias, rq, win, q8.conv2d(x, w, bias, rq, win)


def _pi3_kernel(x, w, bias, rq, win):
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.ops.common import simd_of
    from edge_sdk.targets import get_target

    return kernels.conv2d(x.shape, w, bias, rq, win, simd=simd_of(get_target("pi3").tvm_target()), name="k")


def _run_pi3(kerns, xs):
    """All kernels in one Relax main (inputs as params), outputs flattened and concatenated: one qemu run."""
    import tvm
    from tvm import relax

    from pi3_run import run_executable_on_pi3

    from edge_sdk.targets import get_target

    pi3 = get_target("pi3")
    arrays = [np.zeros(4, np.int8)]
    for k, x in zip(kerns, xs):
        arrays += [x, *k.consts]
    pv = [relax.Var(f"p{i:04d}", relax.TensorType(a.shape, str(a.dtype))) for i, a in enumerate(arrays[1:])]
    bb = relax.BlockBuilder()
    xv = relax.Var("input", relax.TensorType((4,), "int8"))
    with bb.function("main", [xv, *pv]):
        outs, at = [], 0
        for n, k in enumerate(kerns):
            gv = bb.add_func(k.func.with_attr("global_symbol", f"k{n}"), f"k{n}")
            args = pv[at:at + 1 + len(k.consts)]
            at += len(args)
            y = bb.emit(relax.call_tir(gv, list(args), relax.TensorType(k.out_shape, k.out_dtype)))
            outs.append(bb.emit(relax.op.reshape(y, (-1,))))
        bb.emit_func_output(bb.emit(relax.op.concat(outs, axis=0)))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    return run_executable_on_pi3(ex, arrays)


@pytest.mark.slow
@pytest.mark.qemu
def test_gemm_smull_on_pi3_under_qemu_equals_reference():
    pi3_cc = shutil.which("aarch64-linux-gnu-g++")
    if pi3_cc is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    cases = [_case(i, c) for i, c in enumerate(CASES)]
    kerns = [_pi3_kernel(*c[:5]) for c in cases]
    for k in kerns:
        assert k.consts[0].dtype == np.int8  # the 8-bit kernel, reading int8 weights
    out = _run_pi3(kerns, [c[0] for c in cases])
    at = 0
    for case, k, (_, w, *_, ref) in zip(CASES, kerns, cases):
        n = int(np.prod(k.out_shape))
        got = out[at:at + n].reshape(k.out_shape)[:, :w.shape[0]].reshape(ref.shape)
        at += n
        np.testing.assert_array_equal(got, ref, err_msg=str(case))
    assert at == out.size


def test_gemm_smull_packs_one_byte_a_weight_and_keeps_int16_for_minus_128():
    from edge_sdk.compiler.int8 import gemm_int8_smull_neon

    x, w, bias, rq, win, _ = _case(0, CASES[1])
    k = _pi3_kernel(x, w, bias, rq, win)
    wp = k.consts[0]
    assert wp.dtype == np.int8 and wp.size == 32 * 48  # CO 30 -> 32, K: 3 kernel rows of 9 -> 16 bytes: padding only
    assert np.count_nonzero(wp) == np.count_nonzero(w)
    w2 = w.copy()
    w2[3, 1, 1, 2] = -128  # two (-128) x (-128) products overflow an int16 lane: the int16 kernel
    assert not gemm_int8_smull_neon.fits(w2.transpose(1, 2, 3, 0), 100)
    assert _pi3_kernel(x, w2, bias, rq, win).consts[0].dtype == np.int16
    assert not gemm_int8_smull_neon.fits(w.transpose(1, 2, 3, 0), 3)  # fewer rows than one tile


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-objdump") is None or shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="needs binutils-aarch64-linux-gnu and g++-aarch64-linux-gnu")
def test_gemm_smull_aarch64_asm_is_the_8bit_step(tmp_path):
    import subprocess

    import tvm

    from edge_sdk.targets import get_target

    k = _pi3_kernel(*_case(4, CASES[4])[:5])
    tgt = get_target("pi3")
    lib = tvm.compile(tvm.IRModule({"k": k.func}), target=tgt.tvm_target())
    lib.export_library(str(tmp_path / "k.so"), fcompile=tgt.compiler())
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(tmp_path / "k.so")], capture_output=True, text=True,
                         check=True).stdout
    ops = [line.split("\t")[2].split()[0] for line in asm.splitlines() if line.count("\t") >= 2]
    assert ops.count("smlal2") >= 16 and ops.count("sadalp") >= 16  # one 4x4x16 step at least
    assert "smlal" not in ops  # no 16-bit by-lane multiply-accumulate left
