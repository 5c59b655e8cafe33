"""Float kernels re-decided for the A53 (issue 13), against numpy in float64, on pi3 under qemu.

GEMMs whose row tiles run inside the weight panels (conv2d._rows_outer False) copy A once into
row-tile panels (mp/mr, K, mr); only the NEON schedule does, so these run on pi3 (our runner under
qemu, Cortex-A53). No speed is asserted.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.compiler.ops import conv1x1_gemm_a53 as a53
from edge_sdk.compiler.ops import conv1x1_gemm_a53_12x8 as a53_12x8
from edge_sdk.compiler.ops import conv1x1_gemm_a53_epilogue as a53_epi
from edge_sdk.compiler.ops import conv2d as conv_ops
from edge_sdk.compiler.ops.common import Epilogue, round_up, simd_of
from edge_sdk.targets import get_target

sys.path.insert(0, str(Path(__file__).parent))
from test_float_fusions import run_prim_pi3  # noqa: E402

RNG = np.random.default_rng(1313)
# (m, k, n, residual): a row tail (37, 61 rows), panels blocked (nb >= 2), weights bigger than A
CASES = [(37, 160, 96, False), (61, 128, 256, True), (49, 96, 512, False)]


@pytest.mark.qemu
@pytest.mark.parametrize("m,k,n,residual", CASES)
def test_packed_rows_gemm_on_pi3_under_qemu(m, k, n, residual):
    simd = simd_of(get_target("pi3").tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    assert not conv_ops._rows_outer((m, k, n, nr), simd)  # the packed path runs
    a = RNG.standard_normal((m, k)).astype("float32")
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    b = RNG.standard_normal(n).astype("float32")
    r = RNG.standard_normal((m, n)).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(("relu",), residual), nr=nr, name="t_a53_gemm")
    rp = np.zeros((m, npad), "float32")
    rp[:, :n] = r
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([rp] if residual else [])
    out = run_prim_pi3(func, args, (m, npad))[:, :n]
    ref = np.maximum(a.astype("float64") @ w + b + (r if residual else 0), 0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


# The A53 8x8 tile in assembly (conv1x1_gemm_a53): K = 66 (the loop once per two steps, then the
# two-step tail), K = 130 with a row tail (37 rows -> 40) and a residual, K = 512 over several weight
# panels (MobileNetV1's 14x14 pointwise shape, fewer rows); rows outer (weights in L1, the row panel
# packed per tile), 49 rows padded to 56; K = 129 (odd) and K = 32 (< MIN_K) keep LLVM's tile.
A53_CASES = [(16, 66, 64, False, True), (37, 130, 96, True, True), (24, 512, 512, False, True),
             (40, 129, 64, False, False), (200, 64, 32, True, True), (49, 96, 40, False, True),
             (64, 32, 64, False, False)]


def _calls(func, name: str) -> bool:
    return name in func.body.script()  # the PrimFunc's body (its workload attribute does not print)


@pytest.mark.qemu
@pytest.mark.parametrize("m,k,n,residual,asm", A53_CASES + [(37, 130, 96, True, "default+llvm_tile")])
def test_a53_asm_tile_gemm_on_pi3_under_qemu(m, k, n, residual, asm):
    simd = simd_of(get_target("pi3").tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    a = RNG.standard_normal((m, k)).astype("float32")
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    b = RNG.standard_normal(n).astype("float32")
    r = RNG.standard_normal((m, n)).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    # the accumulator-tile path by its order's name (the rule's "default" now takes the epilogue tiles where
    # they apply: test_a53_12x8_and_epilogue_tiles_gemm_on_pi3_under_qemu)
    schedule = asm if isinstance(asm, str) else conv_ops.gemm_order((m, k, round_up(n, nr), nr), simd)
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(("clip", 0.0, 6.0), residual), nr=nr, name="t_a53_asm",
                         schedule=schedule)
    assert _calls(func, a53.NAME) == (asm is True)  # the assembly tile is (or is not) what runs
    rp = np.zeros((m, npad), "float32")
    rp[:, :n] = r
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([rp] if residual else [])
    out = run_prim_pi3(func, args, (m, npad))[:, :n]
    ref = np.clip(a.astype("float64") @ w + b + (r if residual else 0), 0, 6)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


# The A53 12x8 tile (conv1x1_gemm_a53_12x8), by schedule: K = 66 over two exact row tiles; a row tail (40 ->
# 48) with a residual and K = 130; 49 rows padded to 60 over 5 panels; K = 512 over 64 panels in each loop
# order (the row panel packed per tile, all of A first, blocks of panels). Then both tiles with the epilogue
# in the tile (conv1x1_gemm_a53_epilogue): bias, residual, clip / relu / none, rows past m not stored, each
# loop order (panel pairs where the rule's block is one panel).
_T12, _E12, _E8 = conv_ops.TILE_12X8, "+a53_12x8_epilogue", "+a53_8x8_epilogue"
_CLIP = ("clip", 0.0, 6.0)
A53_12X8_CASES = [(24, 66, 64, False, "default" + _T12, _CLIP), (40, 130, 96, True, "rows_outer" + _T12, _CLIP),
                  (49, 96, 40, False, "default" + _T12, _CLIP), (36, 512, 512, False, "panels_outer" + _T12, _CLIP),
                  (60, 64, 256, False, "panel_blocks" + _T12, _CLIP),
                  (40, 130, 96, True, "rows_outer" + _E12, _CLIP), (49, 96, 40, False, "panels_outer" + _E12, ("relu",)),
                  (44, 512, 64, True, "panel_blocks" + _E12, ("none",)), (61, 128, 48, True, "rows_outer" + _E8, _CLIP),
                  (16, 66, 64, False, "panel_blocks" + _E8, ("relu",)),
                  (40, 96, 24, False, "rows_outer" + _E12, ("none",))]  # K = 96, output rows 96 bytes apart


def _kernel_of(schedule: str, act: tuple, residual: bool) -> str:
    tile = a53 if "8x8" in schedule else a53_12x8
    if "epilogue" in schedule:
        return a53_epi.kernel_name(tile, a53_epi.clamp_of(act) is not None, residual)
    return tile.NAME


@pytest.mark.qemu
@pytest.mark.parametrize("m,k,n,residual,schedule,act", A53_12X8_CASES)
def test_a53_12x8_and_epilogue_tiles_gemm_on_pi3_under_qemu(m, k, n, residual, schedule, act):
    simd = simd_of(get_target("pi3").tvm_target())
    nr = conv_ops.choose_nr(simd, m, n, k)
    a = RNG.standard_normal((m, k)).astype("float32")
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    b = RNG.standard_normal(n).astype("float32")
    r = RNG.standard_normal((m, n)).astype("float32")
    wp = conv_ops.pack_gemm_weight(w, nr)
    npad = wp.shape[0] * nr
    func = conv_ops.gemm(m, k, npad, simd, epi=Epilogue(act, residual), nr=nr, name="t_a53_12x8", schedule=schedule)
    kernel = _kernel_of(schedule, act, residual)
    assert _calls(func, kernel + '"') and not _calls(func, (a53.NAME if kernel.startswith(a53_12x8.NAME) else a53_12x8.NAME))
    rp = np.zeros((m, npad), "float32")
    rp[:, :n] = r
    args = [a, wp, conv_ops.pad_bias(b, npad)] + ([rp] if residual else [])
    out = run_prim_pi3(func, args, (m, npad))[:, :n]
    y = a.astype("float64") @ w + b + (r if residual else 0)
    ref = np.clip(y, 0, 6) if act[0] == "clip" else np.maximum(y, 0) if act[0] == "relu" else y
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_rule_takes_the_epilogue_tile_with_the_cheaper_padded_loop():
    """The rule's schedule: 12x8 where its padded rows cost fewer modelled loop cycles (196 -> 204 rows), 8x8
    where not (49 -> 56 vs 60), rows outer while the weights fit half the L2, else panel pairs (single panels
    where the output is under a quarter of the weights); the old tile
    (and its epilogue pass) where the tile cannot apply the activation, LLVM's tile below the tiles' K."""
    simd = simd_of(get_target("pi3").tvm_target())
    clip = Epilogue(_CLIP)
    assert a53_epi.rule(196, 512, 512, 8, simd, clip) == "panel_blocks+a53_12x8_epilogue"
    assert a53_epi.rule(3136, 128, 128, 8, simd, clip) == "rows_outer+a53_12x8_epilogue"
    assert a53_epi.rule(49, 512, 1024, 8, simd, clip) == "panels_outer+a53_8x8_epilogue"  # 4 x 49 < K
    assert a53_epi.rule(49, 1024, 1024, 8, simd, clip) is None  # few rows, long K: the accumulator tile
    assert a53_epi.rule(196, 512, 512, 8, simd, Epilogue(("swish",))) is None
    assert a53_epi.rule(196, 8, 512, 8, simd, clip) is None  # K < conv1x1_gemm_a53_epilogue.MIN_K
    func = conv_ops.gemm(196, 512, 512, simd, epi=clip, nr=8)
    assert _calls(func, a53_epi.kernel_name(a53_12x8, True, False) + '"')
    assert _calls(conv_ops.gemm(196, 512, 512, simd, epi=Epilogue(("swish",)), nr=8), a53.NAME + '"')


def test_a53_epilogue_tile_applies_to_bias_activations_it_clamps():
    assert a53_epi.clamp_of(("clip", 0.0, 6.0)) == (0.0, 6.0) and a53_epi.clamp_of(("none",)) is None
    assert a53_epi.applies(Epilogue(("relu",), True)) and not a53_epi.applies(Epilogue(("relu",), False, True))
    assert not a53_epi.applies(Epilogue(("swish",))) and not a53_epi.applies(Epilogue(("prelu",)))
    # a GEMM whose epilogue the tile cannot apply keeps the accumulator tile and its epilogue pass
    func = conv_ops.gemm(196, 512, 512, simd_of(get_target("pi3").tvm_target()), epi=Epilogue(("swish",)), nr=8,
                         schedule="default" + _E12)
    assert not _calls(func, "_bias")
    tail = a53_epi.tail_lines(a53_12x8, True, True)
    assert sum(x.startswith("stp") for x in tail) == 12 and sum(x == "b.eq 3f" for x in tail) == 11


def test_a53_12x8_tile_text_follows_ncnn_load_pattern():
    """Per step 24 fmla and 5 operands, each as ldr d + ldr x + ins (no ldr q in the loop); every ldr d but
    the one after the loop's branch target sits beside the previous ins; the branch follows an fmla."""
    lines = a53_12x8.kernel_lines()
    loop = lines[lines.index("1:") + 1:lines.index("b.ne 1b") + 1]
    assert sum(x.startswith("fmla") for x in loop) == 48
    assert not [x for x in loop if x.startswith(("ldr q", "ldp q", "ld1"))]
    assert sum(x.startswith("ldr d") for x in loop) == sum(x.startswith("ins") for x in loop) == 10
    assert all(loop[i + 1].startswith("ins") for i, x in enumerate(loop) if x.startswith("ldr d"))
    assert loop[-2].startswith("fmla")
    # the loop carries no accumulator dependence shorter than a step: each accumulator once per 24 fmla
    accs = [x.split()[1] for x in loop if x.startswith("fmla")]
    assert len(set(accs[:24])) == 24 and accs[:24] == accs[24:]


