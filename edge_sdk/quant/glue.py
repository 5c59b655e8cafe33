"""The glue between two bitserial layers, fused (Riptide) and unfused, in plain numpy.

Unfused (the ablation baseline; float ops between layers):
    y = acc * weight_scale * in_step                 dequantize and weight scale
    z = gamma * (y - mean) / sqrt(var + eps) + beta   batch norm
    q = clip(floor(z / out_step + 0.5), 0, 2^a - 1)  ReLU + quantize to the next a-bit codes
  i.e. q = clip(floor(acc * M + B + 0.5), 0, 2^a - 1) with, per output channel,
    M = weight_scale * in_step * gamma / (sqrt(var + eps) * out_step)
    B = (beta - gamma * mean / sqrt(var + eps)) / out_step

Fused (two integer ops, in the conv's epilogue, then bitpack):
    q = clip(((acc << lshift) + offset) >> rshift, 0, 2^a - 1)
  with |M| ~= 2^-shift (shift = round(-log2 |M|); rshift = max(shift, 0), lshift = max(-shift, 0))
  and offset = floor((B + 0.5) * 2^rshift). A negative M (gamma < 0) is folded into the weights:
  the channel's weight codes are complemented (`flip_weight_codes`), which negates acc exactly.

How far apart they are: when |M| is exactly a power of two (Riptide trains with that constraint,
"shift normalization"), fused == unfused exactly, because for integer n and integer k > 0,
floor((n + x) / k) == floor((n + floor(x)) / k): the offset's rounding is invisible (one exception: a
channel with |M| * acc_bound < 1/2 gets the capped shift of derive_fused_glue, not its own, and may then
differ by one code where acc * M + B + 1/2 falls just past an integer). Otherwise the
only error is the scale snap, |M| vs 2^-shift (a factor within [2^-0.5, 2^0.5]), so an output moves
by at most |acc * (M - 2^-shift)| + 1 codes; `compare_glue` measures it on real accumulators.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from edge_sdk.errors import ModelError

INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class GlueParams:
    """Float parameters of one layer's glue; per-output-channel arrays (or scalars)."""

    weight_scale: np.ndarray
    in_step: float
    out_step: float
    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    out_bits: int
    eps: float = 1e-5

    def multiplier_and_bias(self) -> tuple[np.ndarray, np.ndarray]:
        """(M, B) in float64, broadcast to one value per channel."""
        sd = np.sqrt(np.asarray(self.var, dtype=np.float64) + self.eps)
        gamma = np.asarray(self.gamma, dtype=np.float64)
        m = np.asarray(self.weight_scale, dtype=np.float64) * self.in_step * gamma / (sd * self.out_step)
        b = (np.asarray(self.beta, dtype=np.float64) - gamma * np.asarray(self.mean, dtype=np.float64) / sd) / self.out_step
        m, b = np.broadcast_arrays(m, b)
        return m.copy(), b.copy()


@dataclass(frozen=True)
class FusedGlue:
    """Integer glue for one layer: per-channel shift (>0 right, <0 left), offset, weight flip."""

    shift: np.ndarray  # int64
    offset: np.ndarray  # int64, fits int32
    flip: np.ndarray  # bool: complement this channel's weight codes
    out_bits: int

    @property
    def rshift(self) -> np.ndarray:
        return np.maximum(self.shift, 0)

    @property
    def lshift(self) -> np.ndarray:
        return np.maximum(-self.shift, 0)


