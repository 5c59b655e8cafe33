"""The A53 assembly 4x4x16 int8 tile (compiler/int8/gemm_int8_a53_ldr64.py, the gemm8 step "ldr64") under qemu
for pi3 against the numpy int8 reference (quant/int8.py, itself checked against TFLite BUILTIN_REF): every
block count the generator treats differently (no loop: 1, 2, 3 blocks; the two-step loop with an even or odd
tail: 4, 5, 9, 32), both outer orders, row and channel tails, batch 2, padding taps, the pre-padded stem
rows, and the extreme pair (-128 x -127) twice in an int16 lane; and its text: ncnn's A53 load pattern."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from test_int8_gemm_smull_neon import _run_pi3

# (x shape, co, kernel, stride, padding, schedule)
CASES = [
    ((1, 5, 6, 16), 8, (1, 1), (1, 1), "VALID", "rows_outer/ldr64"),      # 1 block: no block loop to tensorize
    ((1, 7, 5, 32), 20, (1, 1), (1, 1), "VALID", "rows_outer/ldr64"),     # 2 blocks, 35 rows (tail of 3)
    ((1, 4, 5, 48), 10, (1, 1), (1, 1), "VALID", "weights_outer/ldr64"),  # 3 blocks, CO 10 -> 12
    ((2, 3, 5, 64), 8, (1, 1), (1, 1), "VALID", "rows_outer/ldr64"),      # 4 blocks: the loop once, batch 2
    ((1, 6, 6, 80), 12, (1, 1), (1, 1), "VALID", "rows_outer/ldr64"),     # 5 blocks: the loop, a 2-step tail
    ((1, 5, 7, 144), 24, (1, 1), (1, 1), "VALID", "weights_outer/ldr64"), # 9 blocks (MobileNetV2's 144)
    ((1, 3, 3, 512), 16, (1, 1), (1, 1), "VALID", "rows_outer/ldr64"),    # 32 blocks: 15 loop iterations
    ((1, 6, 7, 16), 12, (3, 3), (2, 2), "SAME", "rows_outer/ldr64"),      # 3x3 stride 2, padding taps, 9 blocks
    ((1, 20, 18, 3), 12, (7, 7), (2, 2), "SAME", "rows_outer/ldr64"),     # the 7x7x3 stem's pre-padded rows
    ((1, 5, 6, 24), 8, (1, 1), (1, 1), "VALID", "rows_outer/ldr64"),      # half tail, 2 blocks: no loop
    ((1, 4, 7, 72), 12, (1, 1), (1, 1), "VALID", "weights_outer/ldr64"),  # half tail after the loop, 5 blocks
]
HALF_TAIL = {8, 9, 10}  # the cases whose last block's high half is zero weights: the smull-only last step


def _case(i, xs, co, kk, stride, padding, schedule):
    from edge_sdk.compiler.int8 import gemm_int8_smull_neon as g8
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.int8.gemm_int8_widen16 import ConvGeom
    from edge_sdk.quant import int8 as q8

    rng = np.random.default_rng(700 + i)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-127, 128, (co, *kk, xs[-1])).astype(np.int8)
    w.reshape(-1)[::7] = -127
    x.reshape(-1)[::5] = -128
    bias = rng.integers(-20000, 20000, co).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    shift = -rng.integers(6, 12, co)
    rq = q8.Requant(in_zp=int(rng.integers(-128, 128)), multiplier=mult, shift=shift,
                    out_zp=int(rng.integers(-20, 20)), act=(-128, 127))
    win = q8.Window(stride, (1, 1), padding)
    oh, ow, pads = win.place(xs, *kk)
    geom = ConvGeom(tuple(stride), (1, 1), pads, (oh, ow))
    w_hwio = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
    func, wp, npad = g8.conv_gemm8(xs, w_hwio, rq, geom=geom, name="k", schedule=schedule)
    consts = np.zeros((3, npad), np.int32)
    consts[:, :co] = kernels._folded_bias(bias, w_hwio.reshape(-1, co), rq.in_zp, 0), mult, -shift
    k = kernels.Kernel(func, [wp, *consts], (xs[0] * oh * ow, npad))
    return x, k, q8.conv2d(x, w, bias, rq, win)


def _calls_tile(func, half_tail: bool = False) -> bool:
    from edge_sdk.compiler.int8 import gemm_int8_a53_ldr64 as a53

    text = func.body.script()
    return a53.NAME in text and any(f"{a53.NAME}_nb{nb}h" in text for nb in range(2, 64)) == half_tail


def _unrolled(lines: list[str]) -> list[str]:
    """The kernel's lines with its two-step loop body repeated as often as it runs."""
    counts = [int(x.split("#")[1]) for x in lines if x.startswith("mov x13, #")]  # the loop's iterations
    if not counts:
        return lines
    body = lines[lines.index("1:") + 1:lines.index("b.ne 1b")]
    return lines[:lines.index("1:")] + body * counts[0] + lines[lines.index("b.ne 1b") + 1:]


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
def test_a53_ldr64_tile_under_qemu_equals_reference():
    cases = [_case(i, *c) for i, c in enumerate(CASES)]
    for i, (_, k, _) in enumerate(cases):
        assert _calls_tile(k.func, i in HALF_TAIL) and k.consts[0].dtype == np.int8  # the tile on int8 weights
    out = _run_pi3([k for _, k, _ in cases], [x for x, _, _ in cases])
    at = 0
    for case, (_, k, ref) in zip(CASES, cases):
        size = int(np.prod(k.out_shape))
        got = out[at:at + size].reshape(k.out_shape)[:, :ref.shape[-1]].reshape(ref.shape)
        at += size
        np.testing.assert_array_equal(got, ref, err_msg=str(case))
    assert at == out.size


