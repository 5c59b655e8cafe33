"""The built-in model zoo, written directly in TVM Relax (NHWC activations, HWIO weights).

Weights come from an .npz file or a seeded random init (latency does not depend on weight values).
Weight names (what an .npz must hold; tools/make_test_models.py writes Keras weights in this scheme):
  conv       "<layer>.weight" (kh, kw, cin, cout)      depthwise "<layer>.weight" (kh, kw, cin, multiplier)
  batch norm "<layer>.bn.gamma|beta|mean|var" (eps 1e-3, as Keras)   or a plain "<layer>.bias"
  dense      "fc.weight" (in, out), "fc.bias" (out,)
Batch norm is folded into the conv weights and bias here, as the TFLite converter does.
Padding is TensorFlow's SAME (asymmetric for stride 2), so zoo models match converter-written files.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import ModelError, UsageError
from edge_sdk.models.base import Model, Preprocess

BN_EPS = 1e-3


class _Weights:
    """Hands out named weights from an .npz (checking shapes, and that none is left unused) or seeded init."""

    def __init__(self, npz: Path | None, seed: int, *, fc_gain: float = 1.0):
        self.path = npz
        self.fc_gain = fc_gain
        self.rng = np.random.default_rng(seed)
        self.used: set[str] = set()
        self.arrays = None
        if npz is not None:
            try:
                with np.load(npz) as f:
                    self.arrays = {k: f[k] for k in f.files}
            except (OSError, ValueError) as e:
                raise ModelError(f"{npz}: not a readable .npz weights file ({e})") from e

    def get(self, key: str, shape: tuple[int, ...], *, fan_in: int = 1, kind: str = "weight") -> np.ndarray:
        self.used.add(key)
        if self.arrays is None:
            return self._random(shape, fan_in, kind)
        if key not in self.arrays:
            raise ModelError(f"{self.path}: missing weight '{key}' (expected shape {list(shape)})")
        arr = self.arrays[key]
        if tuple(arr.shape) != tuple(shape):
            raise ModelError(f"{self.path}: weight '{key}' has shape {list(arr.shape)}, expected {list(shape)}")
        return arr.astype(np.float32)

    def _random(self, shape, fan_in, kind) -> np.ndarray:
        r = self.rng
        if kind == "weight":
            return (r.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)
        if kind == "fc":  # logits with a std of ~2: a random model's softmax is neither flat nor one-hot
            return (r.standard_normal(shape) * 0.1 * self.fc_gain / math.sqrt(fan_in)).astype(np.float32)
        if kind == "gamma":
            return r.uniform(0.5, 1.5, shape).astype(np.float32)
        if kind == "var":
            return r.uniform(0.5, 1.5, shape).astype(np.float32)
        return (r.standard_normal(shape) * 0.1).astype(np.float32)  # beta, mean, bias

    def check_all_used(self) -> None:
        if self.arrays is not None:
            unused = sorted(set(self.arrays) - self.used)
            if unused:
                raise ModelError(f"{self.path}: weights not used by this model: {', '.join(unused[:5])}"
                                 + (" ..." if len(unused) > 5 else ""))


def same_padding(size: int, k: int, stride: int) -> tuple[int, int]:
    """TensorFlow SAME padding (before, after) along one axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


