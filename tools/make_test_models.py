"""Write real, converter-made test models: the small ones in tests/data/, the benchmark ones in the cache.

Why: the TFLite importer and the int8 path must be tested on files the TFLite converter really
writes (its SAME padding, fused activations, per-channel scales, QUANTIZE/DEQUANTIZE ends), not on
hand-made flatbuffers. Weights are seeded random (latency and import do not depend on them); every
BatchNormalization gets statistics drawn around the real batch statistics of its input so that BN is
far from an identity yet activations keep a sane range for int8 calibration.

Runs in the TensorFlow venv made by tools/setup_tf_env.sh (TF 2.16.1, numpy<2), never in CI:

    bash tools/setup_tf_env.sh
    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_test_models.py            # tests/data/
    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_test_models.py --full     # + $EDGE_SDK_CACHE/models/

Per float model NAME it writes NAME_float.tflite, NAME_float.npz (weights in the zoo's naming),
NAME_int8.tflite (int8 input/output) and NAME_int8_float_io.tflite (float input/output, with
QUANTIZE/DEQUANTIZE at the ends). Plus small_cnn.onnx from torch.onnx.export.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # TFLiteConverter.from_keras_model needs Keras 2
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

SEED = 20240611
REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "tests" / "data"
CACHE = Path(os.environ.get("EDGE_SDK_CACHE", Path.home() / ".cache" / "edge-sdk"))
L = keras.layers


# ---------------------------------------------------------------- model builders


def mobilenet_v1(*, alpha: float, size: int, classes: int) -> keras.Model:
    return keras.applications.MobileNet(input_shape=(size, size, 3), alpha=alpha, weights=None,
                                        classes=classes, dropout=0.0)


def mobilenet_v2(*, alpha: float, size: int, classes: int) -> keras.Model:
    return keras.applications.MobileNetV2(input_shape=(size, size, 3), alpha=alpha, weights=None,
                                          classes=classes)


def _conv_bn(x, filters: int, kernel: int, stride: int, name: str, *, relu: bool = True):
    x = L.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False, name=name)(x)
    x = L.BatchNormalization(epsilon=1e-3, name=f"{name}.bn")(x)
    return L.ReLU(name=f"{name}.relu")(x) if relu else x


def resnet18(*, size: int, classes: int, width: int = 64) -> keras.Model:
    """torchvision-shaped ResNet18 in Keras (SAME padding, so 7x7/2 and 3x3/2 pad like TF)."""
    inp = keras.Input((size, size, 3), name="input")
    x = _conv_bn(inp, width, 7, 2, "conv1")
    x = L.MaxPool2D(3, 2, padding="same", name="maxpool")(x)
    for stage in range(1, 5):
        filters = width * 2 ** (stage - 1)
        for block in range(2):
            stride = 2 if (stage > 1 and block == 0) else 1
            p = f"layer{stage}.{block}"
            y = _conv_bn(x, filters, 3, stride, f"{p}.conv1")
            y = _conv_bn(y, filters, 3, 1, f"{p}.conv2", relu=False)
            if stride != 1 or x.shape[-1] != filters:
                x = _conv_bn(x, filters, 1, stride, f"{p}.downsample", relu=False)
            x = L.ReLU(name=f"{p}.relu")(L.Add(name=f"{p}.add")([x, y]))
    x = L.GlobalAveragePooling2D(name="avgpool")(x)
    out = L.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(inp, out, name=f"resnet18_w{width}")


def awkward(*, classes: int = 10) -> keras.Model:
    """Small model of the cases importers get wrong.

    37x30 input: odd height, even width, so the stride-2 SAME conv pads W asymmetrically (0 left,
    1 right) where PyTorch-style symmetric padding would differ; depthwise with multiplier 2;
    residual add; 2x2 VALID average pool that drops the last row and column; flatten + dense.
    Converted without a fixed batch, so its tensors' shape_signature has batch -1.
    """
    inp = keras.Input((37, 30, 3), name="input")
    x = _conv_bn(inp, 8, 3, 2, "conv1")                                     # 19x15x8
    x = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=False, name="dw1")(x)
    x = L.ReLU(6.0, name="dw1.relu")(L.BatchNormalization(epsilon=1e-3, name="dw1.bn")(x))
    y = _conv_bn(x, 16, 1, 1, "pw1", relu=False)                            # 19x15x16
    x = L.ReLU(name="add1.relu")(L.Add(name="add1")([x, y]))
    x = L.AveragePooling2D(2, 2, padding="valid", name="pool")(x)           # 9x7x16
    x = L.Flatten(name="flatten")(x)
    out = L.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(inp, out, name="awkward")


# ---------------------------------------------------------------- weights


def _submodel_output(model: keras.Model, tensor, x: np.ndarray) -> np.ndarray:
    return keras.Model(model.inputs, tensor)(x, training=False).numpy()


def randomize(model: keras.Model, *, rng: np.random.Generator, calib: np.ndarray) -> None:
    """Seeded non-identity BN statistics and a head scaled to logits of std ~2 (a non-flat softmax)."""
    for layer in model.layers:
        if not isinstance(layer, L.BatchNormalization):
            continue
        feat = _submodel_output(model, layer.input, calib)
        axes = tuple(range(feat.ndim - 1))
        mean, var = feat.mean(axes), feat.var(axes) + 1e-4
        c = mean.shape[0]
        gamma = rng.uniform(0.5, 1.5, c)
        # beta ~ gamma * N(1.5, 0.5): ReLU clips ~7% and ReLU6 a little. A zero-mean beta makes a
        # random net chaotic (1-LSB kernel differences grew to 100+ LSB at the output).
        layer.set_weights([
            gamma.astype(np.float32),
            (gamma * rng.normal(1.5, 0.5, c)).astype(np.float32),            # beta
            (mean + rng.normal(0.0, 0.2, c) * np.sqrt(var)).astype(np.float32),  # moving mean
            (var * rng.uniform(0.6, 1.6, c)).astype(np.float32),             # moving variance
        ])
    head = model.layers[-1] if isinstance(model.layers[-1], L.Dense) else model.get_layer("conv_preds")
    kernel, bias = head.get_weights()
    feat = _submodel_output(model, head.input, calib).reshape(calib.shape[0], -1)
    logits = feat @ kernel.reshape(feat.shape[1], -1)
    kernel = kernel * (2.0 / max(float(logits.std()), 1e-6))
    head.set_weights([kernel.astype(np.float32), rng.normal(0.0, 0.1, bias.shape).astype(np.float32)])
    for layer in model.layers:  # float16-exact values: the .npz stores them as float16, losslessly
        layer.set_weights([w.astype(np.float16).astype(np.float32) for w in layer.get_weights()])


_KERAS_TO_ZOO = [  # (regex on the Keras layer name, zoo layer name), first match wins
    (r"conv1_bn", "conv1.bn"), (r"conv_dw_(\d+)_bn", r"dw\1.bn"), (r"conv_pw_(\d+)_bn", r"pw\1.bn"),
    (r"conv_dw_(\d+)", r"dw\1"), (r"conv_pw_(\d+)", r"pw\1"), (r"conv_preds", "fc"),
    (r"bn_Conv1", "conv1.bn"), (r"Conv1", "conv1"), (r"Conv_1_bn", "conv_last.bn"),
    (r"Conv_1", "conv_last"), (r"predictions", "fc"),
    (r"expanded_conv_depthwise_BN", "block0.dw.bn"), (r"expanded_conv_depthwise", "block0.dw"),
    (r"expanded_conv_project_BN", "block0.project.bn"), (r"expanded_conv_project", "block0.project"),
    (r"block_(\d+)_(expand|project)_BN", r"block\1.\2.bn"), (r"block_(\d+)_depthwise_BN", r"block\1.dw.bn"),
    (r"block_(\d+)_(expand|project)", r"block\1.\2"), (r"block_(\d+)_depthwise", r"block\1.dw"),
    (r"(.+)", r"\1"),  # our own builders already use zoo names ("layer1.0.conv1", "conv1.bn")
]


def zoo_name(keras_name: str) -> str:
    for pattern, repl in _KERAS_TO_ZOO:
        if re.fullmatch(pattern, keras_name):
            return re.sub(f"^{pattern}$", repl, keras_name)
    raise AssertionError(keras_name)


def zoo_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """Keras weights under the zoo's names: conv HWIO, depthwise (kh,kw,cin,mult), dense (in,out).

    Stored as float16 to halve tests/data: randomize() rounded every weight to a float16 value, so
    .astype(float32) gives back exactly the float32 weights the converter saw."""
    out: dict[str, np.ndarray] = {}
    for layer in model.layers:
        w = layer.get_weights()
        if not w:
            continue
        name = zoo_name(layer.name)
        if isinstance(layer, L.BatchNormalization):  # tf_keras order: gamma, beta, mean, var
            for key, arr in zip(("gamma", "beta", "mean", "var"), w):
                out[f"{name}.{key}"] = arr
            continue
        kernel = w[0]
        if name == "fc":
            kernel = kernel.reshape(-1, kernel.shape[-1])  # conv_preds is a 1x1 conv
        out[f"{name}.weight"] = kernel
        if len(w) > 1:
            out[f"{name}.bias"] = w[1]
    out = {k: np.ascontiguousarray(v, dtype=np.float16) for k, v in out.items()}
    assert all(np.all(np.isfinite(v)) for v in out.values())  # randomize() made them fp16-exact
    return out


# ---------------------------------------------------------------- conversion and writing


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def convert(model: keras.Model, *, mode: str, rep: np.ndarray | None = None,
            batch1: bool = True) -> bytes:
    """batch1: trace with a fixed batch of 1, as deployed .tflite files are. Without it the tensors'
    shape_signature keeps batch -1 (the awkward model keeps that on purpose), and Keras MobileNet's
    Reshape becomes SHAPE/STRIDED_SLICE/PACK feeding a RESHAPE instead of one constant RESHAPE."""
    if batch1:
        spec = tf.TensorSpec((1, *model.input_shape[1:]), tf.float32)
        fn = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
        conv = tf.lite.TFLiteConverter.from_concrete_functions([fn], model)
    else:
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
    if mode != "float":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: ([rep[i:i + 1]] for i in range(rep.shape[0]))
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if mode == "int8":
            conv.inference_input_type = tf.int8
            conv.inference_output_type = tf.int8
    return conv.convert()


def describe(data: bytes) -> dict:
    interp = tf.lite.Interpreter(model_content=data)
    ops = sorted({d["op_name"] for d in interp._get_ops_details()})
    def io(details):
        return [{"shape": [int(s) for s in d["shape"]], "dtype": np.dtype(d["dtype"]).name,
                 "quantization": [float(d["quantization"][0]), int(d["quantization"][1])]}
                for d in details]
    return {"inputs": io(interp.get_input_details()), "outputs": io(interp.get_output_details()),
            "ops": ops, "bytes": len(data)}


def make_family(name: str, model: keras.Model, *, out_dir: Path, seed: int, n_rep: int,
                modes: tuple[str, ...], batch1: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    shape = tuple(model.input_shape[1:])
    # BN statistics come from a small batch (it runs one sub-model per BN layer: quadratic cost)
    calib = rng.uniform(-1.0, 1.0, (8 if shape[0] < 128 else 2, *shape)).astype(np.float32)
    randomize(model, rng=rng, calib=calib)
    rep = rng.uniform(-1.0, 1.0, (n_rep, *shape)).astype(np.float32)
    info = {}
    for mode in modes:
        fname = f"{name}_{mode}.tflite"
        data = convert(model, mode=mode, rep=rep, batch1=batch1)
        _write(out_dir / fname, data)
        info[fname] = describe(data)
        print(f"  wrote {out_dir / fname} ({len(data) / 1024:.0f} KiB)", flush=True)
        if mode == "float":
            npz = out_dir / f"{name}_float.npz"
            tmp = npz.with_name(npz.name + ".tmp.npz")
            np.savez(tmp, **zoo_weights(model))
            os.replace(tmp, npz)
    return info


def make_onnx(path: Path, *, seed: int) -> dict:
    """A small NCHW ResNet-like CNN exported by torch.onnx.export (BN kept as its own node)."""
    import torch
    from torch import nn
    torch.manual_seed(seed)

    def cbn(cin, cout, k, s):
        return [nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(*cbn(8, 16, 3, 2), nn.ReLU(), *cbn(16, 16, 3, 1))
            self.down = nn.Sequential(*cbn(8, 16, 1, 2))

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    net = nn.Sequential(*cbn(3, 8, 3, 2), nn.ReLU(), Block(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(16, 10), nn.Softmax(dim=1))
    g = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = torch.rand(c, generator=g) + 0.5
            m.bias.data = torch.randn(c, generator=g) * 0.25
            m.running_mean = torch.randn(c, generator=g) * 0.2
            m.running_var = torch.rand(c, generator=g) + 0.5
    net.eval()
    x = torch.rand(1, 3, 32, 32, generator=g) * 2 - 1
    tmp = path.with_name(path.name + ".tmp")
    torch.onnx.export(net, (x,), str(tmp), input_names=["input"], output_names=["probs"],
                      opset_version=17, dynamo=False, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)
    os.replace(tmp, path)
    import onnx
    m = onnx.load(str(path))
    print(f"  wrote {path} ({path.stat().st_size / 1024:.0f} KiB)", flush=True)
    return {"ops": sorted({n.op_type for n in m.graph.node}), "bytes": path.stat().st_size,
            "inputs": [{"shape": [1, 3, 32, 32], "dtype": "float32"}],
            "outputs": [{"shape": [1, 10], "dtype": "float32"}], "opset": m.opset_import[0].version}


INT8_MODES = ("int8", "int8_float_io")  # int8 in/out; float in/out with QUANTIZE/DEQUANTIZE ends
SMALL = {  # name -> (builder, int8 modes); committed under tests/data/, ~4 MB in all
    "mobilenet_v1_0.25_64": (lambda: mobilenet_v1(alpha=0.25, size=64, classes=10), ("int8",)),
    # alpha 0.1, not 0.35: MobileNetV2 0.35 alone would be 3.7 MB (its 1280-wide last conv stays)
    "mobilenet_v2_0.1_64": (lambda: mobilenet_v2(alpha=0.1, size=64, classes=10), INT8_MODES),
    "resnet18_w8_64": (lambda: resnet18(size=64, classes=10, width=8), ("int8",)),  # zoo alpha 0.125
    "awkward_37x30": (lambda: awkward(classes=10), INT8_MODES),
}
FULL = {  # benchmark models, never committed
    "mobilenet_v1_1.0_224": (lambda: mobilenet_v1(alpha=1.0, size=224, classes=1000), INT8_MODES),
    "mobilenet_v2_1.0_224": (lambda: mobilenet_v2(alpha=1.0, size=224, classes=1000), INT8_MODES),
    "resnet18_224": (lambda: resnet18(size=224, classes=1000, width=64), INT8_MODES),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="also write the full-size benchmark models")
    ap.add_argument("--only", action="append", default=[], help="model name(s) to make (repeatable)")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    jobs = [(n, b, m, DATA_DIR, 32) for n, (b, m) in SMALL.items()]
    if args.full or set(args.only) & set(FULL):
        jobs += [(n, b, m, CACHE / "models", 16) for n, (b, m) in FULL.items()]
    known = set(SMALL) | set(FULL) | {"small_cnn"}
    for name in args.only:
        if name not in known:
            ap.error(f"--only {name}: unknown model; known: {', '.join(sorted(known))}")
    print(f"tensorflow {tf.__version__}, numpy {np.__version__}, seed {args.seed}", flush=True)
    for i, (name, build, int8_modes, out_dir, n_rep) in enumerate(jobs):
        if args.only and name not in args.only:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        keras.utils.set_random_seed(args.seed + i)
        print(f"{name}:", flush=True)
        info = make_family(name, build(), out_dir=out_dir, seed=args.seed + i, n_rep=n_rep,
                           modes=("float", *int8_modes), batch1=not name.startswith("awkward"))
        _merge_manifest(out_dir, info)
    if not args.only or "small_cnn" in args.only:
        _merge_manifest(DATA_DIR, {"small_cnn.onnx": make_onnx(DATA_DIR / "small_cnn.onnx",
                                                               seed=args.seed)})
    return 0


def _merge_manifest(out_dir: Path, info: dict) -> None:
    """manifest.json: per file shapes, dtypes, quantization, ops and the tool versions that made it."""
    path = out_dir / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    files = manifest.setdefault("files", {})
    files.update(info)
    for stale in [f for f in files if not (out_dir / f).exists()]:
        del files[stale]
    manifest["made_with"] = {"tensorflow": tf.__version__, "numpy": np.__version__,
                             "command": "tools/make_test_models.py"}
    _write(path, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


if __name__ == "__main__":
    sys.exit(main())
