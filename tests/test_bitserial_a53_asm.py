"""The A53 popc tile in assembly (compiler/bitserial/popc_a53.py): which layers take it, the generated code's
invariants, and exactness against the numpy reference under qemu -cpu cortex-a53 on the shapes that exercise
its loop structure (kernel rows, odd / short row loops, 1x1, stride 2, split planes, 2-bit weights). The
host path is untouched (the x86 schedule never takes it): tests/test_bitserial_a53_tile.py runs the host."""
import re
import shutil

import numpy as np
import pytest

from edge_sdk.compiler.bitserial import popc_a53
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import kernels as ops, schedule  # noqa: E402
from tests.test_bitserial_a53_tile import _case  # noqa: E402


def _spec(ab, wb, h, w, c, o, k, s, gb):
    return dict(batch=1, height=h, width=w, channels=c, filters=o, kernel=k, stride=s, padding=(k - 1) // 2,
                a_bits=ab, w_bits=wb, mode="unipolar", word="uint16", glue_out_bits=gb, out_word="uint16")


def _uses_asm(spec: dict, arch: str) -> bool:
    spec = dict(spec, w_group=schedule.weight_group(spec, arch="aarch64"))
    return popc_a53.PREFIX in ops.conv2d_prim_func(arch=arch, **spec).script()


def test_which_layers_take_the_assembly_tile():
    """aarch64 with grouped weights and a long enough reduction; never x86, never ungrouped weights."""
    r18 = _spec(2, 1, 14, 14, 256, 256, 3, 1, 2)
    assert _uses_asm(r18, "aarch64")
    assert not _uses_asm(r18, "x86_64")
    flat = dict(r18, w_group=0)
    assert popc_a53.PREFIX not in ops.conv2d_prim_func(arch="aarch64", **flat).script()
    assert not _uses_asm(_spec(2, 1, 9, 9, 64, 48, 1, 2, None), "aarch64")  # 1x1 over 4 words: too short
    assert not _uses_asm(_spec(2, 1, 8, 8, 256, 256, 1, 1, 2), "aarch64")  # 16 words
    assert not _uses_asm(_spec(2, 1, 7, 7, 512, 512, 3, 1, 2), "aarch64")  # 7 px x 2 q: 2 weight registers


@pytest.mark.parametrize("tile", [(2, 2, 1, 4), (7, 1, 1, 2), (4, 1, 1, 4), (1, 2, 1, 8), (2, 2, 2, 2), (4, 1, 1, 2)])
def test_generated_kernel_invariants(tile):
    """Register budget, the rotation's temporaries, one ins per ldr x, the accumulators each stored once."""
    t = popc_a53.AsmTile(*tile, kh=3, steps=12, a_bits=2)
    assert popc_a53.fits(t)
    temps, d = t.rotation
    assert temps > 2 * d and t.m % temps == 0 and t.nb + t.k + temps <= 16
    lines = popc_a53.kernel_lines(t)
    regs = {int(r) for ln in lines for r in re.findall(r"\bv(\d+)\.", ln)}
    assert max(regs) <= 31 and all(16 <= r < 16 + t.m or r < 16 for r in regs)
    gpr_loads = [ln for ln in lines if re.match(r"ldr x\d+, ", ln)]
    assert len(gpr_loads) == sum(ln.startswith("ins ") for ln in lines)
    stored = [int(r) for ln in lines if ln.startswith("st") for r in re.findall(r"\bq(\d+)", ln)]
    assert sorted(stored) == list(range(16, 16 + t.m))


# (ab, wb, h, w, c, o, k, stride, glue_bits): 2 px x 2 planes x 4 q over 3 rows of 12 steps; w1a1's 4 pixels;
# a 1x1 of 32 steps (one kernel row); 3x3 stride 2; 2-bit weights; an odd row loop (3x3 over 96 channels: 18
# steps, 17 in the loop); int32 output
ASM_CASES = [
    (2, 1, 6, 6, 64, 64, 3, 1, 2),
    (1, 1, 8, 8, 64, 64, 3, 1, 1),
    (2, 1, 8, 8, 512, 64, 1, 1, 2),
    (2, 1, 8, 8, 64, 64, 3, 2, 2),
    (2, 2, 6, 6, 64, 32, 3, 1, 2),
    (2, 1, 6, 6, 96, 32, 3, 1, 2),
    (2, 1, 6, 6, 64, 64, 3, 1, None),
]


@pytest.mark.parametrize("case", ASM_CASES, ids=[f"a{c[0]}w{c[1]}-{c[3]}w-{c[4]}to{c[5]}k{c[6]}s{c[7]}-"
                                                  f"{'int32' if c[8] is None else 'fused'}" for c in ASM_CASES])
def test_the_cases_take_the_assembly_tile(case):
    assert _uses_asm(_spec(*case), "aarch64")


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("case", ASM_CASES, ids=[f"a{c[0]}w{c[1]}-{c[3]}w-{c[4]}to{c[5]}k{c[6]}s{c[7]}-"
                                                  f"{'int32' if c[8] is None else 'fused'}" for c in ASM_CASES])
def test_assembly_tile_matches_reference_under_qemu(case):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tests.pi3_run import run_prim_func_on_pi3

    ab, wb, h, w, c, o, k, s, gb = case
    spec, ins, ref = _case(ab=ab, wb=wb, h=h, w=w, c=c, o=o, k=k, stride=s, glue_bits=gb, grouped=True)
    func = ops.conv2d_prim_func(arch=pi3.arch, **spec).with_attrs({"global_symbol": "conv", "op_pattern": 8})
    assert popc_a53.PREFIX in func.script()
    out = run_prim_func_on_pi3(func, ins, ref.shape, str(ref.dtype))
    np.testing.assert_array_equal(out, ref)
