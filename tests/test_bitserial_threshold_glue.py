"""The fused glue as thresholds (ConvSpec.thresholds, kernels.glue_thresholds): code = #{k : acc >= T_k}
against the shift form clip(((acc << l) + off) >> r, 0, 2^a - 1) computed in numpy, on the host and under
qemu -cpu cortex-a53 (the assembly popc tile with the threshold epilogue)."""
import shutil

import numpy as np
import pytest

from edge_sdk.compiler.bitserial import kernels as ops
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from tests.test_bitserial_a53_tile import HOST, _case  # noqa: E402

RNG = np.random.default_rng(19)


@pytest.mark.parametrize("bits", [1, 2])
def test_thresholds_equal_the_clipped_shift_glue_on_every_accumulator(bits):
    o = 64
    lsh, rsh = np.maximum(RNG.integers(-2, 3, o), 0), RNG.integers(0, 12, o)
    lsh[rsh > 0] = 0  # the glue's form: one of the two shifts (quant/glue.py)
    off = RNG.integers(-5000, 5000, o)
    acc = np.arange(-20000, 20000)[:, None]
    want = np.clip(((acc << lsh) + off) >> rsh, 0, (1 << bits) - 1)
    ts = ops.glue_thresholds(lsh, off, rsh, bits)
    assert len(ts) == 3 and all(t.dtype == np.int32 and t.shape == (o,) for t in ts)
    got = sum((acc >= t).astype(np.int64) for t in ts[:(1 << bits) - 1])
    np.testing.assert_array_equal(got, want)
    assert all(np.all(t == np.iinfo(np.int32).max) for t in ts[(1 << bits) - 1:])


# (ab, wb, h, w, c, o, k, stride, glue_bits): w1a1's 4-pixel tile, the 7-wide split planes, 2-bit weights,
# a partial input word with stride 2
CASES = [(1, 1, 8, 8, 64, 64, 3, 1, 1), (2, 1, 7, 7, 128, 64, 3, 1, 2), (2, 2, 6, 6, 64, 32, 3, 1, 2),
         (2, 1, 6, 6, 37, 32, 3, 2, 2)]


def test_threshold_glue_is_refused_where_three_thresholds_do_not_cover_the_codes():
    from edge_sdk.errors import CompileError

    spec = dict(batch=1, height=4, width=4, channels=16, filters=16, kernel=3, a_bits=3, w_bits=1, word="uint16",
                glue_out_bits=3, out_word="uint16", thresholds=True)
    with pytest.raises(CompileError, match="threshold glue needs glue_out_bits <= 2"):
        ops.conv2d_compute(**spec)


def _threshold_case(case, grouped):
    ab, wb, h, w, c, o, k, s, gb = case
    spec, ins, ref = _case(ab=ab, wb=wb, h=h, w=w, c=c, o=o, k=k, stride=s, glue_bits=gb, grouped=grouped)
    spec["thresholds"] = True
    ins[2:5] = ops.glue_thresholds(ins[2], ins[3], ins[4], gb)
    return spec, ins, ref


@pytest.mark.parametrize("case", CASES)
def test_threshold_glue_matches_the_shift_reference_on_host(case):
    spec, ins, ref = _threshold_case(case, grouped=False)
    ex = ops.build(ops.conv2d_prim_func(arch=HOST.arch, **spec), target=HOST)
    out = tvm.runtime.tensor(np.zeros(ref.shape, ref.dtype))
    ex.mod["main"](*[tvm.runtime.tensor(np.ascontiguousarray(v)) for v in ins], out)
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.qemu
@pytest.mark.parametrize("case", CASES[:3])
def test_threshold_glue_matches_the_shift_reference_under_qemu(case):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tests.pi3_run import run_prim_func_on_pi3

    spec, ins, ref = _threshold_case(case, grouped=True)
    func = ops.conv2d_prim_func(arch=pi3.arch, **spec).with_attrs({"global_symbol": "conv", "op_pattern": 8})
    out = run_prim_func_on_pi3(func, ins, ref.shape, str(ref.dtype))
    np.testing.assert_array_equal(out, ref)
