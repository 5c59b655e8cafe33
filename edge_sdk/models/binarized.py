"""Binarized zoo networks (Riptide layout): how a float zoo model becomes a bitserial network.

ResNet18 (the zoo's `_resnet18`, same names, same seeded weights or .npz):
  stem    (stem="int8", the default, DEFAULT_STEM; stem="float32" selectable) integer only, straight to codes: the input is quantized to int8
          (scale 1/128, zero point 0: the golden 1/128 grid exactly; +1.0 saturates to 127/128), conv1's
          BN-folded weights to int8 per output channel (symmetric, max|w| -> 127) with an int32 bias on the
          accumulator's grid; int32 accumulation; the epilogue is the int8 backend's: TFLite's fixed-point
          requantize by M = s_in * s_w / step onto the code grid (zero point 0, rounding as
          quant.int8.multiply_by_quantized_multiplier), clamped to [0, 2^a - 1] (ReLU and saturation in one).
          Then max pool 3x3/2 on the codes: the quantizer is monotone non-decreasing, so quantize(max) ==
          max(quantize), and the codes equal quantizing the pooled accumulators. No float tensor exists.
          It is a post-training quantization of a stem trained in float: on the digits nets (360 held-out
          images) w1a2 0.9639 -> 0.9500, w1a1 0.8861 -> 0.8861 (tests/test_digits_accuracy.py), hence
          the float stem stays selectable. On the A53 proxy it runs about as many instructions as the
          float stem (tools/count_stem.py: 48.3 M vs 48.4 M at 224): without sdot an int8 MAC is a
          16-bit smlal, 4 per instruction like fp32 fmla.
          (stem="float32", the default) conv1 + BN + ReLU in float32, max pool (float), then quantize floor(y/step + 1/2).
          Its BN-folded weights are snapped per output channel to m * 2^-e with |m| <= 511 and its bias to
          the grid 2^-(7+e): with an input on the 1/128 grid (the golden input) every partial sum is exact
          in float32 whatever the summation order, so the compiled stem's codes equal the reference's.
          (The snap is a 9-bit weight quantization of the float stem; any other input still works, it just
          is not bit-exact at rounding ties.)
  blocks  every other conv (3x3 and the 1x1 downsample shortcuts) is bitserial: weights quantized by
          `quant.bitserial.quantize_weights` (w bits, per-channel scale), activations unipolar a-bit codes.
          Each conv's scale + BN + ReLU + quantize becomes Riptide's fused glue (`quant.glue`):
          q = clip(((acc << l) + offset) >> r, 0, 2^a - 1), bitpacked in the conv's epilogue.
  residual in the quantized domain: conv2's glue is taken *unclipped* (an integer in output-code units),
          the shortcut is added in the same units (identity: the block input codes << s, where
          s = log2(step_in / step_out), 0 here; downsample: the 1x1 conv's own unclipped glue), then the
          sum is clipped to [0, 2^a - 1] (the block's ReLU and saturation) and bitpacked. Each branch is
          rounded before the add (as in the fused kernel), so fused and unfused agree exactly.
  head    dequantize (code * step), global average pool, dense + softmax in float32.
Activation ranges are fixed: every binary activation has step 2^(1-a) (BN output is about unit scale,
  so codes cover [0, 2)); powers of two, as Riptide's shift normalization makes them.
Shift normalization (`shiftnorm=True`, the default; Riptide trains this way): BN's gamma is rescaled so
  each channel's multiplier |M| is a power of two, then the glue is *defined* by its integers (shift,
  offset); the unfused float form uses M = 2^-shift and B = offset / 2^r - 1/2 exactly, so fused ==
  unfused bit for bit. With shiftnorm=False the unfused glue keeps the float M and B, and fused differs
  by the power-of-two snap of M (quant/glue.py bounds it).
MobileNetV1 (Larq/Riptide-style, a decision): a depthwise 3x3 conv has one input channel per output, so
  its bitserial dot product would be 9 taps x a bits with no word of channels to pack: bitserial does not
  pay there. So the 13 pointwise convs are bitserial (fused glue, bitpacked codes out) and the depthwise
  convs stay float32 (int8 when it lands): each one reads the dequantized codes (code * step), applies
  BN + ReLU, and is quantized + bitpacked for the next pointwise conv. Its weights are snapped like the
  stem's (inputs are on the 2^(1-a) grid), so it is exact in float32 too. The stem (int8 or float, as
  for ResNet18, without the pool) quantizes its output before the first depthwise conv. Float tensors exist around every depthwise layer: MobileNet is not
  "fully binary" the way ResNet18 is, and no residuals.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

from edge_sdk.errors import ModelError
from edge_sdk.models.zoo import BN_EPS, _Weights, same_padding
from edge_sdk.quant.bitserial import quantize_weights
from edge_sdk.quant.glue import FusedGlue, GlueParams, derive_fused_glue, flip_weight_codes, shiftnorm_params

INPUT_GRID_BITS = 7  # the golden input is k / 128
STEM_INPUT_SCALE, STEM_INPUT_ZERO_POINT = 2.0 ** -INPUT_GRID_BITS, 0  # the integer stem's int8 input
STEMS = ("int8", "float32")
# int8 by default, the stem every compiled product uses: the zoo variants (variants.py: w1a1/w1a2/... int8) and
# the digits accuracy (bench/accuracy.py STEM). On the A53 it is the int8 backend's 8-bit tile (ResNet18 224:
# ~35 modelled ms for quantize + conv + pool + pack); as a post-training quantization of a stem trained in float
# it costs 5 of 360 digits images (w1a2). stem="float32" (the digits nets' training stem, tools/train_digits.py;
# variants w1a1/w1a2-float-stem) stays selectable.
DEFAULT_STEM = "int8"
STEM_WEIGHT_BITS = 9  # |m| <= 511: 147 taps * 128 * 511 < 2^24, exact in float32


@dataclass(frozen=True)
class BinConv:
    """One bitserial conv with its glue. Weight codes are already flipped where glue.flip says."""

    name: str
    in_shape: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]
    kernel: int
    stride: int
    pad: tuple[int, int, int, int]  # top, left, bottom, right
    w_codes: np.ndarray  # (KH, KW, C, O) int64, flipped
    w_bits: int
    a_bits: int  # input codes
    out_bits: int
    glue: FusedGlue
    mult: np.ndarray  # (O,) unfused float multiplier |M| (2^-shift under shiftnorm)
    bias_half: np.ndarray  # (O,) unfused float B + 1/2, so q = floor(acc * mult + bias_half)


@dataclass(frozen=True)
class Block:
    name: str
    conv1: BinConv
    conv2: BinConv
    down: BinConv | None
    res_lshift: int = 0  # identity shortcut: codes << res_lshift are in conv2's output units


@dataclass(frozen=True)
class FloatDw:
    """A float32 depthwise conv + BN + ReLU of a binarized MobileNet (weights snapped: exact in float32)."""

    name: str
    weight: np.ndarray  # (3, 3, C) float32
    bias: np.ndarray  # (C,)
    stride: int
    pad: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]


@dataclass(frozen=True)
class DwPw:
    """MobileNet: float depthwise on dequantized codes, quantize, then a bitserial pointwise conv."""

    name: str
    dw: FloatDw
    pw: BinConv


@dataclass(frozen=True)
class Stem:
    weight: np.ndarray  # (K, K, 3, C) float32, BN folded and snapped
    bias: np.ndarray  # (C,) float32, snapped
    stride: int
    pad: tuple[int, int, int, int]
    pool: int  # 0: no max pool (MobileNet)
    pool_stride: int
    pool_pad: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]  # after the pool
    # the integer stem (None: the float stem above runs): int8 input x_q = quantize(x, in_scale, in_zp),
    # acc = conv(x_q - in_zp, qweight) + qbias (int32), codes = clamp(mbqm(acc, mult, shift), 0, 2^a - 1)
    qweight: np.ndarray | None = None  # (K, K, 3, C) int8 HWIO, per output channel scale w_scale
    qbias: np.ndarray | None = None  # (C,) int32, in units of in_scale * w_scale
    w_scale: np.ndarray | None = None  # (C,) float64
    mult: np.ndarray | None = None  # (C,) int64 TFLite quantized multiplier of in_scale * w_scale / step
    shift: np.ndarray | None = None  # (C,) int64 its shift (<= 0: right shifts)
    in_scale: float = STEM_INPUT_SCALE
    in_zp: int = STEM_INPUT_ZERO_POINT

    @property
    def integer(self) -> bool:
        return self.qweight is not None


@dataclass(frozen=True)
class BinarizedNet:
    name: str
    input_shape: tuple[int, int, int, int]
    stem: Stem
    blocks: list  # Block (ResNet) or DwPw (MobileNet)
    fc_weight: np.ndarray  # (C, classes) float32
    fc_bias: np.ndarray
    a_bits: int
    w_bits: int
    step: float  # every binary activation's quantization step
    shiftnorm: bool
    mode: str = "unipolar"

    @property
    def convs(self) -> list[BinConv]:
        return [c for b in self.blocks for c in ((b.pw,) if isinstance(b, DwPw) else (b.conv1, b.conv2, b.down))
                if c is not None]


def activation_step(a_bits: int) -> float:
    return 2.0 ** (1 - a_bits)


@dataclass(frozen=True)
class Binarization:
    """How a zoo network is binarized: weight and activation bit widths, shift normalization (the glue's
    power-of-two form, module docstring) and the stem ("int8" or "float32")."""

    a_bits: int
    w_bits: int
    shiftnorm: bool = True
    stem: str = DEFAULT_STEM

    @property
    def step(self) -> float:
        return activation_step(self.a_bits)

    def check(self, model: str) -> None:
        if self.a_bits not in (1, 2, 3) or self.w_bits not in (1, 2):
            raise ModelError(f"binarized {model}: w{self.w_bits}a{self.a_bits} is not supported "
                             "(weights 1-2 bits, activations 1-3)")


def _bn(w: _Weights, name: str, cout: int) -> tuple[np.ndarray, ...]:
    return tuple(w.get(f"{name}.bn.{k}", (cout,), kind=k).astype(np.float64) for k in ("gamma", "beta", "mean", "var"))


def _snap_float_layer(wt: np.ndarray, b: np.ndarray, *, in_exp: int, in_max: int, taps: int,
                      what: str) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel (last axis): weights to m * 2^-e (|m| <= 2^9 - 1), bias to the grid 2^(in_exp-e).

    With inputs k * 2^in_exp (|k| <= in_max) every partial sum of `taps` products plus the bias is an
    integer multiple of 2^(in_exp-e) below 2^24 of them: exact in float32 in any order (module docstring).
    """
    lim = (1 << STEM_WEIGHT_BITS) - 1
    peak = np.abs(wt).reshape(-1, wt.shape[-1]).max(axis=0)
    e = np.where(peak > 0, np.floor(np.log2(lim / np.where(peak > 0, peak, 1.0))), 0.0)
    m = np.round(wt * np.exp2(e))
    units = np.round(b * np.exp2(e - in_exp))
    if (taps * in_max * lim + np.abs(units)).max() >= 2 ** 24:
        raise ModelError(f"binarized {what}: bias too large for an exact float32 layer (|bias| / max|w| is huge)")
    return (m * np.exp2(-e)).astype(np.float32), (units * np.exp2(in_exp - e)).astype(np.float32)