def test_a53_12x8_tile_is_a_gemm_candidate_where_it_applies():
    from edge_sdk.compiler.choice import candidates

    base = {"n": 512, "nr": 8, "isa": "neon", "act": ["relu"], "residual": False, "gate": False}
    assert "default+a53_12x8" in candidates("float.gemm", base | {"m": 196, "k": 512})
    assert "rows_outer+a53_12x8" in candidates("float.gemm", base | {"m": 49, "k": 512})  # 49 -> 60 rows
    assert "default+a53_12x8" not in candidates("float.gemm", base | {"m": 13, "k": 512})  # 13 -> 24: > 25 %
    assert "default+a53_12x8" not in candidates("float.gemm", base | {"m": 196, "k": 32})
    assert "default+a53_12x8" not in candidates("float.gemm", base | {"m": 196, "k": 512, "isa": "avx2"})
    assert {"panel_blocks+a53_12x8_epilogue", "rows_outer+a53_8x8_epilogue"} <= set(
        candidates("float.gemm", base | {"m": 196, "k": 512}))
    assert "rows_outer+a53_8x8_epilogue" not in candidates("float.gemm", base | {"m": 196, "k": 512, "act": ["swish"]})
    with pytest.raises(ValueError, match="unknown GEMM tile"):
        conv_ops.gemm(196, 512, 512, simd_of(get_target("pi3").tvm_target()), nr=8, schedule="default+a53_16x8")


def test_a53_asm_tile_text_follows_ncnn_load_pattern():
    """Every 128-bit operand is loaded as ldr d + ldr x + ins (no ldr q in the loop), 16 fmla a step."""
    lines = a53.kernel_lines()
    loop = lines[lines.index("1:") + 1:lines.index("b.ne 1b")]
    assert sum(x.startswith("fmla") for x in loop) == 32
    assert not [x for x in loop if x.startswith(("ldr q", "ldp q", "ld1"))]
    assert sum(x.startswith("ldr d") for x in loop) == sum(x.startswith("ins") for x in loop) == 8


def test_llvm_tile_stays_a_gemm_candidate_where_the_asm_tile_is_the_rule():
    from edge_sdk.compiler.choice import candidates

    base = {"n": 512, "nr": 8, "isa": "neon", "act": ["relu"], "residual": False, "gate": False}
    assert "default+llvm_tile" in candidates("float.gemm", base | {"m": 196, "k": 512})
    assert "default+llvm_tile" not in candidates("float.gemm", base | {"m": 196, "k": 32})
    assert "default+llvm_tile" not in candidates("float.gemm", base | {"m": 196, "k": 512, "isa": "avx2"})
