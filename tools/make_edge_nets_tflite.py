"""Write converter-made float32 and full-int8 .tflite files of today's edge classifiers (issue 14).

MobileNetV3-Small/-Large and EfficientNet-B0 come from keras.applications (reduced width, small input);
DenseNet121, SqueezeNet 1.1, ShuffleNetV2 and MnasNet (B1, torchvision's) are built here in Keras with
the torchvision structure at reduced widths (keras.applications has no SqueezeNet/ShuffleNet/MnasNet,
and its DenseNet has a fixed growth rate of 32: 30 MB). Weights are seeded random, randomized as
tools/make_test_models.py does (BN statistics around the real ones, head scaled to logits of std ~2).

Runs in the TensorFlow venv made by tools/setup_tf_env.sh, never in CI:

    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_edge_nets_tflite.py [--only NAME ...]

Writes tests/data/edge_nets/NAME_float.tflite and NAME_int8.tflite (int8 input and output) and merges
their shapes, quantization and op lists into tests/data/edge_nets/manifest.json.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_test_models as base  # noqa: E402  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

keras, tf, np = base.keras, base.tf, base.np
L = keras.layers
SEED = 20241414
OUT = base.REPO / "tests" / "data" / "edge_nets"
SIZE = 64
CLASSES = 10


def _bn(x, name):
    return L.BatchNormalization(epsilon=1e-3, name=f"{name}.bn")(x)


def _cbr(x, filters, k, s, name, *, act="relu", groups=1):
    x = L.Conv2D(filters, k, strides=s, padding="same", use_bias=False, groups=groups, name=name)(x)
    x = _bn(x, name)
    return L.Activation(act, name=f"{name}.act")(x) if act else x


def _dw(x, k, s, name, *, act="relu"):
    x = L.DepthwiseConv2D(k, strides=s, padding="same", use_bias=False, name=name)(x)
    x = _bn(x, name)
    return L.Activation(act, name=f"{name}.act")(x) if act else x


def _head(x):
    x = L.GlobalAveragePooling2D(name="avgpool")(x)
    return L.Dense(CLASSES, activation="softmax", name="fc")(x)


def mobilenet_v3(small: bool, alpha: float) -> keras.Model:
    """keras.applications MobileNetV3 without its fixed 1024/1280-wide top (it alone would be 0.6-1.2 MB),
    then the same head shape narrower: pool, 1x1 conv 64 + hard-swish, dense + softmax."""
    ctor = keras.applications.MobileNetV3Small if small else keras.applications.MobileNetV3Large
    body = ctor(input_shape=(SIZE, SIZE, 3), alpha=alpha, include_top=False, weights=None,
                include_preprocessing=False, minimalistic=False)
    x = L.GlobalAveragePooling2D(keepdims=True, name="avgpool")(body.output)
    x = L.Conv2D(64, 1, name="head_conv")(x)
    x = L.Multiply(name="head_hswish")([x, L.ReLU(6.0)(x + 3.0) * (1.0 / 6.0)])
    x = L.Flatten(name="flatten")(x)
    out = L.Dense(CLASSES, activation="softmax", name="fc")(x)
    return keras.Model(body.input, out, name="mobilenet_v3_small" if small else "mobilenet_v3_large")


def efficientnet_b0(width: float) -> keras.Model:
    """keras.applications' EfficientNet-B0 (its block list, swish, squeeze-excite, its input Rescaling and
    Normalization) at width coefficient `width` instead of 1.0."""
    from tf_keras.src.applications import efficientnet  # its width-parametric builder is not exported

    return efficientnet.EfficientNet(width, 1.0, SIZE, dropout_rate=0.0, drop_connect_rate=0.0,
                                     model_name="efficientnet_b0", include_top=True, weights=None,
                                     input_shape=(SIZE, SIZE, 3), classes=CLASSES)


def densenet121(growth: int) -> keras.Model:
    """torchvision/Keras DenseNet121 (blocks 6-12-24-16, bottleneck 4k, compression 0.5), growth k."""
    inp = keras.Input((SIZE, SIZE, 3), name="input")
    x = _cbr(inp, 2 * growth, 7, 2, "conv0")
    x = L.MaxPool2D(3, 2, padding="same", name="pool0")(x)
    for b, n in enumerate((6, 12, 24, 16)):
        for i in range(n):
            p = f"block{b}.{i}"
            y = L.Activation("relu")(_bn(x, f"{p}.pre1"))
            y = L.Conv2D(4 * growth, 1, use_bias=False, name=f"{p}.conv1")(y)
            y = L.Activation("relu")(_bn(y, f"{p}.pre2"))
            y = L.Conv2D(growth, 3, padding="same", use_bias=False, name=f"{p}.conv2")(y)
            x = L.Concatenate(name=f"{p}.cat")([x, y])
        if b < 3:
            x = L.Activation("relu")(_bn(x, f"trans{b}"))
            x = L.Conv2D(x.shape[-1] // 2, 1, use_bias=False, name=f"trans{b}.conv")(x)
            x = L.AveragePooling2D(2, 2, name=f"trans{b}.pool")(x)
    x = L.Activation("relu")(_bn(x, "final"))
    out = _head(x)
    return keras.Model(inp, out, name="densenet121")


def squeezenet1_1(width: float) -> keras.Model:
    """torchvision SqueezeNet 1.1: conv 3x3/2, max pools 3x3/2, eight fire modules (squeeze 1x1, expand
    1x1 | 3x3 concatenated), dropout-free classifier conv 1x1 + ReLU, global pool, softmax."""
    def fire(x, s, e, name):
        s, e = max(4, int(s * width)), max(4, int(e * width))
        x = L.Conv2D(s, 1, activation="relu", name=f"{name}.squeeze")(x)
        a = L.Conv2D(e, 1, activation="relu", name=f"{name}.e1")(x)
        b = L.Conv2D(e, 3, padding="same", activation="relu", name=f"{name}.e3")(x)
        return L.Concatenate(name=f"{name}.cat")([a, b])

    inp = keras.Input((SIZE, SIZE, 3), name="input")
    x = L.Conv2D(int(64 * width), 3, strides=2, activation="relu", name="conv1")(inp)
    x = L.MaxPool2D(3, 2, name="pool1")(x)
    x = fire(fire(x, 16, 64, "fire2"), 16, 64, "fire3")
    x = L.MaxPool2D(3, 2, name="pool3")(x)
    x = fire(fire(x, 32, 128, "fire4"), 32, 128, "fire5")
    x = L.MaxPool2D(3, 2, name="pool5")(x)
    for i, (s, e) in enumerate(((48, 192), (48, 192), (64, 256), (64, 256))):
        x = fire(x, s, e, f"fire{6 + i}")
    x = L.Conv2D(CLASSES, 1, activation="relu", name="classifier")(x)
    x = L.GlobalAveragePooling2D(name="avgpool")(x)
    out = L.Softmax(name="softmax")(x)
    return keras.Model(inp, out, name="squeezenet1_1")


def _shuffle(x, groups: int = 2):
    h, w, c = x.shape[1:]
    x = L.Reshape((h, w, groups, c // groups))(x)
    x = L.Permute((1, 2, 4, 3))(x)
    return L.Reshape((h, w, c))(x)


def shufflenet_v2(widths=(16, 32, 64), repeats=(4, 8, 4), last: int = 128) -> keras.Model:
    """torchvision ShuffleNetV2 (x0.5 is 48-96-192): conv 3x3/2 + max pool, stages of one stride-2 unit
    (two branches, concatenated) and units that split the channels in two (tf.split), run one half
    through 1x1 / dw 3x3 / 1x1, concatenate and shuffle the channels (reshape, transpose, reshape)."""
    inp = keras.Input((SIZE, SIZE, 3), name="input")
    x = _cbr(inp, 8, 3, 2, "conv1")
    x = L.MaxPool2D(3, 2, padding="same", name="maxpool")(x)
    for s, (c, n) in enumerate(zip(widths, repeats)):
        for i in range(n):
            p, half = f"stage{s + 2}.{i}", c // 2
            if i == 0:
                a = _cbr(_dw(x, 3, 2, f"{p}.b1dw", act=None), half, 1, 1, f"{p}.b1pw")
                b = _cbr(x, half, 1, 1, f"{p}.b2pw1")
            else:
                a, b = L.Lambda(lambda t: tf.split(t, 2, axis=-1), name=f"{p}.split")(x)
            b = _dw(b, 3, 2 if i == 0 else 1, f"{p}.b2dw", act=None)
            b = _cbr(b, half, 1, 1, f"{p}.b2pw2")
            x = _shuffle(L.Concatenate(name=f"{p}.cat")([a, b]))
    x = _cbr(x, last, 1, 1, "conv5")
    out = _head(x)
    return keras.Model(inp, out, name="shufflenet_v2")


def mnasnet(alpha: float) -> keras.Model:
    """torchvision MnasNet (B1): stem conv 3x3/2, separable dw 3x3 + 1x1, inverted residual stacks with
    kernels 3-5-5-3-5-3 (5x5 depthwise, stride 2 among them), expansions 3-3-6-6-6-6, conv 1x1 1280."""
    def ch(c):
        return max(8, int(c * alpha + 4) // 8 * 8)

    inp = keras.Input((SIZE, SIZE, 3), name="input")
    x = _cbr(inp, ch(32), 3, 2, "stem")
    x = _dw(x, 3, 1, "sep.dw")
    x = _cbr(x, ch(16), 1, 1, "sep.pw", act=None)
    stacks = ((3, 3, 2, 24, 3), (5, 3, 2, 40, 3), (5, 6, 2, 80, 3), (3, 6, 1, 96, 2), (5, 6, 2, 192, 4),
              (3, 6, 1, 320, 1))
    for s, (k, e, stride, c, n) in enumerate(stacks):
        for i in range(n):
            p = f"layer{s}.{i}"
            y = _cbr(x, x.shape[-1] * e, 1, 1, f"{p}.expand")
            y = _dw(y, k, stride if i == 0 else 1, f"{p}.dw")
            y = _cbr(y, ch(c), 1, 1, f"{p}.project", act=None)
            x = L.Add(name=f"{p}.add")([x, y]) if i > 0 else y
    x = _cbr(x, 128, 1, 1, "conv_last")
    out = _head(x)
    return keras.Model(inp, out, name="mnasnet")


FAMILIES = {
    "mobilenet_v3_small_0.15_64": lambda: mobilenet_v3(True, 0.15),
    "mobilenet_v3_large_0.1_64": lambda: mobilenet_v3(False, 0.1),
    "efficientnet_b0_0.1_64": lambda: efficientnet_b0(0.1),
    "densenet121_k4_64": lambda: densenet121(4),
    "squeezenet1_1_0.25_64": lambda: squeezenet1_1(0.25),
    "shufflenet_v2_w16_64": lambda: shufflenet_v2(),
    "mnasnet_0.1_64": lambda: mnasnet(0.1),
}


def randomize(model: keras.Model, rng, calib) -> None:
    """base.randomize's BN statistics; the head (the last layer with weights, a Dense or SqueezeNet's
    1x1 conv + ReLU + pool, both positively homogeneous) scaled so the pre-softmax logits have std ~2."""
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            feat = base._submodel_output(model, layer.input, calib)
            axes = tuple(range(feat.ndim - 1))
            mean, var = feat.mean(axes), feat.var(axes) + 1e-4
            c = mean.shape[0]
            gamma = rng.uniform(0.5, 1.5, c)
            layer.set_weights([gamma.astype(np.float32), (gamma * rng.normal(1.5, 0.5, c)).astype(np.float32),
                               (mean + rng.normal(0.0, 0.2, c) * np.sqrt(var)).astype(np.float32),
                               (var * rng.uniform(0.6, 1.6, c)).astype(np.float32)])
    head = [layer for layer in model.layers if layer.get_weights()][-1]
    kernel, bias = head.get_weights()
    head.set_weights([kernel, np.zeros_like(bias)])
    last = model.layers[-1]
    if isinstance(last, L.Dense):
        feat = base._submodel_output(model, last.input, calib)
        logits = feat.reshape(feat.shape[0], -1) @ kernel.reshape(-1, kernel.shape[-1])
    else:
        logits = base._submodel_output(model, last.input, calib)
    scale = 2.0 / max(float(logits.std()), 1e-6)
    head.set_weights([(kernel * scale).astype(np.float32), rng.normal(0.0, 0.1, bias.shape).astype(np.float32)])
    for layer in model.layers:  # float16-exact values, as tests/data's models
        layer.set_weights([w.astype(np.float16).astype(np.float32) for w in layer.get_weights()])


def make_family(name: str, model: keras.Model, *, seed: int, n_rep: int = 32) -> dict:
    rng = np.random.default_rng(seed)
    shape = tuple(model.input_shape[1:])
    randomize(model, rng, rng.uniform(-1.0, 1.0, (8, *shape)).astype(np.float32))
    rep = rng.uniform(-1.0, 1.0, (n_rep, *shape)).astype(np.float32)
    info = {}
    for mode in ("float", "int8"):
        fname = f"{name}_{mode}.tflite"
        data = base.convert(model, mode=mode, rep=rep)
        base._write(OUT / fname, data)
        info[fname] = base.describe(data)
        print(f"  wrote {OUT / fname} ({len(data) / 1024:.0f} KiB): {' '.join(info[fname]['ops'])}", flush=True)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], help="model name(s) to make (repeatable)")
    ap.add_argument("--summary", action="store_true", help="print parameter counts only; write nothing")
    args = ap.parse_args(argv)
    for name in args.only:
        if name not in FAMILIES:
            ap.error(f"--only {name}: unknown model; known: {', '.join(FAMILIES)}")
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"tensorflow {tf.__version__}, numpy {np.__version__}, seed {SEED}", flush=True)
    for i, (name, build) in enumerate(FAMILIES.items()):
        if args.only and name not in args.only:
            continue
        keras.utils.set_random_seed(SEED + i)
        model = build()
        print(f"{name}: {model.count_params()} parameters, {len(model.layers)} layers", flush=True)
        if not args.summary:
            _merge_manifest(make_family(name, model, seed=SEED + i))
    return 0


def _merge_manifest(info: dict) -> None:
    import json

    path = OUT / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    manifest.setdefault("files", {}).update(info)
    manifest["made_with"] = {"tensorflow": tf.__version__, "numpy": np.__version__, "seed": SEED,
                             "command": "tools/make_edge_nets_tflite.py"}
    base._write(path, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
