"""Activations a float kernel applies in its epilogue, as vectorizable TIR expressions.

    ("none",) ("relu",) ("clip", lo, hi) ("sigmoid",) ("swish",) ("hswish",)

Why our own exp: TVM lowers `tirx.exp` / `sigmoid` to LLVM's exp intrinsic, which both backends
turn into one scalar `expf` call per lane; EfficientNet-B0's 49 swish layers then cost more than all
its convolutions. `exp_approx` is the classic range reduction x = n ln2 + r, |r| <= ln2/2, a degree-6
Taylor polynomial for e^r (truncation < 1.3e-7 relative) and 2^n built in the exponent bits, all in
plain vector arithmetic. Inputs are clamped to [-87, 88], so 2^n stays a normal float.

hard-swish is x * relu6(x + 3) / 6 (MobileNetV3; TFLite HARD_SWISH, ONNX HardSwish); hard-sigmoid
needs no kind of its own: clip(x + 3, 0, 6) / 6 folds into the bias and a scaled ("clip", lo, hi).
"""
from __future__ import annotations

import tvm
from tvm import te

ACTS = ("none", "relu", "clip", "sigmoid", "swish", "hswish")
_LN2_HI = 0.693145751953125  # ln 2 split so n * _LN2_HI is exact in float32 for |n| < 256
_LN2_LO = 1.428606765330187e-06
_TAYLOR = (1.0, 1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720)


def _f(v: float):
    return tvm.tirx.const(v, "float32")


def exp_approx(x):
    """e^x for a float32 PrimExpr (see the module docstring), relative error ~2e-7."""
    x = te.min(te.max(x, _f(-87.0)), _f(88.0))
    n = te.floor(x * _f(1.4426950408889634) + _f(0.5))
    r = x - n * _f(_LN2_HI) - n * _f(_LN2_LO)
    p = _f(_TAYLOR[-1])
    for c in reversed(_TAYLOR[:-1]):
        p = p * r + _f(c)
    bits = tvm.tirx.shift_left(n.astype("int32") + tvm.tirx.const(127, "int32"), tvm.tirx.const(23, "int32"))
    return p * tvm.tirx.reinterpret("float32", bits)


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
    return reciprocal(_f(1.0) + exp_approx(-x))


def activate(value, act: tuple, isa: str | None = None):
    """`value` through the activation `act` (one of ACTS, with clip's bounds), for the vector ISA
    `isa` (common.Simd.isa; "neon" avoids the divide)."""
    kind = act[0]
    if kind == "none":
        return value
    if kind == "relu":
        return te.max(value, _f(0.0))
    if kind == "clip":
        return te.min(te.max(value, _f(act[1])), _f(act[2]))
    if kind == "sigmoid":
        return sigmoid(value, divide=isa != "neon")
    if kind == "swish":
        return value * sigmoid(value, divide=isa != "neon")
    if kind == "hswish":
        return value * te.min(te.max(value + _f(3.0), _f(0.0)), _f(6.0)) * _f(1.0 / 6.0)
    raise ValueError(f"unknown activation {act!r}")
