"""The A53 popc register tile (schedule.pop_tile: pixels x activation planes x channel lanes, chosen per
layer by its issue cost) against the numpy reference, exactly: on the host (the aarch64 schedule's tile
choice applied to uint16 words natively) and compiled for pi3 under qemu -cpu cortex-a53."""
import dataclasses
import shutil

import numpy as np
import pytest

from edge_sdk.quant import bitserial as bs, glue as g
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import kernels as ops, schedule  # noqa: E402

HOST = get_target("host")
RNG = np.random.default_rng(23)


def _case(*, ab, wb, h, w, c, o, k, stride, glue_bits, residual=None, grouped=False):
    """(spec, [input arrays], reference output): random codes and glue, uint16 words in and out; grouped:
    the weights in the layout of the pi3 tile's lane groups (ConvSpec.w_group = schedule.weight_group)."""
    word, pad = "uint16", (k - 1) // 2
    spec = dict(batch=1, height=h, width=w, channels=c, filters=o, kernel=k, stride=stride, padding=pad,
                a_bits=ab, w_bits=wb, mode="unipolar", word=word, glue_out_bits=glue_bits, out_word=word,
                residual=residual)
    a, wt = RNG.integers(0, 1 << ab, (1, h, w, c)), RNG.integers(0, 1 << wb, (k, k, c, o))
    acc = bs.bitserial_conv2d_nhwc(a, wt, a_bits=ab, w_bits=wb, mode="unipolar", stride=stride, padding=pad,
                                   word=word)
    ins = [bs.pack_activations(a, bits=ab, word=word), bs.pack_conv_weights(wt, bits=wb, word=word)]
    if grouped:
        spec["w_group"] = schedule.weight_group(spec, arch="aarch64")
        assert spec["w_group"], spec  # every grouped case has a model tile
        ins[1] = ops.group_weights(ins[1], spec["w_group"])
    if glue_bits is None:
        return spec, ins, acc.astype("int32")
    glue = g.FusedGlue(shift=RNG.integers(-1, 5, o), offset=RNG.integers(-30, 30, o), flip=np.zeros(o, bool),
                       out_bits=glue_bits)
    ins += [np.asarray(v, "int32") for v in (glue.lshift, glue.offset, glue.rshift)]
    total = ((acc << glue.lshift) + glue.offset) >> glue.rshift
    if residual == "codes":
        codes = RNG.integers(0, 1 << glue_bits, total.shape)
        ins.append(bs.pack_activations(codes, bits=glue_bits, word=word))
        total = total + codes
    ref = bs.pack_activations(np.clip(total, 0, (1 << glue_bits) - 1), bits=glue_bits, word=word)
    return spec, ins, ref


# (ab, wb, h, w, c, o, k, stride, glue_bits, residual): prime width 7 (planes split: xt=7, pt=1), 2-pixel
# tiles of both planes, w1a1's 4-pixel tile, 2-bit weights, 3-bit activations, an odd input channel count
# (37: a partial input word), 1x1 stride 2, a residual, int32 outputs, an output count of no whole q tile
CASES = [
    (2, 1, 7, 7, 128, 64, 3, 1, 2, None),
    (2, 1, 8, 8, 64, 64, 3, 1, 2, "codes"),
    (1, 1, 8, 8, 64, 64, 3, 1, 1, None),
    (1, 1, 7, 7, 96, 32, 3, 1, 1, None),
    (2, 2, 6, 6, 64, 32, 3, 1, 2, None),
    (3, 1, 6, 6, 37, 32, 3, 2, 3, None),
    (2, 1, 9, 9, 64, 48, 1, 2, None, None),
    (2, 1, 7, 7, 128, 64, 3, 1, None, None),
    (2, 1, 5, 5, 33, 24, 3, 1, None, None),
]
IDS = [f"a{c[0]}w{c[1]}-{c[2]}x{c[3]}-{c[4]}to{c[5]}k{c[6]}s{c[7]}-{'int32' if c[8] is None else c[9] or 'fused'}"
       for c in CASES]


