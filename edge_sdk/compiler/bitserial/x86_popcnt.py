"""The bitserial schedule row of an x86 target with an AVX-512 vector popcount, chosen by the target's CPU features.

    schedule_arch(target) -> the key of schedule.SCHEDULES the network's kernels use (its packing word too)

AVX2 (AMD Zen 3) has no vector popcount: the x86_64 row packs uint8 words and counts bytes (LLVM's nibble
table: vpshufb + vpsadbw). AVX-512 has two: VPOPCNTDQ (`vpopcntd/q`, 32/64-bit lanes) and BITALG
(`vpopcntb/w`, 8/16-bit lanes); Intel Ice Lake server and later and AMD Zen 4 have both. Per 512 bits of a
popcount tile both are the same three ops (vpandq, the popcount, the accumulate add), so what differs is the
accumulator: uint16 words keep uint16 accumulators (32 channels a zmm; the A53 path's form), uint64 words
give 64-bit counts that the uint32 accumulator of popc.acc_dtype narrows with vpmovqd + vinserti64x4 per
pair of popcounts. Measured on this project's Zen 4 (one ResNet18-like 3x3 conv, a2 w1, fused glue, 1
thread, process CPU ms, median of 7 x 5 calls; bitserial/popc.py's kernel as it is):

    layer (HxWxC->C)   uint8 (x86_64 row)   uint64 vpopcntq   uint16 vpopcntw
    56x56x64->64            0.364              0.475             0.264 .. 0.290
    28x28x128->128          0.382              0.425             0.257 .. 0.261
    14x14x256->256          0.429              0.342             0.237 .. 0.239
    7x7x512->512            0.260              0.340             0.215 .. 0.224

(uint64 with uint64 accumulators, which popc.py does not have, measured 0.25-0.35.) So: BITALG -> uint16
words counted by vpopcntw; VPOPCNTDQ alone (no CPU this project runs on) -> uint64 words, vpopcntq; neither
-> the AVX2 row. The key is the target's, never the build machine's: a package for znver3 keeps uint8 words.
"""
from __future__ import annotations

from edge_sdk.compiler.bitserial.schedule import SCHEDULES, CpuSchedule

BITALG = "x86_64-avx512bitalg"
VPOPCNTDQ = "x86_64-avx512vpopcntdq"
SCHEDULES.setdefault(BITALG, CpuSchedule(vec=8, xt=4, word="uint16"))
SCHEDULES.setdefault(VPOPCNTDQ, CpuSchedule(vec=8, xt=4, word="uint64", pop_xt=4))


def schedule_arch(target) -> str:
    """The SCHEDULES key for an edge_sdk Target: its arch, or an x86 row named by the popcount it has."""
    if target.arch != "x86_64":
        return target.arch
    from edge_sdk.compiler.ops.common import has_feature

    tvm_target = target.tvm_target()
    if has_feature(tvm_target, "avx512bitalg"):
        return BITALG
    if has_feature(tvm_target, "avx512vpopcntdq"):
        return VPOPCNTDQ
    return target.arch
