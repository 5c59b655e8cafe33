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


def _rdbpot_r1(h, rm1, lanes: int):
    """RoundingDivideByPOT of int32xlanes h by r >= 1, given rm1 = r - 1: with h' = h - 1 where h < 0 (no
    wrap: h > INT32_MIN after SRDHM by a positive multiplier) and t = h' >> (r - 1), the result is
    ceil(t / 2) = t - (t >> 1): ties away from zero, 5 instructions instead of 7 (numpy-checked for every r)."""
    b31 = tirx.Broadcast(tirx.const(31, "int32"), lanes)
    t = (h + (h >> b31)) >> rm1
    return t - (t >> tirx.Broadcast(tirx.const(1, "int32"), lanes))


def rounding_of(shift) -> bool:
    """Whether every channel's right shift (-shift, TFLite's sign) is >= 1: then the kernels take r - 1 and
    round with _rdbpot_r1 (`r_minus_1`), else r and _rdbpot."""
    import numpy as np

    return bool(np.all(-np.asarray(shift, np.int64) >= 1))


def rshift_arg(shift):
    """The int32 right shifts a kernel using this module takes: r = -shift, or r - 1 when rounding_of(shift)."""
    import numpy as np

    r = -np.asarray(shift, np.int64)
    return (r - 1 if rounding_of(shift) else r).astype(np.int32)


def vector_i32(x, m, r, lanes: int, *, r_minus_1: bool = False):
    """int32xlanes mbqm32(x, m, r) of int32xlanes vectors (r holds r - 1 when r_minus_1)."""
    h = _srdhm_even_odd(x, m, lanes)
    return _rdbpot_r1(h, r, lanes) if r_minus_1 else _rdbpot(h, r, lanes)


def vector(x, m, r, lanes: int, out_zp: int, lo: int, hi: int, *, r_minus_1: bool = False):
    """int8xlanes = clamp(mbqm32(x, m, r) + out_zp, lo, hi) of int32xlanes vectors x (the biased sum), m and r."""
    y = vector_i32(x, m, r, lanes, r_minus_1=r_minus_1)
    y = y + tirx.Broadcast(tirx.const(out_zp, "int32"), lanes)
    y = tirx.max(tirx.min(y, tirx.Broadcast(tirx.const(hi, "int32"), lanes)),
                 tirx.Broadcast(tirx.const(lo, "int32"), lanes))
    return tirx.Cast(f"int8x{lanes}", y)


def epilogue(acc, mult, rshift, out_zp: int, lo: int, hi: int, *, r_minus_1: bool = False):
    """The scalar epilogue the kernel's TE writes and the intrinsic's description matches: fixedpoint.mbqm32
    (the same expressions; its last comparison written `threshold < ...`, the form create_prim_func keeps),
    + out_zp, clamp, int8. r_minus_1: rshift holds r - 1 (every r >= 1) and the rounding is _rdbpot_r1's."""
    ab = acc.astype("int64") * mult.astype("int64")
    h = ((ab + tirx.const(1 << 30, "int64")) >> tirx.const(31, "int64")).astype("int32")
    one = tirx.const(1, "int32")
    if r_minus_1:
        t = (h + (h >> tirx.const(31, "int32"))) >> rshift
        y = t - (t >> one)
    else:
        mask = (one << rshift) - one
        threshold = (mask >> one) + ((h >> tirx.const(31, "int32")) & one)
        y = (h >> rshift) + (threshold < (h & mask)).astype("int32")
    return fp.clamp_int8_32(y + tirx.const(out_zp, "int32"), lo, hi)


def _intrin(lanes: int, out_zp: int, lo: int, hi: int, r_minus_1: bool):
    """(desc, impl): out[lanes] int8 = epilogue(acc + bias, mult, rshift, out_zp, lo, hi), the add in int32."""

    def scalar(a, b, m, r):
        return epilogue(a + b, m, r, out_zp, lo, hi, r_minus_1=r_minus_1)

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
                      out_zp, lo, hi, r_minus_1=r_minus_1)

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((lanes,), "int32", offset_factor=1), b: T.Buffer((lanes,), "int32", offset_factor=1),
             m: T.Buffer((lanes,), "int32", offset_factor=1), r: T.Buffer((lanes,), "int32", offset_factor=1),
             o: T.Buffer((lanes,), "int8", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(a[0:lanes], b[0:lanes], m[0:lanes], r[0:lanes])
            T.writes(o[0:lanes])
            o[T.ramp(T.int32(0), 1, lanes)] = vec(a, b, m, r)

    return desc, impl


def register(lanes: int, out_zp: int, lo: int, hi: int, *, r_minus_1: bool = False) -> str:
    """The TensorIntrin's name for this lane count, output zero point, clamp and rounding (registered once)."""
    from tvm.s_tir import TensorIntrin

    name = f"edge_x86_requant_{lanes}_{out_zp}_{lo}_{hi}{'_r1' if r_minus_1 else ''}".replace("-", "m")
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, *_intrin(lanes, out_zp, lo, hi, r_minus_1))
    return name
