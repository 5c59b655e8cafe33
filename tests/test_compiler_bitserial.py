"""Compiled bitserial ops (TE + our schedules) against the numpy reference, exactly (integers)."""
import shutil
import subprocess

import numpy as np
import pytest

from edge_sdk.errors import CompileError
from edge_sdk.quant import bitserial as bs, glue as g
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import kernels as ops  # noqa: E402

HOST = get_target("host")
RNG = np.random.default_rng(7)


def _t(a, dtype=None):
    return tvm.runtime.tensor(np.ascontiguousarray(a if dtype is None else np.asarray(a, dtype)))


def _conv_case(*, mode, a_bits, w_bits, n, h, w, c, o, k, stride, padding, word, glue_bits=None, out_word="uint32",
               scheduled=True):
    spec = dict(batch=n, height=h, width=w, channels=c, filters=o, kernel=k, stride=stride, padding=padding,
                a_bits=a_bits, w_bits=w_bits, mode=mode, word=word, glue_out_bits=glue_bits, out_word=out_word)
    ex = ops.build(ops.conv2d_prim_func(arch=HOST.arch if scheduled else None, **spec), target=HOST)
    a = RNG.integers(0, 1 << a_bits, (n, h, w, c))
    wt = RNG.integers(0, 1 << w_bits, (k, k, c, o))
    acc = bs.bitserial_conv2d_nhwc(a, wt, a_bits=a_bits, w_bits=w_bits, mode=mode, stride=stride,
                                   padding=padding, word=word)
    args = [_t(bs.pack_activations(a, bits=a_bits, word=word)), _t(bs.pack_conv_weights(wt, bits=w_bits, word=word))]
    if glue_bits is None:
        ref = acc
        out = _t(np.zeros(ref.shape, "int32"))
    else:
        glue = g.FusedGlue(shift=RNG.integers(-1, 5, o), offset=RNG.integers(-30, 30, o),
                           flip=np.zeros(o, bool), out_bits=glue_bits)
        ref = bs.pack_activations(g.fused_glue(acc, glue), bits=glue_bits, word=out_word)
        args += [_t(glue.lshift, "int32"), _t(glue.offset, "int32"), _t(glue.rshift, "int32")]
        out = _t(np.zeros(ref.shape, out_word))
    ex.mod["main"](*args, out)
    return out.numpy(), ref


# (mode, a_bits, w_bits, n, h, w, c, o, k, stride, padding, word): odd channels, odd H/W, stride 2, padding
CONV_CASES = [
    ("unipolar", 2, 1, 1, 7, 9, 37, 5, 3, 1, 1, "uint32"),
    ("unipolar", 1, 1, 2, 9, 7, 70, 24, 3, 2, 1, "uint8"),
    ("unipolar", 3, 2, 1, 6, 5, 33, 16, 3, 2, (0, 1, 1, 0), "uint16"),
    ("unipolar", 2, 2, 1, 5, 5, 100, 9, 1, 1, 0, "uint64"),
    ("bipolar", 1, 1, 1, 7, 9, 37, 5, 3, 1, 1, "uint32"),
    ("bipolar", 2, 2, 2, 9, 7, 70, 24, 3, 2, 1, "uint8"),
    ("bipolar", 3, 1, 1, 6, 5, 33, 16, 3, 2, (0, 1, 1, 0), "uint16"),
    ("bipolar", 1, 2, 1, 5, 5, 100, 9, 1, 2, 0, "uint64"),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "-".join(map(str, c[:3])) + f"-c{c[6]}s{c[9]}")
def test_conv2d_matches_reference(case):
    mode, ab, wb, n, h, w, c, o, k, s, p, word = case
    got, ref = _conv_case(mode=mode, a_bits=ab, w_bits=wb, n=n, h=h, w=w, c=c, o=o, k=k, stride=s, padding=p, word=word)
    np.testing.assert_array_equal(got, ref)