class _Net:
    """A small Relax graph builder that tracks the NHWC shape and names every layer."""

    def __init__(self, weights: _Weights, input_shape):
        from tvm import relax

        self.relax = relax
        self.w = weights
        self.bb = relax.BlockBuilder()
        self.x_var = relax.Var("input", relax.TensorType(input_shape, "float32"))
        self.shape = list(input_shape)

    def const(self, arr: np.ndarray):
        import tvm

        return self.relax.const(tvm.runtime.tensor(np.ascontiguousarray(arr, np.float32)))

    def conv(self, x, name, cout, k, stride=1, *, depthwise=False, act="relu6", norm="bn"):
        """conv (or depthwise) -> `norm` ("bn": folded BN; "bias"; None) -> activation ("relu", "relu6" or None)."""
        bn, bias = norm == "bn", norm == "bias"
        op = self.relax.op
        n, h, w, cin = self.shape
        if depthwise:
            mult = cout // cin
            wt = self.w.get(f"{name}.weight", (k, k, cin, mult), fan_in=k * k)
            wt = wt.reshape(k, k, 1, cin * mult)
        else:
            wt = self.w.get(f"{name}.weight", (k, k, cin, cout), fan_in=k * k * cin)
        b = np.zeros(cout, np.float32)
        if bn:
            g = self.w.get(f"{name}.bn.gamma", (cout,), kind="gamma")
            beta = self.w.get(f"{name}.bn.beta", (cout,), kind="beta")
            mean = self.w.get(f"{name}.bn.mean", (cout,), kind="mean")
            var = self.w.get(f"{name}.bn.var", (cout,), kind="var")
            s = g / np.sqrt(var + BN_EPS)
            wt, b = wt * s, beta - mean * s
        elif bias:
            b = self.w.get(f"{name}.bias", (cout,), kind="bias")
        ph, pw = same_padding(h, k, stride), same_padding(w, k, stride)
        y = self.bb.emit(op.nn.conv2d(x, self.const(wt), strides=stride, padding=(ph[0], pw[0], ph[1], pw[1]),
                                      groups=cin if depthwise else 1, data_layout="NHWC", kernel_layout="HWIO"),
                         name_hint=name)
        if bn or bias:
            y = self.bb.emit(op.add(y, self.const(b)), name_hint=f"{name}_bias")
        self.shape = [n, -(-h // stride), -(-w // stride), cout]
        return self.act(y, act, name)

    def act(self, y, act, name):
        op = self.relax.op
        if act == "relu":
            return self.bb.emit(op.nn.relu(y), name_hint=f"{name}_relu")
        if act == "relu6":
            return self.bb.emit(op.clip(y, 0.0, 6.0), name_hint=f"{name}_relu6")
        return y

    def max_pool(self, x, k, stride, name="pool"):
        n, h, w, c = self.shape
        ph, pw = same_padding(h, k, stride), same_padding(w, k, stride)
        y = self.bb.emit(self.relax.op.nn.max_pool2d(x, k, stride, padding=(ph[0], pw[0], ph[1], pw[1]),
                                                     layout="NHWC"), name_hint=name)
        self.shape = [n, -(-h // stride), -(-w // stride), c]
        return y

    def head(self, x, classes):
        """Global average pool -> dense -> softmax."""
        op = self.relax.op
        cin = self.shape[3]
        y = self.bb.emit(op.mean(x, axis=[1, 2], keepdims=False), name_hint="avgpool")
        wt = self.w.get("fc.weight", (cin, classes), fan_in=cin, kind="fc")
        b = self.w.get("fc.bias", (classes,), kind="bias")
        y = self.bb.emit(op.matmul(y, self.const(wt)), name_hint="fc")
        y = self.bb.emit(op.add(y, self.const(b)), name_hint="fc_bias")
        return self.bb.emit(op.nn.softmax(y, axis=-1), name_hint="softmax")


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _mobilenet_v1(net: _Net, x, *, alpha: float, classes: int):
    c = lambda ch: int(ch * alpha)  # noqa: E731  (Keras MobileNet's channel rule)
    x = net.conv(x, "conv1", c(32), 3, 2)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (ch, s) in enumerate(plan, start=1):
        x = net.conv(x, f"dw{i}", net.shape[3], 3, s, depthwise=True)
        x = net.conv(x, f"pw{i}", c(ch), 1)
    return net.head(x, classes)


def _mobilenet_v2(net: _Net, x, *, alpha: float, classes: int):
    x = net.conv(x, "conv1", _make_divisible(32 * alpha), 3, 2)
    plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    block = 0
    for t, ch, n, s in plan:
        for j in range(n):
            cin, cout = net.shape[3], _make_divisible(ch * alpha)
            stride, inp, name = (s if j == 0 else 1), x, f"block{block}"
            if t != 1:
                x = net.conv(x, f"{name}.expand", cin * t, 1)
            x = net.conv(x, f"{name}.dw", net.shape[3], 3, stride, depthwise=True)
            x = net.conv(x, f"{name}.project", cout, 1, act=None)
            if stride == 1 and cin == cout:
                x = net.bb.emit(net.relax.op.add(x, inp), name_hint=f"{name}_add")
            block += 1
    last = _make_divisible(1280 * alpha) if alpha > 1.0 else 1280
    x = net.conv(x, "conv_last", last, 1)
    return net.head(x, classes)


def _resnet18(net: _Net, x, *, alpha: float, classes: int):
    c = lambda ch: max(8, int(ch * alpha))  # noqa: E731
    x = net.conv(x, "conv1", c(64), 7, 2, act="relu")
    x = net.max_pool(x, 3, 2)
    for stage, ch in enumerate([64, 128, 256, 512], start=1):
        for j in range(2):
            stride = 2 if (j == 0 and stage > 1) else 1
            name, inp, in_shape = f"layer{stage}.{j}", x, list(net.shape)
            y = net.conv(x, f"{name}.conv1", c(ch), 3, stride, act="relu")
            y = net.conv(y, f"{name}.conv2", c(ch), 3, 1, act=None)
            if stride != 1 or in_shape[3] != c(ch):
                out_shape, net.shape = net.shape, in_shape
                inp = net.conv(inp, f"{name}.downsample", c(ch), 1, stride, act=None)
                net.shape = out_shape
            x = net.bb.emit(net.relax.op.add(y, inp), name_hint=f"{name}_add")
            x = net.act(x, "relu", name)
    return net.head(x, classes)


# name: (builder, defaults, (mean, std), fc_gain). fc_gain scales the random classifier so the logits of a
# random model have a std of about 2 (measured at 224: 0.13 / 0.25 / 5.8 with gain 1); otherwise MobileNet's
# softmax over 1000 classes is flat, below one int8 output step (1/256), and int8 top-1 means nothing.
# How the zoo's architectures are trained on ImageNet and evaluated (Keras / TF-slim): bilinear resize of the
# central 87.5 % (224 of 256); x = (pixel - mean) / std from the table. compile --resize/--crop/--mean/--std
# override them for weights trained otherwise (the digits: edge_sdk/evaluation/samples.py DIGITS_PREPROCESS).
TRAINING_RESIZE = ("bilinear", 0.875)
ZOO = {
    "mobilenet_v1": (_mobilenet_v1, {"alpha": 1.0, "resolution": 224}, (127.5, 127.5), 32.0),
    "mobilenet_v2": (_mobilenet_v2, {"alpha": 1.0, "resolution": 224}, (127.5, 127.5), 8.0),
    "resnet18": (_resnet18, {"alpha": 1.0, "resolution": 224}, (127.5, 127.5), 0.35),
}


def build_zoo_model(name: str, *, alpha: float | None = None, resolution: int | None = None,
                    classes: int = 1000, weights: Path | None = None, seed: int = 0) -> Model:
    """Build a zoo model in Relax with weights bound as constants."""
    if name not in ZOO:
        raise UsageError(f"unknown model '{name}': {did_you_mean(name, ZOO)} (or give a .tflite/.onnx file)")
    fn, defaults, (mean, std), fc_gain = ZOO[name]
    alpha = defaults["alpha"] if alpha is None else alpha
    res = defaults["resolution"] if resolution is None else resolution
    if alpha <= 0 or res < 32:
        raise UsageError(f"model '{name}': need alpha > 0 and resolution >= 32, got alpha={alpha} resolution={res}")
    w = _Weights(weights, seed, fc_gain=fc_gain)
    net = _Net(w, (1, res, res, 3))
    from tvm import relax

    with net.bb.function("main", [net.x_var]):
        with net.bb.dataflow():
            out = fn(net, net.x_var, alpha=alpha, classes=classes)
            gv = net.bb.emit_output(out)
        net.bb.emit_func_output(gv)
    w.check_all_used()
    mod = net.bb.get()
    mod = relax.transform.Normalize()(mod)
    src = f"zoo:{name}?alpha={alpha}&resolution={res}&classes={classes}"
    src += f"&weights={weights}" if weights else f"&seed={seed}"
    return Model(name=name, mod=mod, input_name="input", input_shape=(1, res, res, 3), input_dtype="float32",
                 preprocess=Preprocess(res, res, (mean,) * 3, (std,) * 3, "RGB", *TRAINING_RESIZE), source=src,
                 options={"alpha": alpha, "resolution": res, "classes": classes})