def test_pop_tile_choices():
    """The issue-cost choice: a 7-wide 2-bit layer splits its planes (7 pixels x 1 plane x 2 q) rather than
    1 pixel x 2 planes x 8 q (which loads 8 weight registers per 2 broadcasts); every tile stays within the
    accumulator budget and divides the channels; w1a1 takes 4 pixels where its width allows."""
    t7 = schedule.pop_tile(ow=7, o=512, a_bits=2, w_bits=1, out_bits=2, budget=16)
    assert (t7.xt, t7.pt, t7.lanes) == (7, 1, 16)
    t28 = schedule.pop_tile(ow=28, o=128, a_bits=1, w_bits=1, out_bits=1, budget=16)
    assert t28.xt * t28.pt * t28.lanes // 8 == 16 and t28.xt >= 4
    for ow in (7, 14, 28, 56):
        for ab, wb in ((1, 1), (2, 1), (2, 2), (3, 1)):
            t = schedule.pop_tile(ow=ow, o=256, a_bits=ab, w_bits=wb, out_bits=ab, budget=16)
            assert t.xt * t.pt * (t.lanes // 8) * wb <= 16 and 256 % t.lanes == 0 and ow % t.xt == 0
    assert schedule.pop_tile(ow=8, o=24, a_bits=2, w_bits=1, out_bits=2, budget=16) is None  # no whole word


@pytest.fixture
def a53_tile_on_host(monkeypatch):
    """The host runs the A53 tile choice (pi3's tile_budget) for uint16 words, natively."""
    cfg = dataclasses.replace(schedule.SCHEDULES[HOST.arch], tile_budget=schedule.SCHEDULES["aarch64"].tile_budget)
    monkeypatch.setitem(schedule.SCHEDULES, HOST.arch, cfg)


GROUPED = [i for i in (0, 1, 2, 4, 5, 6, 8) if schedule.weight_group(dict(
    width=CASES[i][3], channels=CASES[i][4], filters=CASES[i][5], kernel=CASES[i][6], stride=CASES[i][7],
    padding=(CASES[i][6] - 1) // 2, a_bits=CASES[i][0], w_bits=CASES[i][1], word="uint16",
    glue_out_bits=CASES[i][8], out_word="uint16"), arch="aarch64")]


@pytest.mark.parametrize("case,grouped", [(c, False) for c in CASES] + [(CASES[i], True) for i in GROUPED],
                         ids=IDS + [f"{IDS[i]}-grouped" for i in GROUPED])
def test_a53_tile_matches_reference_on_host(case, grouped, a53_tile_on_host):
    ab, wb, h, w, c, o, k, s, gb, res = case
    spec, ins, ref = _case(ab=ab, wb=wb, h=h, w=w, c=c, o=o, k=k, stride=s, glue_bits=gb, residual=res,
                           grouped=grouped)
    ex = ops.build(ops.conv2d_prim_func(arch=HOST.arch, **spec), target=HOST)
    out = tvm.runtime.tensor(np.zeros(ref.shape, ref.dtype))
    ex.mod["main"](*[tvm.runtime.tensor(np.ascontiguousarray(v)) for v in ins], out)
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("case,grouped", [(CASES[i], False) for i in (0, 1, 2, 4, 5, 6, 8)]
                         + [(CASES[i], True) for i in GROUPED],
                         ids=[IDS[i] for i in (0, 1, 2, 4, 5, 6, 8)] + [f"{IDS[i]}-grouped" for i in GROUPED])
def test_a53_tile_matches_reference_under_qemu(case, grouped, tmp_path):
    """pi3's schedule compiled for aarch64 and run by our runner under qemu -cpu cortex-a53 (weights in both
    layouts)."""
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("qemu-aarch64") is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user")
    from tvm import relax

    from edge_sdk.runtime.execute import LocalRun, run_compiled

    ab, wb, h, w, c, o, k, s, gb, res = case
    spec, ins, ref = _case(ab=ab, wb=wb, h=h, w=w, c=c, o=o, k=k, stride=s, glue_bits=gb, residual=res, grouped=grouped)
    func = ops.conv2d_prim_func(arch=pi3.arch, **spec).with_attrs({"global_symbol": "conv", "op_pattern": 8})
    bb = relax.BlockBuilder()
    rvars = [relax.Var(f"a{i}", relax.TensorType(list(v.shape), str(v.dtype))) for i, v in enumerate(ins)]
    dummy = relax.Var("x", relax.TensorType([1], "uint8"))  # the runner's input is float32/int8/uint8 only
    with bb.function("main", [dummy, *rvars]):
        gv = bb.add_func(func, "conv")
        bb.emit_func_output(bb.emit(relax.call_tir(gv, rvars, relax.TensorType(list(ref.shape), str(ref.dtype)))))
    ex = tvm.compile(bb.get(), target=pi3.tvm_target())
    lib, params = tmp_path / "m.so", tmp_path / "params.bin"
    ex.export_library(str(lib), fcompile=pi3.compiler())
    tvm.runtime.save_param_dict_to_file(
        {f"p{i:04d}": tvm.runtime.tensor(np.ascontiguousarray(v)) for i, v in enumerate(ins)}, str(params))
    res_ = run_compiled(lib=lib, params=params, input=np.zeros(1, np.uint8), arch="aarch64",
                        emulate_cpu="cortex-a53", how=LocalRun(warmup=0, repeat=1))
    assert res_.emulated
    np.testing.assert_array_equal(res_.output, ref)
