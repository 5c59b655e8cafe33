"""Activations a float kernel applies in its epilogue, as vectorizable TIR expressions.

    ("none",) ("relu",) ("clip", lo, hi) ("sigmoid",) ("swish",) ("hswish",) ("prelu",) (slope: a PrimExpr)
    (each one entry in graph/ops/float_act.py naming its *_expr here, its numpy reference and importer ops)

Why our own exp: TVM lowers `tirx.exp` / `sigmoid` to LLVM's exp intrinsic, which both backends
turn into one scalar `expf` call per lane; EfficientNet-B0's 49 swish layers then cost more than all
its convolutions. `exp_approx` is the classic range reduction x = n ln2 + r, |r| <= ln2/2, a degree-5
polynomial for e^r (fitted for relative error, 1.7e-7 in float32 arithmetic; the degree-6 Taylor form
it replaced: 2.4e-7 and one more multiply-add) and 2^n built in the exponent bits, all in plain vector
arithmetic. n is rounded by adding 1.5 * 2^23 + 127 (the "magic bias": the float's low mantissa bits
are then n + 127, the exponent field of 2^n after a shift): floor and one add fewer per vector.
Inputs are clamped to [-87, 88], so 2^n stays a normal float.

hard-swish is x * relu6(x + 3) / 6 (MobileNetV3; TFLite HARD_SWISH, ONNX HardSwish); hard-sigmoid
needs no kind of its own: clip(x + 3, 0, 6) / 6 folds into the bias and a scaled ("clip", lo, hi).
"""
from __future__ import annotations

import tvm
from tvm import te

from edge_sdk.graph import ops as registry
from edge_sdk.graph.ops import float_act

ACTS = tuple(float_act.ACTS)  # none, relu, clip, sigmoid, swish, hswish: one entry each in graph/ops/float_act.py
_LN2_HI = 0.693145751953125  # ln 2 split so n * _LN2_HI is exact in float32 for |n| < 256
_LN2_LO = 1.428606765330187e-06
# e^r = 1 + r (c1 + r (c2 + r (c3 + r (c4 + r c5)))) on |r| <= ln2/2 (a Lawson fit of the relative error)
_POLY = (0.9999997071879309, 0.49999149528452214, 0.16667636198653096, 0.04189792956557978,
         0.008290314551058709)
_MAGIC = 12583039.0  # 1.5 * 2^23 + 127
_MAGIC_BITS = 0x4B40007F  # its bits: n = bits(x log2(e) + _MAGIC) - _MAGIC_BITS


def _f(v: float):
    return tvm.tirx.const(v, "float32")


def exp_approx(x, *, clamp: bool = True):
    """e^x for a float32 PrimExpr (see the module docstring), relative error ~2e-7. `clamp=False`:
    the caller has already bounded x to [-87, 88]."""
    if clamp:
        x = te.min(te.max(x, _f(-87.0)), _f(88.0))
    biased = x * _f(1.4426950408889634) + _f(_MAGIC)
    # n back in the integer domain: (biased - _MAGIC) as floats would be reassociated away (fast math)
    n = (tvm.tirx.reinterpret("int32", biased) - tvm.tirx.const(_MAGIC_BITS, "int32")).astype("float32")
    r = x - n * _f(_LN2_HI) - n * _f(_LN2_LO)
    p = _f(_POLY[-1])
    for c in reversed(_POLY[:-1]):
        p = p * r + _f(c)
    bits = tvm.tirx.shift_left(tvm.tirx.reinterpret("uint32", biased), tvm.tirx.const(23, "uint32"))
    return (_f(1.0) + r * p) * tvm.tirx.reinterpret("float32", bits)


def reciprocal(d):
    """1 / d for a float32 d in [1, 2^126) without a divide: the exponent-flip guess (error < 12.5 %),
    then three Newton steps r <- r (2 - d r), each squaring the relative error (< 1e-7)."""
    bits = tvm.tirx.const(0x7EF311C3, "int32") - tvm.tirx.reinterpret("int32", d)
    r = tvm.tirx.reinterpret("float32", bits)
    for _ in range(3):
        r = r * (_f(2.0) - d * r)
    return r


def sigmoid(x, *, divide: bool = True):
    """1 / (1 + e^-x). `divide`: a vector divide (AVX-512: the Newton form measured 0.16 vs 0.07 ns per
    element); else the Newton reciprocal (the A53's divider is not pipelined: 14 cycles per fdiv,
    against 7 pipelined ops), with x clamped to +-80 so 1 + e^-x stays where it holds."""
    if divide:
        return _f(1.0) / (_f(1.0) + exp_approx(-x))
    x = te.min(te.max(x, _f(-80.0)), _f(80.0))
    return reciprocal(_f(1.0) + exp_approx(-x, clamp=False))


# the activations' TIR expressions (graph/ops/float_act.py entries name them): f(value, *params, isa)

def none_expr(value, isa):
    return value


def relu_expr(value, isa):
    return te.max(value, _f(0.0))


def clip_expr(value, lo, hi, isa):
    return te.min(te.max(value, _f(lo)), _f(hi))


def sigmoid_expr(value, isa):
    return sigmoid(value, divide=isa != "neon")


def swish_expr(value, isa):
    return value * sigmoid(value, divide=isa != "neon")


def hswish_expr(value, isa):
    # x * clip(x / 6 + 1/2, 0, 1): one multiply-add, max, min, multiply (x * relu6(x + 3) / 6: five ops)
    return value * te.min(te.max(value * _f(1.0 / 6.0) + _f(0.5), _f(0.0)), _f(1.0))


def prelu_expr(value, alpha, isa):
    # max(x, 0) + alpha min(x, 0): fmax, fmin, one multiply-add per vector, exactly x or alpha * x
    return te.max(value, _f(0.0)) + alpha * te.min(value, _f(0.0))


def activate(value, act: tuple, isa: str | None = None):
    """`value` through the activation `act` (a graph/ops/float_act entry's kind, then its params: clip's
    bounds), for the vector ISA `isa` (common.Simd.isa; "neon" avoids the divide)."""
    d = float_act.of(act[0])
    if d is None:
        raise ValueError(f"unknown activation {act!r}")
    return registry.resolve(d.kernel)(value, *act[1:], isa)