def _snap_stem(wt: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _snap_float_layer(wt, b, in_exp=-INPUT_GRID_BITS, in_max=1 << INPUT_GRID_BITS,
                             taps=int(np.prod(wt.shape[:3])), what="stem")


def _int8_stem(wt: np.ndarray, b: np.ndarray, *, step: float) -> dict:
    """The integer stem's constants from the BN-folded float weights (K, K, 3, C) and bias (C,).

    Weights: symmetric int8 per output channel (the int8 scheme's weight quantization); bias: int32 on
    the accumulator grid in_scale * w_scale; requantize multiplier M = in_scale * w_scale / step as
    TFLite's (multiplier, shift), so codes = clamp(mbqm(acc + bias), 0, 2^a - 1) round y / step.
    """
    from edge_sdk.quant.int8 import quantize_multiplier, tflite_round

    wt, b = np.asarray(wt, np.float64), np.asarray(b, np.float64)
    peak = np.abs(wt).reshape(-1, wt.shape[-1]).max(axis=0)
    w_scale = np.where(peak > 0, peak / 127.0, 1.0)
    q = np.clip(tflite_round(wt / w_scale), -127, 127).astype(np.int8)
    acc_scale = STEM_INPUT_SCALE * w_scale
    qb = tflite_round(b / acc_scale)
    if np.abs(qb).max() >= 2 ** 30:
        raise ModelError("binarized stem: bias too large for an int32 accumulator (|bias| / max|w| is huge)")
    pairs = [quantize_multiplier(float(m)) for m in acc_scale / step]
    mult = np.array([p[0] for p in pairs], np.int64)
    shift = np.array([p[1] for p in pairs], np.int64)
    if np.any(shift > 0):
        raise ModelError(f"binarized stem: requantize multiplier >= 1 (max {float((acc_scale / step).max()):.3g}): "
                         "weights far larger than the activation step")
    return dict(qweight=q, qbias=qb.astype(np.int32), w_scale=w_scale, mult=mult, shift=shift)


def _stem_extra(stem: str, wt, b, step: float) -> dict:
    if stem not in STEMS:
        raise ModelError(f"binarized stem '{stem}' is not one of {', '.join(STEMS)}")
    return _int8_stem(wt, b, step=step) if stem == "int8" else {}


def _bin_conv(w: _Weights, name: str, in_shape, cout: int, k: int, stride: int, bits: Binarization) -> BinConv:
    a_bits, w_bits, step, shiftnorm = bits.a_bits, bits.w_bits, bits.step, bits.shiftnorm
    n, h, wd, cin = in_shape
    wf = w.get(f"{name}.weight", (k, k, cin, cout), fan_in=k * k * cin)
    gamma, beta, mean, var = _bn(w, name, cout)
    codes, scale = quantize_weights(wf, bits=w_bits, out_axis=-1)
    params = GlueParams(weight_scale=scale, in_step=step, out_step=step, gamma=gamma, beta=beta, mean=mean,
                        var=var, out_bits=a_bits, eps=BN_EPS)
    if shiftnorm:
        params = shiftnorm_params(params)
    bound = k * k * cin * ((1 << a_bits) - 1) * ((1 << w_bits) - 1)
    glue = derive_fused_glue(params, acc_bound=bound)
    if shiftnorm:  # the network is defined by its integers; the float form is exact
        mult = np.exp2(-glue.shift.astype(np.float64))
        bias_half = glue.offset.astype(np.float64) * np.exp2(-glue.rshift.astype(np.float64))
    else:
        m, b = params.multiplier_and_bias()
        mult, bias_half = np.abs(m), b + 0.5
    ph, pw = same_padding(h, k, stride), same_padding(wd, k, stride)
    return BinConv(name=name, in_shape=tuple(in_shape), out_shape=(n, -(-h // stride), -(-wd // stride), cout),
                   kernel=k, stride=stride, pad=(ph[0], pw[0], ph[1], pw[1]),
                   w_codes=flip_weight_codes(codes, flip=glue.flip, bits=w_bits), w_bits=w_bits, a_bits=a_bits,
                   out_bits=a_bits, glue=glue, mult=mult.astype(np.float32), bias_half=bias_half.astype(np.float32))


def binarized_resnet18(*, alpha: float, resolution: int, classes: int, weights: Path | None = None, seed: int = 0,
                       **binarization) -> BinarizedNet:
    """The zoo's ResNet18 (same weight names and seeded draw order) in the Riptide layout; `binarization`:
    the fields of Binarization (a_bits, w_bits, shiftnorm, stem)."""
    bits = Binarization(**binarization)
    bits.check("resnet18")
    a_bits, w_bits, shiftnorm, step = bits.a_bits, bits.w_bits, bits.shiftnorm, bits.step
    w = _Weights(weights, seed)
    c = lambda ch: max(8, int(ch * alpha))  # noqa: E731  (the zoo's channel rule)
    n, res = 1, resolution
    c1 = c(64)
    wt = w.get("conv1.weight", (7, 7, 3, c1), fan_in=7 * 7 * 3)
    gamma, beta, mean, var = _bn(w, "conv1", c1)
    s = gamma / np.sqrt(var + BN_EPS)
    sw, sb = _snap_stem(wt * s, beta - mean * s)
    extra = _stem_extra(bits.stem, wt * s, beta - mean * s, step)
    ph, pw = same_padding(res, 7, 2), same_padding(res, 7, 2)
    h = -(-res // 2)
    qh = same_padding(h, 3, 2)
    shape = (n, -(-h // 2), -(-h // 2), c1)
    stem = Stem(weight=sw, bias=sb, stride=2, pad=(ph[0], pw[0], ph[1], pw[1]), pool=3, pool_stride=2,
                pool_pad=(qh[0], qh[0], qh[1], qh[1]), out_shape=shape, **extra)
    blocks = []
    for stage, ch in enumerate([64, 128, 256, 512], start=1):
        for j in range(2):
            stride = 2 if (j == 0 and stage > 1) else 1
            name = f"layer{stage}.{j}"
            conv1 = _bin_conv(w, f"{name}.conv1", shape, c(ch), 3, stride, bits)
            conv2 = _bin_conv(w, f"{name}.conv2", conv1.out_shape, c(ch), 3, 1, bits)
            down = None
            if stride != 1 or shape[3] != c(ch):
                down = _bin_conv(w, f"{name}.downsample", shape, c(ch), 1, stride, bits)
            blocks.append(Block(name=name, conv1=conv1, conv2=conv2, down=down))
            shape = conv2.out_shape
    fc_w = w.get("fc.weight", (shape[3], classes), fan_in=shape[3], kind="fc")
    fc_b = w.get("fc.bias", (classes,), kind="bias")
    w.check_all_used()
    return BinarizedNet(name="resnet18", input_shape=(1, res, res, 3), stem=stem, blocks=blocks, fc_weight=fc_w,
                        fc_bias=fc_b, a_bits=a_bits, w_bits=w_bits, step=step, shiftnorm=shiftnorm)


def binarized_mobilenet_v1(*, alpha: float, resolution: int, classes: int, weights: Path | None = None,
                           seed: int = 0, **binarization) -> BinarizedNet:
    """The zoo's MobileNetV1 with bitserial pointwise convs and float depthwise ones (module docstring);
    `binarization`: the fields of Binarization (a_bits, w_bits, shiftnorm, stem)."""
    bits = Binarization(**binarization)
    bits.check("mobilenet_v1")
    a_bits, w_bits, shiftnorm = bits.a_bits, bits.w_bits, bits.shiftnorm
    w = _Weights(weights, seed)
    c = lambda ch: int(ch * alpha)  # noqa: E731  (the zoo's channel rule)
    step, qmax = activation_step(a_bits), (1 << a_bits) - 1
    c1, h = c(32), -(-resolution // 2)
    wt = w.get("conv1.weight", (3, 3, 3, c1), fan_in=27)
    gamma, beta, mean, var = _bn(w, "conv1", c1)
    sc = gamma / np.sqrt(var + BN_EPS)
    sw, sb = _snap_stem(wt * sc, beta - mean * sc)
    extra = _stem_extra(bits.stem, wt * sc, beta - mean * sc, step)
    ph = same_padding(resolution, 3, 2)
    shape = (1, h, h, c1)
    stem = Stem(weight=sw, bias=sb, stride=2, pad=(ph[0], ph[0], ph[1], ph[1]), pool=0, pool_stride=1,
                pool_pad=(0, 0, 0, 0), out_shape=shape, **extra)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    blocks = []
    for i, (ch, stride) in enumerate(plan, start=1):
        n, hh, ww, cin = shape
        wd = w.get(f"dw{i}.weight", (3, 3, cin, 1), fan_in=9).reshape(3, 3, cin)
        gamma, beta, mean, var = _bn(w, f"dw{i}", cin)
        sc = gamma / np.sqrt(var + BN_EPS)
        dw_w, dw_b = _snap_float_layer(wd * sc, beta - mean * sc, in_exp=1 - a_bits, in_max=qmax, taps=9,
                                       what=f"dw{i}")
        p = same_padding(hh, 3, stride)
        dw = FloatDw(name=f"dw{i}", weight=dw_w, bias=dw_b, stride=stride, pad=(p[0], p[0], p[1], p[1]),
                     out_shape=(n, -(-hh // stride), -(-ww // stride), cin))
        pw = _bin_conv(w, f"pw{i}", dw.out_shape, c(ch), 1, 1, bits)
        blocks.append(DwPw(name=f"block{i}", dw=dw, pw=pw))
        shape = pw.out_shape
    fc_w = w.get("fc.weight", (shape[3], classes), fan_in=shape[3], kind="fc")
    fc_b = w.get("fc.bias", (classes,), kind="bias")
    w.check_all_used()
    return BinarizedNet(name="mobilenet_v1", input_shape=(1, resolution, resolution, 3), stem=stem, blocks=blocks,
                        fc_weight=fc_w, fc_bias=fc_b, a_bits=a_bits, w_bits=w_bits, step=step, shiftnorm=shiftnorm)


BUILDERS = {"resnet18": binarized_resnet18, "mobilenet_v1": binarized_mobilenet_v1}


def binarize(model, *, a_bits: int, w_bits: int, polarity: str = "unipolar", shiftnorm: bool = True,
             stem: str = DEFAULT_STEM) -> BinarizedNet:
    """The binarized counterpart of a zoo Model (its source says which weights: .npz or seed)."""
    if polarity != "unipolar":
        raise ModelError(f"binarized networks: polarity '{polarity}' is not built (ReLU networks are unipolar; "
                         "bipolar exists at the op level only)")
    if not model.source.startswith("zoo:"):
        raise ModelError(f"{model.source}: only zoo models can be binarized here (Larq .tflite import is separate)")
    if model.name not in BUILDERS:
        raise ModelError(f"model '{model.name}': no binarized layout; available: {', '.join(BUILDERS)}")
    q = {k: v[0] for k, v in parse_qs(model.source.partition("?")[2]).items()}
    weights = Path(q["weights"]) if "weights" in q else None
    opts = model.options
    return BUILDERS[model.name](alpha=float(opts["alpha"]), resolution=int(opts["resolution"]),
                              classes=int(opts["classes"]), a_bits=a_bits, w_bits=w_bits, weights=weights,
                              seed=int(q.get("seed", 0)), shiftnorm=shiftnorm, stem=stem)


def golden_input(shape, *, seed: int) -> np.ndarray:
    """A camera-like input on the 1/128 grid ((u - 128) / 128 for pixels u): exact through the stem."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 256, size=shape)
    return ((u - 128) / 128.0).astype(np.float32)
