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


def _case(i, xs, co, kk, stride, padding, schedule, relu=False):
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
    out_zp = int(rng.integers(-20, 20))
    rq = q8.Requant(in_zp=int(rng.integers(-128, 128)), multiplier=mult, shift=shift,
                    out_zp=out_zp, act=(out_zp, 127) if relu else (-128, 127))
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


# the strip kernel (gemm_int8_a53_strip, step "strip"): (x shape, co, kernel, stride, padding, schedule); the
# strips cover odd and even block counts (the two-tile loop body), one / two / many tiles, both shared operands
STRIP_CASES = [
    ((1, 7, 5, 32), 20, (1, 1), (1, 1), "VALID", "rows_outer/strip"),      # 2 blocks, 5 channel tiles: no tile loop
    ((1, 4, 5, 48), 10, (1, 1), (1, 1), "VALID", "weights_outer/strip"),   # 3 blocks, 5 row tiles (odd nb: 2-tile body)
    ((2, 3, 5, 64), 32, (1, 1), (1, 1), "VALID", "rows_outer/strip"),      # 4 blocks, 8 tiles a strip: the tile loop
    ((1, 6, 6, 80), 8, (1, 1), (1, 1), "VALID", "rows_outer/strip"),       # 5 blocks, 2 tiles: first and last only
    ((1, 5, 7, 144), 24, (1, 1), (1, 1), "VALID", "weights_outer/strip"),  # 9 blocks, the inner loop in every tile
    ((1, 3, 3, 512), 48, (1, 1), (1, 1), "VALID", "rows_outer/strip"),     # 32 blocks, 12 tiles: 2 strips of 6
    ((1, 6, 7, 16), 12, (3, 3), (2, 2), "SAME", "weights_outer/strip"),   # 3x3 stride 2, padding taps
    ((1, 20, 18, 3), 16, (7, 7), (2, 2), "SAME", "rows_outer/strip"),     # the stem's pre-padded rows, half tail, nb 11
    ((1, 4, 7, 72), 12, (1, 1), (1, 1), "VALID", "weights_outer/strip"),   # half tail after the inner loop, 5 blocks
    # rows outer, whole row tiles, 4k tiles a strip: the requantize in requant_int8_a53_rows' assembly
    ((1, 4, 4, 32), 64, (1, 1), (1, 1), "VALID", "rows_outer/strip"),     # 16 tiles: its two-group loop 3 times
    ((1, 2, 6, 48), 16, (1, 1), (1, 1), "VALID", "rows_outer/strip"),     # 4 tiles: one body, no loop
    ((1, 16, 16, 3), 32, (7, 7), (2, 2), "SAME", "rows_outer/strip"),     # the stem's rows, 8 tiles, ReLU clamp
]
RELU = {11}  # STRIP_CASES with a ReLU (lo = the output zero point)
REQUANT_ASM = {9, 10, 11}


def _unrolled_all(lines: list[str]) -> list[str]:
    """The strip kernel's lines with every loop (tile loop "2:", inner loop "1:") repeated as often as it runs."""
    def expand(ls, label, counter):
        out, i = [], 0
        while i < len(ls):
            if ls[i] == f"{label}:":
                n = int(out.pop().split("#")[1])  # the "mov counter, #n" just before the label
                end = ls.index(f"b.ne {label}b", i)
                body = ls[i + 1:end - 1]  # without the subs / b.ne
                out += body * n
                i = end + 1
                continue
            out.append(ls[i])
            i += 1
        return out
    return expand(expand(lines, "2", "x17"), "1", "x13")


@pytest.mark.parametrize("nb,nt,half,shared", [(2, 1, False, "A"), (2, 2, False, "W"), (3, 5, False, "A"),
                                               (4, 8, False, "W"), (11, 16, True, "A"), (36, 7, False, "A"),
                                               (5, 4, True, "W")])
def test_strip_text_is_the_tile_nt_times(nb, nt, half, shared):
    """Unrolled, the strip is nt tiles of the ldr64 tile's operations: 16 nb smull a tile (smlal2 but for a half
    tail's last step), one saddlp a pair in step 0 and sadalp after, 12 addp and 4 stores a tile, no 128-bit load
    after the first step's, and every ldr d of a full operand followed by its ldr x and ins."""
    from edge_sdk.compiler.int8 import gemm_int8_a53_strip as strip8

    lines = _unrolled_all(strip8.kernel_lines(nb, nt, half, shared))
    ops = [x.split()[0] for x in lines]
    assert ops.count("smull") == 16 * nb * nt
    assert ops.count("smlal2") == 16 * (nb - (1 if half else 0)) * nt
    assert ops.count("saddlp") == 16 * nt and ops.count("sadalp") == 16 * (nb - 1) * nt
    assert ops.count("addp") == 12 * nt and ops.count("str") == 4 * nt
    assert ops.count("ins") == sum(x.startswith("ldr x") for x in lines) <= sum(x.startswith("ldr d") for x in lines)
    assert sum(x.startswith("ldr d") for x in lines) == 8 * (nb * nt - 1)  # every operand after tile 0's step 0
    assert not [x for x in lines[8:] if x.startswith(("ldr q", "ldp q", "ld1"))]
    # the shared operand's base register is never written: every tile reads the same rows (or weights)
    base = "$0" if shared == "A" else "$1"
    assert not [x for x in lines if x.split()[0] in ("add", "sub", "mov") and x.split()[1].rstrip(",") == base]


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
def test_a53_strip_under_qemu_equals_reference():
    cases = [_case(100 + i, *c, relu=i in RELU) for i, c in enumerate(STRIP_CASES)]
    for i, (_, k, _) in enumerate(cases):
        text = k.func.body.script()
        assert "edge_a53_i8gemm_strip" in text and ("edge_a53_requant_rows" in text) == (i in REQUANT_ASM)
    out = _run_pi3([k for _, k, _ in cases], [x for x, _, _ in cases])
    at = 0
    for case, (_, k, ref) in zip(STRIP_CASES, cases):
        size = int(np.prod(k.out_shape))
        got = out[at:at + size].reshape(k.out_shape)[:, :ref.shape[-1]].reshape(ref.shape)
        at += size
        np.testing.assert_array_equal(got, ref, err_msg=str(case))
    assert at == out.size


@pytest.mark.parametrize("nt", [4, 8, 16])
def test_requant_rows_text_each_vector_once_and_next_loads_64bit(nt):
    """requant_int8_a53_rows for 4 rows x 4nt channels: each of the 4nt/4 x 4 vectors through the 9 requantize ops
    once, 3 narrowing ops and one 8-byte store a row and group; after the first group's 128-bit loads every operand
    as ldr d + ldr x + ins (14 a group: bias, mult, shifts 2 each, C 8)."""
    from edge_sdk.compiler.int8 import requant_int8_a53_rows as rqa

    lines = _unrolled_all(rqa.kernel_lines(nt))
    ops = [x.split()[0] for x in lines]
    groups = nt // 2
    for mn in ("sqrdmulh", "sqadd", "srshl", "smin", "smax", "sshr", "and"):
        assert ops.count(mn) == 8 * groups, mn
    assert ops.count("str") == 4 * groups and ops.count("xtn2") == 4 * groups and ops.count("xtn") == 8 * groups
    assert ops.count("ins") == sum(x.startswith("ldr x") for x in lines) == sum(x.startswith("ldr d") for x in lines)
    assert ops.count("ins") == 14 * (groups - 1) and ops.count("ldp") == 7  # the first group: 3 params, 4 rows
    with pytest.raises(ValueError, match="multiple of 4"):
        rqa.kernel_lines(6)