@pytest.mark.parametrize("nb", [1, 2, 3, 4, 5, 9, 36])
def test_a53_ldr64_tile_text_follows_ncnn_load_pattern(nb):
    """Every operand after the first step is ldr d + ldr x + ins (no 128-bit load), 48 multiply /
    accumulate ops a step, the first step's accumulates without an addend (saddlp)."""
    from edge_sdk.compiler.int8 import gemm_int8_a53_ldr64 as a53

    lines = _unrolled(a53.kernel_lines(nb))
    ops = [x.split()[0] for x in lines]
    assert ops.count("smull") == ops.count("smlal2") == 16 * nb
    assert ops.count("saddlp") == 16 and ops.count("sadalp") == 16 * (nb - 1)
    assert ops.count("ldr") == 16 * (nb - 1)  # ldr d + ldr x per operand of steps 1.. (C stored, never read)
    assert ops.count("str") == 4 and not [x for x in lines if x.startswith("add v")]
    assert sum(x.startswith("ldr d") for x in lines) == ops.count("ins") == 8 * (nb - 1)
    steps = lines[4:-len(a53._reduce_store())]  # after step 0's ldp q, before the lane sums
    assert not [x for x in steps if x.startswith(("ldr q", "ldp q", "ld1"))]


@pytest.mark.parametrize("nb", [2, 3, 5, 11, 36])
def test_a53_ldr64_half_tail_drops_the_last_steps_high_halves(nb):
    """The half tail: the last step is smull alone (no smlal2), its operands' high halves never loaded (no ldr x
    or ins past the loop for them); every other step as before."""
    from edge_sdk.compiler.int8 import gemm_int8_a53_ldr64 as a53

    full, half = _unrolled(a53.kernel_lines(nb)), _unrolled(a53.kernel_lines(nb, half_tail=True))
    ops = [x.split()[0] for x in half]
    assert ops.count("smull") == 16 * nb and ops.count("smlal2") == 16 * (nb - 1)
    assert ops.count("saddlp") + ops.count("sadalp") == 16 * nb
    assert ops.count("ins") < [x.split()[0] for x in full].count("ins")
    assert a53.func_name(nb, True) == f"{a53.NAME}_nb{nb}h" and a53.func_name(nb) == f"{a53.NAME}_nb{nb}"


def test_ldr64_is_a_gemm8_candidate_beside_the_llvm_steps():
    import edge_sdk.compiler.choice.int8  # noqa: F401  (registers the int8.gemm8 schedules)
    from edge_sdk.compiler.choice import candidates

    base = {"x": [1, 28, 28, 256], "w": [1, 1, 256, 256], "stride": [1, 1], "dilation": [1, 1], "out_hw": [28, 28]}
    got = candidates("int8.gemm8", base)
    assert {"rows_outer/ldr64", "weights_outer/ldr64", "rows_outer/tmp"} <= set(got)