def test_unscheduled_conv2d_matches_reference():
    got, ref = _conv_case(mode="bipolar", a_bits=2, w_bits=1, n=1, h=5, w=6, c=40, o=3, k=3, stride=1, padding=1,
                          word="uint32", scheduled=False)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode,ab,wb,ob,o,out_word,stride", [
    ("unipolar", 2, 1, 2, 64, "uint32", 1),   # full words: vectorized epilogue
    ("unipolar", 1, 1, 1, 40, "uint32", 2),   # a partial output word
    ("bipolar", 2, 2, 3, 5, "uint8", 1),      # fewer channels than a word
    ("bipolar", 3, 1, 2, 24, "uint8", 2),
])
def test_fused_glue_conv2d_outputs_packed_codes(mode, ab, wb, ob, o, out_word, stride):
    got, ref = _conv_case(mode=mode, a_bits=ab, w_bits=wb, n=1, h=7, w=9, c=37, o=o, k=3, stride=stride, padding=1,
                          word="uint32", glue_bits=ob, out_word=out_word)
    assert got.dtype == np.dtype(out_word)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("h,w,c,o,k,stride,ab,wb", [
    (8, 8, 64, 64, 3, 1, 2, 1),    # two output words per popc register tile, 2-pixel tiles
    (7, 7, 96, 64, 3, 1, 2, 2),    # a prime width: 1-pixel tiles, four words per tile; 2-bit weights
    (9, 7, 40, 48, 3, 2, 3, 1),    # three words (no pairing), partial input word, stride 2
    (8, 8, 64, 32, 1, 2, 1, 1),    # 1x1 stride-2 shortcut shape
])
def test_uint16_popcount_tiles_match_reference(h, w, c, o, k, stride, ab, wb):
    """The networks' layout (uint16 words in and out): the unipolar popc/apop kernel with its
    channel-group and pixel-tile choices, fused glue and int32 outputs."""
    pad = (k - 1) // 2
    for glue_bits in (2, None):
        got, ref = _conv_case(mode="unipolar", a_bits=ab, w_bits=wb, n=1, h=h, w=w, c=c, o=o, k=k, stride=stride,
                              padding=pad, word="uint16", glue_bits=glue_bits, out_word="uint16")
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode", bs.MODES)
@pytest.mark.parametrize("ab,wb,k,o,word", [(1, 1, 100, 10, "uint32"), (2, 1, 64, 16, "uint8"), (3, 2, 37, 7, "uint64")])
def test_dense_matches_reference(mode, ab, wb, k, o, word):
    ex = ops.build(ops.dense_prim_func(arch=HOST.arch, batch=3, features=k, units=o, a_bits=ab, w_bits=wb,
                                       mode=mode, word=word), target=HOST)
    a, w = RNG.integers(0, 1 << ab, (3, k)), RNG.integers(0, 1 << wb, (k, o))
    out = _t(np.zeros((3, o), "int32"))
    ex.mod["main"](_t(bs.pack_activations(a, bits=ab, word=word)), _t(bs.pack_dense_weights(w, bits=wb, word=word)), out)
    np.testing.assert_array_equal(out.numpy(), bs.bitserial_dense(a, w, a_bits=ab, w_bits=wb, mode=mode, word=word))


def test_bitpack_op_matches_reference():
    x = tvm.te.placeholder((2, 3, 45), "int32", name="x")
    packed = ops.bitpack(x, bits=3, word="uint16")
    ex = ops.build(tvm.te.create_prim_func([x, packed]), target=HOST)
    codes = RNG.integers(0, 8, (2, 3, 45)).astype("int32")
    out = _t(np.zeros((2, 3, 3, 3), "uint16"))
    ex.mod["main"](_t(codes), out)
    np.testing.assert_array_equal(out.numpy(), bs.pack_activations(codes, bits=3, word="uint16"))


@pytest.mark.parametrize("kw,match", [(dict(a_bits=4), "4-bit activations"), (dict(w_bits=3), "3-bit weights"),
                                      (dict(mode="ternary"), "mode 'ternary'"), (dict(word="uint7"), "word type")])
def test_bad_options_are_refused(kw, match):
    spec = dict(batch=1, height=4, width=4, channels=8, filters=8, kernel=3, padding=1, a_bits=2, w_bits=1) | kw
    with pytest.raises(CompileError, match=match):
        ops.conv2d_compute(**spec)


def test_unknown_arch_is_refused():
    with pytest.raises(CompileError, match="no schedule for architecture 'riscv64'"):
        ops.conv2d_prim_func(arch="riscv64", batch=1, height=4, width=4, channels=8, filters=8, kernel=3,
                             padding=1, a_bits=1, w_bits=1)


