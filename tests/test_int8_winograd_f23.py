"""The exact int8 Winograd F(2x2, 3x3) (compiler/int8/winograd_int8_f23.py, the int8.gemm8 candidate
"winograd_f23") under qemu for pi3 against the numpy int8 reference (quant/int8.py, itself checked against
TFLite BUILTIN_REF): SAME and VALID, odd output sizes (a partial last tile), batch 2, a tile count that is
not a multiple of 8, channel padding, and the extreme operands (x = -128 everywhere, weights -128 / 127)
that reach the transforms' int16 bounds."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from test_int8_gemm_smull_neon import _run_pi3

# (x shape, co, padding, extreme operands)
CASES = [
    ((1, 6, 8, 16), 8, "SAME", False),     # 3 x 4 = 12 tiles: one full block of 8 and a padded one
    ((1, 7, 7, 24), 20, "SAME", False),    # odd output: the last tile row/column half outside; CO 20 -> 24
    ((1, 9, 10, 8), 24, "VALID", False),   # 7 x 8 out, no padding taps
    ((2, 5, 6, 32), 8, "SAME", False),     # batch 2: tiles of both images in one block
    ((1, 8, 6, 64), 16, "SAME", True),     # x = -128, w in {-128, 127}: |V| = 512, |U| = 1152
    ((1, 9, 8, 64), 72, "SAME", False),    # 5 x 4 = 20 tiles, 3 blocks; CI, CO >= 64: "default" is blocked
]


def _case(i, xs, co, padding, extreme, schedule="winograd_f23"):
    from edge_sdk.compiler.int8 import gemm_int8_smull_neon as g8
    from edge_sdk.compiler.int8 import kernels
    from edge_sdk.compiler.int8.gemm_int8_widen16 import ConvGeom
    from edge_sdk.quant import int8 as q8

    rng = np.random.default_rng(500 + i)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-128, 128, (co, 3, 3, xs[-1])).astype(np.int8)
    if extreme:
        x[:] = -128
        w = np.where(rng.random(w.shape) < 0.5, -128, 127).astype(np.int8)
    bias = rng.integers(-20000, 20000, co).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, co).astype(np.int32)
    shift = -rng.integers(6, 14, co)
    rq = q8.Requant(in_zp=int(rng.integers(-128, 128)), multiplier=mult, shift=shift,
                    out_zp=int(rng.integers(-20, 20)), act=(-128, 127))
    win = q8.Window((1, 1), (1, 1), padding)
    oh, ow, pads = win.place(xs, 3, 3)
    geom = ConvGeom((1, 1), (1, 1), pads, (oh, ow))
    w_hwio = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
    func, up, npad = g8.conv_gemm8(xs, w_hwio, rq, geom=geom, name="k", schedule=schedule)
    consts = np.zeros((3, npad), np.int32)
    consts[:, :co] = kernels._folded_bias(bias, w_hwio.reshape(-1, co), rq.in_zp, 0), mult, -shift
    k = kernels.Kernel(func, [up, *consts], (xs[0] * oh * ow, npad))
    return x, k, q8.conv2d(x, w, bias, rq, win)


@pytest.mark.qemu
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user")
@pytest.mark.parametrize("schedule", ["winograd_f23", "winograd_f23/g1", "winograd_f23/g2", "winograd_f23/g3",
                                      "winograd_f23/g1/a53", "winograd_f23/g2/a53", "winograd_f23/g3/a53",
                                      "winograd_f23/g1/a53v", "winograd_f23/g2/a53v", "winograd_f23/g3/a53v", "default"])
def test_winograd_f23_under_qemu_equals_reference(schedule):
    """The whole-tensor stages and the blocked ones (winograd_int8_f23_blocked: V per group of G tile blocks,
    M per tile block; G = 2 and 3 leave a partial group on the 1- and 2-block cases), with the LLVM smlal step
    or the assembly ones ("/a53": winograd_int8_a53_smlal by lane over tiles, CI 8 .. 64 covers no loop, a
    loop and a tail of 1-3 steps; "/a53v": by lane over channels, CI 8 .. 64 is 1, 2, 3, 4 and 8 channel blocks:
    no block loop, an empty one and 1-6 turns); "default": the rule (the 8-bit GEMM below 64 channels, the
    blocked Winograd with the channel step on the last case)."""
    # the 8-bit GEMM that "default" gives below 64 channels takes weights in [-127, 127] only (TFLite's)
    chosen = [(i, c) for i, c in enumerate(CASES) if schedule != "default" or not c[3]]
    cases = [_case(i, *c, schedule) for i, c in chosen]
    for _, k, _ in cases if schedule != "default" else cases[-1:]:
        assert k.consts[0].dtype == np.int16 and k.consts[0].shape[1] == 16  # the transformed weights
    out = _run_pi3([k for _, k, _ in cases], [x for x, _, _ in cases])
    at = 0
    for (_, case), (_, k, ref) in zip(chosen, cases):
        size = int(np.prod(k.out_shape))
        got = out[at:at + size].reshape(k.out_shape)[:, :ref.shape[-1]].reshape(ref.shape)
        at += size
        np.testing.assert_array_equal(got, ref, err_msg=str(case))
    assert at == out.size


def test_winograd_f23_is_offered_only_for_3x3_stride_1():
    from edge_sdk.compiler.choice import candidates

    base = {"x": [1, 28, 28, 64], "w": [3, 3, 64, 64], "stride": [1, 1], "dilation": [1, 1], "out_hw": [28, 28]}
    assert "winograd_f23" in candidates("int8.gemm8", base)
    assert "winograd_f23" not in candidates("int8.gemm8", base | {"stride": [2, 2], "out_hw": [14, 14]})
    assert "winograd_f23" not in candidates("int8.gemm8", base | {"w": [1, 1, 64, 64]})
    assert "winograd_f23" not in candidates("int8.gemm8", base | {"x": [1, 4, 4, 64], "out_hw": [4, 4]})


def test_winograd_f23_default_groups():
    """Small groups where U fits the L2, one group where it does not (the layers priced in the docstring)."""
    from edge_sdk.compiler.int8 import winograd_int8_f23_blocked as f23b

    assert f23b.default_group(64, 64, 98) == 2 and f23b.default_group(128, 128, 25) == 2
    assert f23b.default_group(256, 256, 7) == 7 and f23b.default_group(512, 512, 2) == 2
    assert f23b.default_group(64, 64, 1) == 1
    assert f23b.parse_group("winograd_f23/g7") == 7 and f23b.parse_group("winograd_f23") is None
    assert f23b.parse_group("winograd_f23/g7/a53") == 7 and f23b.parse_asm("winograd_f23/g7/a53")
    assert not f23b.parse_asm("winograd_f23/g7") and not f23b.parse_asm("winograd_f23/a53")
    assert f23b.parse_group("winograd_f23/g2/a53v") == 2 and f23b.parse_vt("winograd_f23/g2/a53v")
    assert not f23b.parse_vt("winograd_f23/g2/a53")


@pytest.mark.parametrize("ci", [8, 16, 24, 64, 512])
def test_a53_smlal_channel_step_text(ci):
    """The by-lane-over-channels step for 16 positions: 16 x CI steps of 16 multiplies (smull at each
    position's first), every operand after the first loaded as ldr d + ldr x + ins, 16 stores a position."""
    from edge_sdk.compiler.int8 import winograd_int8_a53_smlal as a53s

    lines = a53s.kernel_lines_cl(ci, 16)
    # the text: position 0, the loop body of positions 1-14, position 15; each the first, the loop body of the
    # middle and the last 8-channel block
    assert sum(x.startswith("smull") for x in lines) == 16 * 3
    assert sum(x.startswith(("smull", "smlal")) for x in lines) == 3 * 16 * 8 * min(ci // 8, 3)
    assert sum(x.startswith("str q") for x in lines) == 16 * 3
    assert sum(x.startswith("ldp q") for x in lines) == 5
    assert not any(x.startswith("ldr q") for x in lines)
    ldrd, ins = sum(x.startswith("ldr d") for x in lines), sum(x.startswith("ins") for x in lines)
    assert ldrd == ins


@pytest.mark.parametrize("ci", [1, 2, 3, 4, 5, 6, 7, 64, 65, 66, 512])
def test_a53_smlal_step_text(ci):
    """The assembly step's text: CI steps of 16 by-lane multiplies (the first smull), every operand loaded
    once (ldr q for the first two steps, then ldr d + ldr x + ins), no 128-bit load inside the loop."""
    from edge_sdk.compiler.int8 import winograd_int8_a53_smlal as a53s

    lines = a53s.kernel_lines(ci)
    muls = [x for x in lines if x.startswith(("smull", "smlal"))]
    n_loop = int(next((x.split("#")[1] for x in lines if x.startswith("mov x11")), 0))
    body = lines[lines.index("1:") + 1:lines.index("b.ne 1b")] if n_loop else []
    assert len(muls) + (n_loop - 1) * sum(x.startswith("smlal") for x in body) == 16 * ci
    assert sum(x.startswith("smull") for x in lines) == 16
    ldrd = sum(x.startswith("ldr d") for x in lines) + (n_loop - 1) * sum(x.startswith("ldr d") for x in body)
    assert ldrd == 2 * max(0, ci - 2)
    assert not any(x.startswith(("ldr q", "ldp q")) for x in body)
    assert sum(x.startswith("str q") for x in lines) == 16
    # the blocked kernel's call: a tile block's 16 positions one after another, each position's stores
    # beside the next one's first step
    lines16 = a53s.kernel_lines(ci, 16)
    assert sum(x.startswith("smull") for x in lines16) == 16 * 16
    assert sum(x.startswith("str q") for x in lines16) == 16 * 16
    assert sum(x.startswith(("ldr q", "ldp q")) for x in lines16) == (4 if 16 * ci > 1 else 2)
