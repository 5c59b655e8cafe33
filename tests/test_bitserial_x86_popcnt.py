"""The x86 bitserial schedule rows (compiler/bitserial/x86_popcnt.py): chosen by the compile target's CPU, the
kernels of each row exact against the numpy reference where this CPU runs them (skipped with the missing flag
otherwise), and the popcount instruction each kind of x86 CPU gets (object code, compiled for every kind)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.host_cpu import host_cpu_flags

from edge_sdk.quant import bitserial as bs, glue as g
from edge_sdk.targets import get_target

tvm = pytest.importorskip("tvm")
from edge_sdk.compiler.bitserial import kernels as ops, x86_popcnt  # noqa: E402
from edge_sdk.compiler.bitserial.schedule import network_word  # noqa: E402


FLAGS = host_cpu_flags()
# kind: (LLVM row of the compile target, expected schedule key, cpuinfo flags to run it, its popcount instruction)
KINDS = {
    "znver3": ({"mcpu": "znver3"}, "x86_64", {"avx2"}, "vpshufb"),  # AVX2: the byte nibble table
    "znver4": ({"mcpu": "znver4"}, x86_popcnt.BITALG, {"avx512_bitalg"}, "vpopcntw"),
    "icelake-server": ({"mcpu": "icelake-server"}, x86_popcnt.BITALG, {"avx512_bitalg"}, "vpopcntw"),
    "skylake-avx512+vpopcntdq": ({"mcpu": "skylake-avx512", "mattr": ["+avx512vpopcntdq"]}, x86_popcnt.VPOPCNTDQ,
                                 {"avx512_vpopcntdq"}, "vpopcntq"),
}


def _target(kind: str):
    llvm = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", **KINDS[kind][0]}
    return dataclasses.replace(get_target("host"), name=f"x86-{kind}", arch="x86_64", llvm=llvm)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schedule_row_follows_the_target_cpu(kind):
    key = x86_popcnt.schedule_arch(_target(kind))
    assert key == KINDS[kind][1]
    assert network_word(key) == {"x86_64": "uint8", x86_popcnt.BITALG: "uint16", x86_popcnt.VPOPCNTDQ: "uint64"}[key]


def test_pi_targets_keep_their_arch():
    assert x86_popcnt.schedule_arch(get_target("pi3")) == "aarch64"


def _case(rng, *, ab, wb, h, c, o, k, stride, word, glue_bits):
    pad = (k - 1) // 2
    spec = dict(batch=1, height=h, width=h, channels=c, filters=o, kernel=k, stride=stride, padding=pad,
                a_bits=ab, w_bits=wb, mode="unipolar", word=word, glue_out_bits=glue_bits, out_word=word)
    a, wt = rng.integers(0, 1 << ab, (1, h, h, c)), rng.integers(0, 1 << wb, (k, k, c, o))
    a.reshape(-1)[: c * 2] = (1 << ab) - 1  # every bit set in two pixels: the largest counts
    acc = bs.bitserial_conv2d_nhwc(a, wt, a_bits=ab, w_bits=wb, mode="unipolar", stride=stride, padding=pad, word=word)
    ins = [bs.pack_activations(a, bits=ab, word=word), bs.pack_conv_weights(wt, bits=wb, word=word)]
    if glue_bits is None:
        return spec, ins, acc.astype("int32")
    glue = g.FusedGlue(shift=rng.integers(-1, 5, o), offset=rng.integers(-30, 30, o), flip=np.zeros(o, bool),
                       out_bits=glue_bits)
    ins += [np.asarray(v, "int32") for v in (glue.lshift, glue.offset, glue.rshift)]
    return spec, ins, bs.pack_activations(g.fused_glue(acc, glue), bits=glue_bits, word=word)


CASES = [  # (ab, wb, h, c, o, k, stride, glue_bits): ResNet-like 3x3, prime width, 1x1 stride 2, int32 out
    (2, 1, 8, 128, 64, 3, 1, 2),
    (2, 2, 7, 192, 64, 3, 1, 2),
    (1, 1, 9, 64, 128, 1, 2, 1),
    (3, 1, 6, 128, 64, 3, 2, None),
]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"a{c[0]}w{c[1]}-{c[2]}x{c[3]}-{c[4]}k{c[5]}s{c[6]}")
def test_kernel_of_each_row_equals_reference(kind, case):
    _, _, need, _ = KINDS[kind]
    if not need <= FLAGS:
        pytest.skip(f"this CPU lacks {sorted(need - FLAGS)} to run the {kind} row")
    target = _target(kind)
    key = x86_popcnt.schedule_arch(target)
    ab, wb, h, c, o, k, s, gb = case
    spec, ins, ref = _case(np.random.default_rng(h + c + o), ab=ab, wb=wb, h=h, c=c, o=o, k=k, stride=s,
                           word=network_word(key), glue_bits=gb)
    ex = ops.build(ops.conv2d_prim_func(arch=key, **spec), target=target)
    out = tvm.runtime.tensor(np.zeros(ref.shape, ref.dtype))
    ex.mod["main"](*[tvm.runtime.tensor(np.ascontiguousarray(v)) for v in ins], out)
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_popcount_instruction_per_x86_kind(kind):
    target = _target(kind)
    key = x86_popcnt.schedule_arch(target)
    spec, _, _ = _case(np.random.default_rng(0), ab=2, wb=1, h=14, c=256, o=256, k=3, stride=1,
                       word=network_word(key), glue_bits=2)
    asm = ops.build(ops.conv2d_prim_func(arch=key, **spec), target=target).mod.inspect_source("asm")
    want = KINDS[kind][3]
    assert f"\t{want}\t" in asm, f"{kind}: no {want}"
    if key == "x86_64":  # AVX2 only: no AVX-512 popcount may appear in a package for it
        assert "vpopcnt" not in asm and "%zmm" not in asm