def test_aarch64_conv_kernel_uses_neon_cnt(tmp_path):
    pi3 = get_target("pi3")
    if shutil.which(pi3.cross_cc) is None or shutil.which("aarch64-linux-gnu-objdump") is None:
        pytest.skip(f"needs the cross toolchain ({pi3.cross_package}, binutils-aarch64-linux-gnu) to link and disassemble")
    func = ops.conv2d_prim_func(arch=pi3.arch, batch=1, height=14, width=14, channels=64, filters=64, kernel=3,
                                padding=1, a_bits=2, w_bits=1, glue_out_bits=2, word="uint16", out_word="uint16")
    lib = tmp_path / "conv.so"
    ops.build(func, target=pi3).export_library(str(lib), fcompile=pi3.compiler())
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(lib)], check=True, capture_output=True, text=True).stdout
    # the conv's body is the parallel-for lambda TVM emits as `main_compute_`
    funcs, cur = {}, None
    for line in asm.splitlines():
        if line.endswith(">:"):
            cur = line.split("<", 1)[1][:-2]
        elif cur is not None:
            funcs.setdefault(cur, []).append(line)
    with_cnt = sorted(name for name, body in funcs.items() if any("\tcnt\tv" in ln for ln in body))
    assert any("compute" in name for name in with_cnt), f"no NEON cnt in the conv kernel; functions with cnt: {with_cnt}"
    # Riptide's fast popcount: uint16 words, byte counts pairwise-added into uint16 accumulators
    assert any("\tuadalp\tv" in ln and ".8h" in ln for name in with_cnt for ln in funcs[name]), "no uadalp .8h"


@pytest.mark.parametrize("residual,o,stride,lshift,word", [("codes", 64, 1, 0, "uint32"), ("codes", 16, 1, 1, "uint32"),
                                                        ("glue", 40, 2, 0, "uint32"), ("codes", 64, 1, 0, "uint16"),
                                                        ("glue", 32, 2, 0, "uint16")])
def test_fused_conv2d_adds_residual_in_the_quantized_domain(residual, o, stride, lshift, word):
    """ResNet shortcut in the epilogue: unclipped glue + (codes << lshift | the shortcut's own glue), then clip."""
    n, h, w, c, k, ab, wb, ob = 1, 8, 8, 32, 3, 2, 1, 2
    pad = 1 if stride == 1 else (0, 0, 1, 1)
    ex = ops.build(ops.conv2d_prim_func(arch=HOST.arch, batch=n, height=h, width=w, channels=c, filters=o, kernel=k,
                                        stride=stride, padding=pad, a_bits=ab, w_bits=wb, glue_out_bits=ob,
                                        residual=residual, res_lshift=lshift, word=word, out_word=word), target=HOST)
    a, wt = RNG.integers(0, 1 << ab, (n, h, w, c)), RNG.integers(0, 1 << wb, (k, k, c, o))
    acc = bs.bitserial_conv2d_nhwc(a, wt, a_bits=ab, w_bits=wb, mode="unipolar", stride=stride, padding=pad)

    def glue_vectors():
        sh, off = RNG.integers(-1, 5, o), RNG.integers(-30, 30, o)
        return np.maximum(-sh, 0), off, np.maximum(sh, 0)

    lsh, off, rsh = glue_vectors()
    total = ((acc << lsh) + off) >> rsh
    args = [_t(bs.pack_activations(a, bits=ab, word=word)), _t(bs.pack_conv_weights(wt, bits=wb, word=word)),
            _t(lsh, "int32"), _t(off, "int32"), _t(rsh, "int32")]
    if residual == "codes":
        codes = RNG.integers(0, 1 << ob, acc.shape)
        total = total + (codes << lshift)
        args.append(_t(bs.pack_activations(codes, bits=ob, word=word)))
    else:
        racc = RNG.integers(-100, 100, acc.shape)
        rl, ro, rr = glue_vectors()
        total = total + (((racc << rl) + ro) >> rr)
        args += [_t(racc, "int32"), _t(rl, "int32"), _t(ro, "int32"), _t(rr, "int32")]
    ref = bs.pack_activations(np.clip(total, 0, (1 << ob) - 1), bits=ob, word=word)
    out = _t(np.zeros(ref.shape, word))
    ex.mod["main"](*args, out)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_quantize_pack_and_unpack_ops_match_numpy():
    x = tvm.te.placeholder((1, 3, 5, 40), "float32", name="x")
    from edge_sdk.compiler.bitserial import io

    packed = io.quantize_pack_compute(x, bits=3, step=0.25)
    ex = ops.build(tvm.te.create_prim_func([x, packed]), target=HOST)
    xs = (RNG.integers(-64, 512, (1, 3, 5, 40)) / 128).astype("float32")
    out = _t(np.zeros((1, 3, 5, 2, 3), "uint32"))
    ex.mod["main"](_t(xs), out)
    codes = bs.quantize_activations(xs, bits=3, step=0.25)
    np.testing.assert_array_equal(out.numpy(), bs.pack_activations(codes, bits=3))
    p = tvm.te.placeholder((1, 3, 5, 2, 3), "uint32", name="p")
    ex2 = ops.build(tvm.te.create_prim_func([p, io.unpack_compute(p, channels=40)]), target=HOST)
    back = _t(np.zeros((1, 3, 5, 40), "int32"))
    ex2.mod["main"](out, back)
    np.testing.assert_array_equal(back.numpy(), codes)
