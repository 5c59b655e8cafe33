"""TFLite's exact requantize of an int32 vector on x86 with even / odd `vpmuldq`, as a TensorIntrin.

    name = register(lanes, out_zp, lo, hi)    # then sch.tensorize(<the epilogue's lanes loop>, name)

The epilogue of the integer GEMMs is out = clamp(mbqm32(acc + bias, M, rshift) + Z_out, lo, hi) as int8
(fixedpoint.mbqm32: SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT). Written per element, LLVM
vectorizes the 64-bit product of 16 int32 lanes as two 8-lane halves: two sign/zero extends, an extract,
two vpmuldq, two vpaddq, two vpsrlq, two vpmovqd and an insert (12 instructions) before the 32-bit
rounding. vpmuldq multiplies the low (even) dwords of each qword already, so this intrinsic reads the 16
lanes as 8 qwords: even lanes are the qwords' sign-extended low halves (`(v << 32) >> 32`, which LLVM folds
into the vpmuldq operand), odd lanes their high halves (`v >> 32`, one vpsraq); each 64-bit product gets
the 2^30 nudge, and bits 31..62 land in the right dword directly (even: `>> 31`, odd: `<< 1`), merged by
one blend: 8 instructions, the multiplier's halves hoisted per channel tile. The rounding divide, zero point
and clamp are fixedpoint's, on the int32 vector. Same arithmetic, so the same bits as mbqm32 (and TFLite's
reference) for every input: the tests compare the kernels with quant/int8.conv2d. The bias add is in the
intrinsic, in int32 (written per element, TVM widened it into the 64-bit product: vpmullq).

Priced alone on this Zen 4 (1x1, thread CPU ms, against the per-element epilogue in one process, load 24):
112x112x32->64 0.443 -> 0.434, 56x56x64->128 0.251 -> 0.239, 56x56x128->128 0.378 -> 0.350, 28x28x128->256
0.198 -> 0.168, 28x28x256->256 0.310 -> 0.315, 14x14x256->512 0.198 -> 0.160, 14x14x512->512 0.326 -> 0.323,
7x7x1024->1024 0.306 -> 0.302. Less than the instruction count promises: LLVM interleaves the rows'
epilogues and spills (the 12-row tile needs > 32 zmm with the per-channel constants).
"""
from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T

from edge_sdk.compiler.int8 import fixedpoint as fp


def _srdhm_even_odd(x, m, lanes: int):
    """SRDHM(x, m) of int32xlanes vectors (m > 0): floor((x * m + 2^30) / 2^31) per lane, as int32xlanes."""
    q = f"int64x{lanes // 2}"

    def b64(v: int):
        return tirx.Broadcast(tirx.const(v, "int64"), lanes // 2)

    xq, mq = tirx.reinterpret(q, x), tirx.reinterpret(q, m)
    even = ((xq << b64(32)) >> b64(32)) * ((mq << b64(32)) >> b64(32)) + b64(1 << 30)
    odd = (xq >> b64(32)) * (mq >> b64(32)) + b64(1 << 30)
    merged = ((even >> b64(31)) & b64(0xFFFFFFFF)) | ((odd << b64(1)) & b64(-(1 << 32)))
    return tirx.reinterpret(f"int32x{lanes}", merged)


def _rdbpot(h, r, lanes: int):
    """RoundingDivideByPOT of int32xlanes h by r (fixedpoint.mbqm32's second half, on vectors)."""
    def b32(v: int):
        return tirx.Broadcast(tirx.const(v, "int32"), lanes)

    mask = (b32(1) << r) - b32(1)
    threshold = (mask >> b32(1)) + ((h >> b32(31)) & b32(1))
    return (h >> r) + tirx.Cast(f"int32x{lanes}", (h & mask) > threshold)


def vector(x, m, r, lanes: int, out_zp: int, lo: int, hi: int):
    """int8xlanes = clamp(mbqm32(x, m, r) + out_zp, lo, hi) of int32xlanes vectors x (the biased sum), m and r."""
    y = _rdbpot(_srdhm_even_odd(x, m, lanes), r, lanes)
    y = y + tirx.Broadcast(tirx.const(out_zp, "int32"), lanes)
    y = tirx.max(tirx.min(y, tirx.Broadcast(tirx.const(hi, "int32"), lanes)),
                 tirx.Broadcast(tirx.const(lo, "int32"), lanes))
    return tirx.Cast(f"int8x{lanes}", y)


def epilogue(acc, mult, rshift, out_zp: int, lo: int, hi: int):
    """The scalar epilogue the kernel's TE writes and the intrinsic's description matches: fixedpoint.mbqm32
    (the same expressions; its last comparison written `threshold < ...`, the form create_prim_func keeps),
    + out_zp, clamp, int8."""
    ab = acc.astype("int64") * mult.astype("int64")
    h = ((ab + tirx.const(1 << 30, "int64")) >> tirx.const(31, "int64")).astype("int32")
    one = tirx.const(1, "int32")
    mask = (one << rshift) - one
    threshold = (mask >> one) + ((h >> tirx.const(31, "int32")) & one)
    y = (h >> rshift) + (threshold < (h & mask)).astype("int32")
    return fp.clamp_int8_32(y + tirx.const(out_zp, "int32"), lo, hi)


def _intrin(lanes: int, out_zp: int, lo: int, hi: int):
    """(desc, impl): out[lanes] int8 = epilogue(acc + bias, mult, rshift, out_zp, lo, hi), the add in int32."""

    def scalar(a, b, m, r):
        return epilogue(a + b, m, r, out_zp, lo, hi)

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((lanes,), "int32", offset_factor=1), b: T.Buffer((lanes,), "int32", offset_factor=1),
             m: T.Buffer((lanes,), "int32", offset_factor=1), r: T.Buffer((lanes,), "int32", offset_factor=1),
             o: T.Buffer((lanes,), "int8", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(a[0:lanes], b[0:lanes], m[0:lanes], r[0:lanes])
            T.writes(o[0:lanes])
            for j in T.serial(0, lanes):
                with T.sblock("out"):
                    vj = T.axis.remap("S", [j])
                    o[vj] = scalar(a[vj], b[vj], m[vj], r[vj])

    def vec(a, b, m, r):
        v32 = f"int32x{lanes}"
        return vector(a.vload([0], v32) + b.vload([0], v32), m.vload([0], v32), r.vload([0], v32), lanes,
                      out_zp, lo, hi)

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((lanes,), "int32", offset_factor=1), b: T.Buffer((lanes,), "int32", offset_factor=1),
             m: T.Buffer((lanes,), "int32", offset_factor=1), r: T.Buffer((lanes,), "int32", offset_factor=1),
             o: T.Buffer((lanes,), "int8", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(a[0:lanes], b[0:lanes], m[0:lanes], r[0:lanes])
            T.writes(o[0:lanes])
            o[T.ramp(T.int32(0), 1, lanes)] = vec(a, b, m, r)

    return desc, impl


def register(lanes: int, out_zp: int, lo: int, hi: int) -> str:
    """The TensorIntrin's name for this lane count, output zero point and clamp (registered once)."""
    from tvm.s_tir import TensorIntrin

    name = f"edge_x86_requant_{lanes}_{out_zp}_{lo}_{hi}".replace("-", "m")
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, *_intrin(lanes, out_zp, lo, hi))
    return name
