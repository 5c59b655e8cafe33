"""The float depthwise conv's software prefetch on the A53 (ops/prfm_pair_a53, depthwise._with_prefetch):
numerics against numpy under qemu (pi3), the PRFM text it emits, and that the host kernel has none."""
from __future__ import annotations

import pytest
import tvm

from edge_sdk.compiler.choice import candidates
from edge_sdk.compiler.ops import prfm_pair_a53
from edge_sdk.compiler.ops.common import Epilogue, simd_of
from edge_sdk.compiler.ops.depthwise import depthwise_conv2d
from edge_sdk.targets import get_target
from test_float_fusions import close, np_act, rand, ref_dw, run_prim_pi3

PI3 = get_target("pi3")


def _asm(func) -> str:
    func = func.without_attr("edge_sdk.workload")
    mod = tvm.IRModule({"k": func.with_attr("global_symbol", "k")})
    return tvm.tirx.build(mod, target=PI3.tvm_target()).inspect_source("asm")


# inputs >= prfm_pair_a53.MIN_INPUT_BYTES: 3x3 s1 pixels outer with a pixel tail (OW 37) and the bottom
# pad row; 3x3 s2 (two new rows a tile) on TF's asymmetric pad; channels outer (wide rows); a depth
# multiplier of 2
CASES = [((1, 30, 37, 64), 1, (1, 1, 1, 1), 1, ("relu",)),
         ((1, 46, 46, 32), 2, (0, 0, 1, 1), 1, ("clip", 0.0, 6.0)),
         ((1, 9, 29, 256), 1, (1, 1, 1, 1), 1, ("relu",)),
         ((1, 64, 66, 16), 1, (1, 1, 1, 1), 2, ("none",))]


@pytest.mark.qemu
@pytest.mark.parametrize("shape,s,pad,mult,act", CASES)
def test_prefetching_depthwise_on_pi3_under_qemu_matches_numpy(shape, s, pad, mult, act):
    c = shape[3] * mult
    x, w, b = rand(*shape), rand(3, 3, c), rand(c)
    func = depthwise_conv2d(shape, (3, 3), (s, s), pad, simd_of(PI3.tvm_target()), epi=Epilogue(act),
                            multiplier=mult, name="t_dw_pf")
    assert "edge_a53_prfm_" in func.body.script()  # the prefetch is in the kernel that runs
    xs = x.repeat(mult, axis=3) if mult > 1 else x
    ref = np_act(ref_dw(xs, w, b, (s, s), pad), act)
    close(run_prim_pi3(func, [x, w, b], ref.shape), ref)


def test_prfm_sits_in_its_own_block_beside_a_load_of_its_base():
    func = depthwise_conv2d((1, 56, 56, 128), (3, 3), (1, 1), (1, 1, 1, 1), simd_of(PI3.tvm_target()),
                            epi=Epilogue(("relu",)), name="t_dw_pf")
    text = _asm(func)
    lines = [ln.strip() for ln in text.splitlines()]
    at = [i for i, ln in enumerate(lines) if ln.startswith("prfm")]
    assert len(at) == 4  # one a new input pixel of the tile (4 pixels, stride 1)
    for i in at:
        base = lines[i].split("[")[1].split(",")[0]
        assert lines[i].endswith(f"#{2 * 4 * 128 * 4}]")  # two tiles of 4 pixels x 128 channels ahead
        assert lines[i + 1] == f"ldr\twzr, [{base}]"
    assert lines[at[0] - 2].startswith("b\t") and lines[at[-1] + 2].startswith("b\t")
    off = depthwise_conv2d((1, 56, 56, 128), (3, 3), (1, 1), (1, 1, 1, 1), simd_of(PI3.tvm_target()),
                           epi=Epilogue(("relu",)), name="t_dw_pf", schedule="default+noprefetch")
    assert "prfm" not in _asm(off)


def test_host_kernel_and_an_l2_sized_input_have_no_prefetch_and_candidates_keep_the_plain_one():
    host = get_target("host")
    func = depthwise_conv2d((1, 30, 37, 64), (3, 3), (1, 1), (1, 1, 1, 1), simd_of(host.tvm_target()),
                            epi=Epilogue(("relu",)), name="t_dw_pf")
    assert "edge_a53_prfm_" not in func.body.script()
    small = depthwise_conv2d((1, 7, 7, 1024), (3, 3), (1, 1), (1, 1, 1, 1), simd_of(PI3.tvm_target()),
                             epi=Epilogue(("relu",)), name="t_dw_pf")
    assert "edge_a53_prfm_" not in small.body.script()
    assert "default+noprefetch" in candidates("float.dw", {"isa": "neon"})
    assert "default+noprefetch" not in candidates("float.dw", {"isa": "avx2"})


def test_prefetch_offset_is_a_prfm_immediate():
    assert prfm_pair_a53.ahead(2048) == 4096 and prfm_pair_a53.ahead(16384) == 16384
    assert prfm_pair_a53.ahead(40000) == 0
    with pytest.raises(ValueError, match="PRFM immediate"):
        prfm_pair_a53.llvm_ir(4, 32768)