def derive_fused_glue(params: GlueParams, *, acc_bound: int) -> FusedGlue:
    """Collapse weight scale + BN + ReLU + quantize into (shift, offset, flip).

    `acc_bound` bounds |acc| (e.g. C*KH*KW*(2^a-1)*(2^b-1)); it caps useless shifts (beyond it the
    accumulator moves the output by under half a code) and proves the int32 epilogue cannot overflow.
    """
    if params.out_bits < 1 or params.out_bits > 8:
        raise ModelError(f"fused glue: output bit width {params.out_bits} is outside 1..8")
    m, b = params.multiplier_and_bias()
    qmax = (1 << params.out_bits) - 1
    flip = m < 0
    mabs = np.abs(m)
    max_shift = int(acc_bound).bit_length() + 1
    with np.errstate(divide="ignore"):
        shift = np.where(mabs > 0, np.round(-np.log2(np.where(mabs > 0, mabs, 1.0))), max_shift)
    shift = np.clip(shift, -16, max_shift).astype(np.int64)
    rsh, lsh = np.maximum(shift, 0), np.maximum(-shift, 0)
    # Beyond these bounds on B the output saturates for every |acc| <= acc_bound: clip B there.
    span = acc_bound * np.exp2(-shift.astype(np.float64))
    b = np.clip(b + 0.5, -span - 1, qmax + 1 + span)
    offset = np.floor(b * np.exp2(rsh.astype(np.float64))).astype(np.int64)
    worst = (int(acc_bound) << int(lsh.max(initial=0))) + int(np.abs(offset).max(initial=0))
    if worst > INT32_MAX:
        raise ModelError(f"fused glue: |acc << lshift| + |offset| can reach {worst}, past int32; "
                         f"a multiplier of {mabs.max():.3g} is too large for this layer")
    return FusedGlue(shift=shift, offset=offset, flip=flip, out_bits=params.out_bits)


def flip_weight_codes(w_codes, *, flip, bits: int, out_axis: int = -1) -> np.ndarray:
    """Complement the codes of flipped output channels: value 2u-(2^b-1) becomes its negative."""
    w = np.asarray(w_codes).astype(np.int64)
    shape = [1] * w.ndim
    shape[out_axis] = -1
    f = np.asarray(flip, dtype=bool).reshape(shape)
    return np.where(f, ((1 << bits) - 1) - w, w)


def fused_glue(acc, glue: FusedGlue) -> np.ndarray:
    """Next-layer codes from accumulators computed with the *flipped* weights (channels last)."""
    acc = np.asarray(acc, dtype=np.int64)
    q = ((acc << glue.lshift) + glue.offset) >> glue.rshift
    return np.clip(q, 0, (1 << glue.out_bits) - 1)


def unfused_glue(acc, params: GlueParams, *, dtype=np.float32) -> np.ndarray:
    """Next-layer codes through the float ops the unfused graph runs (in `dtype`, float32 there)."""
    f = lambda v: np.asarray(v, dtype=dtype)  # noqa: E731
    y = np.asarray(acc).astype(dtype) * f(params.weight_scale) * f(params.in_step)
    z = f(params.gamma) * (y - f(params.mean)) / np.sqrt(f(params.var) + f(params.eps)) + f(params.beta)
    z = np.maximum(z, 0)  # ReLU (the clip below would do it too; kept to mirror the graph)
    q = np.floor(z / f(params.out_step) + f(0.5))
    return np.clip(q, 0, (1 << params.out_bits) - 1).astype(np.int64)


def shiftnorm_params(params: GlueParams) -> GlueParams:
    """The same layer with gamma rescaled so |M| is a power of two (what shiftnorm training gives)."""
    m, _ = params.multiplier_and_bias()
    mabs = np.abs(m)
    safe = np.where(mabs > 0, mabs, 1.0)
    ratio = np.exp2(-np.round(-np.log2(safe))) / safe  # snapped |M| / |M|; 1 where M == 0
    gamma = np.asarray(params.gamma, dtype=np.float64) * ratio
    return replace(params, gamma=gamma)


def compare_glue(acc, params: GlueParams, glue: FusedGlue) -> dict:
    """How the fused codes differ from the unfused float ones on these (unflipped) accumulators."""
    acc = np.asarray(acc, dtype=np.int64)
    fused = fused_glue(np.where(glue.flip, -acc, acc), glue)
    ref = unfused_glue(acc, params)
    d = np.abs(fused - ref)
    return {
        "n": int(d.size),
        "mismatch_fraction": float(np.mean(d > 0)) if d.size else 0.0,
        "max_abs_diff": int(d.max(initial=0)),
        "mean_abs_diff": float(d.mean()) if d.size else 0.0,
    }
