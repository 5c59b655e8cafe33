"""Write the models the peer engines run in `edge-sdk bench --peers`, into $EDGE_SDK_CACHE/peers/KEY/.

Why real converters: a peer is timed the way its users run it, on files its own tools write.
Weights are seeded random (latency does not depend on weight values). KEY is
`<zoo name>_<alpha>_<resolution>` (+ `_c<classes>` when not 1000), e.g. mobilenet_v1_1.0_224; the
bench looks peers up by that key. Per KEY:

    litert_float32.tflite    TFLiteConverter from a Keras model of the zoo's layout (TF venv)
    litert_int8.tflite       the same, full-integer int8 with int8 input/output (random calibration)
    onnxruntime_float32.onnx torch.onnx.export of a torch model of the same layout, NCHW (TF venv, torch)
    onnxruntime_int8.onnx    onnxruntime.quantization.quantize_static, QDQ, per-channel (project venv)
    lce_w1a1.tflite          resnet18 only: larq binarized ResNet18 of the same layout (first conv, 1x1
                             shortcuts and the classifier in float), LCE's converter (LCE venv)

    .venv/bin/python tools/make_peer_models.py [--model mobilenet_v1:1.0:224[:1000] ...] [--force]

Each stage runs in the environment that has its converter (tools/setup_tf_env.sh, tools/setup_peers.sh);
this script re-invokes itself there with --stage. Files are written to a temp name, then renamed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("EDGE_SDK_CACHE") or Path.home() / ".cache" / "edge-sdk")
PEERS = CACHE / "peers"
DEFAULT_MODELS = ["mobilenet_v1:1.0:224", "resnet18:1.0:224"]
SEED = 7


def parse_spec(spec: str) -> dict:
    parts = spec.split(":")
    if len(parts) not in (3, 4) or parts[0] not in ("mobilenet_v1", "resnet18"):
        raise SystemExit(f"--model {spec}: expected NAME:ALPHA:RESOLUTION[:CLASSES], NAME mobilenet_v1 or resnet18")
    classes = int(parts[3]) if len(parts) == 4 else 1000
    return {"name": parts[0], "alpha": float(parts[1]), "resolution": int(parts[2]), "classes": classes}


def peer_key(name: str, alpha: float, resolution: int, classes: int) -> str:
    """Also in edge_sdk/bench/peers/__init__.py: keep the two in step."""
    return f"{name}_{float(alpha)}_{resolution}" + ("" if classes == 1000 else f"_c{classes}")


def _save(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------- stage tf (TF venv: TF + torch)
def _keras_model(spec):
    import tf_keras as keras

    L, a, r, n = keras.layers, spec["alpha"], spec["resolution"], spec["classes"]
    if spec["name"] == "mobilenet_v1":
        return keras.applications.MobileNet(input_shape=(r, r, 3), alpha=a, weights=None, classes=n, dropout=0.0)
    c = lambda ch: max(8, int(ch * a))  # noqa: E731  (the zoo's width rule)

    def cbr(x, f, k, s, relu=True):
        x = L.Conv2D(f, k, strides=s, padding="same", use_bias=False)(x)
        x = L.BatchNormalization(epsilon=1e-3)(x)
        return L.ReLU()(x) if relu else x

    inp = keras.Input((r, r, 3))
    x = L.MaxPooling2D(3, 2, padding="same")(cbr(inp, c(64), 7, 2))
    for stage, ch in enumerate([64, 128, 256, 512], start=1):
        for j in range(2):
            s = 2 if (j == 0 and stage > 1) else 1
            y = cbr(cbr(x, c(ch), 3, s), c(ch), 3, 1, relu=False)
            short = cbr(x, c(ch), 1, s, relu=False) if (s != 1 or x.shape[-1] != c(ch)) else x
            x = L.ReLU()(L.Add()([y, short]))
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(n, activation="softmax")(x))


def _torch_model(spec):
    import torch.nn as nn

    a, n = spec["alpha"], spec["classes"]

    def cbr(cin, cout, k, s, groups=1, relu=nn.ReLU6):
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout, eps=1e-3),
                *([relu()] if relu else [])]

    if spec["name"] == "mobilenet_v1":
        c = lambda ch: int(ch * a)  # noqa: E731  (Keras MobileNet's width rule)
        cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
        layers, cin = cbr(3, c(32), 3, 2), c(32)
        for cout, s in cfg:
            layers += cbr(cin, cin, 3, s, groups=cin) + cbr(cin, c(cout), 1, 1)
            cin = c(cout)
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, n), nn.Softmax(-1))

    c = lambda ch: max(8, int(ch * a))  # noqa: E731

    class Block(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.body = nn.Sequential(*cbr(cin, cout, 3, s, relu=nn.ReLU), *cbr(cout, cout, 3, 1, relu=None))
            self.short = nn.Sequential(*cbr(cin, cout, 1, s, relu=None)) if (s != 1 or cin != cout) else nn.Identity()
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + self.short(x))

    layers, cin = [*cbr(3, c(64), 7, 2, relu=nn.ReLU), nn.MaxPool2d(3, 2, 1)], c(64)
    for stage, ch in enumerate([64, 128, 256, 512], start=1):
        for j in range(2):
            layers.append(Block(cin, c(ch), 2 if (j == 0 and stage > 1) else 1))
            cin = c(ch)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, n), nn.Softmax(-1))


def stage_tf(spec, out: Path) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import numpy as np
    import tensorflow as tf
    import torch

    tf.keras.utils.set_random_seed(SEED)
    r = spec["resolution"]
    model = _keras_model(spec)
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    _save(out / "litert_float32.tflite", conv.convert())
    rng = np.random.default_rng(SEED)

    def rep():
        for _ in range(8):
            yield [rng.uniform(-1, 1, (1, r, r, 3)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    _save(out / "litert_int8.tflite", conv.convert())

    torch.manual_seed(SEED)
    tm = _torch_model(spec).eval()
    tmp = out / "onnxruntime_float32.onnx.tmp"
    torch.onnx.export(tm, torch.randn(1, 3, r, r), str(tmp), input_names=["input"], output_names=["scores"],
                      opset_version=17, dynamo=False)
    os.replace(tmp, out / "onnxruntime_float32.onnx")


# ---------------------------------------------------------------- stage ort (project venv)
def stage_ort(spec, out: Path) -> None:
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    r = spec["resolution"]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(SEED)
            self.batches = iter([{"input": rng.uniform(-1, 1, (1, 3, r, r)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    tmp = out / "onnxruntime_int8.tmp.onnx"
    quantize_static(str(out / "onnxruntime_float32.onnx"), str(tmp), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    os.replace(tmp, out / "onnxruntime_int8.onnx")


# ---------------------------------------------------------------- stage lce (LCE venv)
def stage_lce(spec, out: Path) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import larq as lq
    import larq_compute_engine as lce
    import tensorflow as tf

    tf.keras.utils.set_random_seed(SEED)
    L, a, r = tf.keras.layers, spec["alpha"], spec["resolution"]
    c = lambda ch: max(8, int(ch * a))  # noqa: E731
    q = {"input_quantizer": "ste_sign", "kernel_quantizer": "ste_sign", "kernel_constraint": "weight_clip",
         "use_bias": False, "padding": "same"}
    inp = tf.keras.Input((r, r, 3))
    x = L.Conv2D(c(64), 7, strides=2, padding="same", use_bias=False)(inp)  # first layer in float
    x = L.MaxPooling2D(3, 2, padding="same")(L.ReLU()(L.BatchNormalization()(x)))
    for stage, ch in enumerate([64, 128, 256, 512], start=1):
        for j in range(2):
            s = 2 if (j == 0 and stage > 1) else 1
            y = L.BatchNormalization()(lq.layers.QuantConv2D(c(ch), 3, strides=s, **q)(x))
            y = L.BatchNormalization()(lq.layers.QuantConv2D(c(ch), 3, strides=1, **q)(y))
            if s != 1 or x.shape[-1] != c(ch):  # float 1x1 shortcut, as in Bi-Real Net / QuickNet
                x = L.BatchNormalization()(L.Conv2D(c(ch), 1, strides=s, use_bias=False)(x))
            x = L.Add()([y, x])
    x = L.GlobalAveragePooling2D()(L.ReLU()(x))
    model = tf.keras.Model(inp, L.Dense(spec["classes"], activation="softmax")(x))
    _save(out / "lce_w1a1.tflite", lce.convert_keras_model(model))


# ---------------------------------------------------------------- driver
def _python(name: str) -> str:
    py = CACHE / name / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"{py} missing: run tools/setup_tf_env.sh and tools/setup_peers.sh first")
    return str(py)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="NAME:ALPHA:RESOLUTION[:CLASSES] (default: "
                    + ", ".join(DEFAULT_MODELS) + ")")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    ap.add_argument("--stage", choices=("tf", "ort", "lce"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage:
        spec = parse_spec(args.model[0])
        {"tf": stage_tf, "ort": stage_ort, "lce": stage_lce}[args.stage](spec, args.out)
        return 0
    here = str(Path(__file__).resolve())
    for spec_s in args.model or DEFAULT_MODELS:
        spec = parse_spec(spec_s)
        out = PEERS / peer_key(**spec)
        out.mkdir(parents=True, exist_ok=True)
        stages = [("tf", _python("venv-tf"), "onnxruntime_float32.onnx"), ("ort", sys.executable, "onnxruntime_int8.onnx")]
        if spec["name"] == "resnet18":
            stages.append(("lce", _python("venv-lce"), "lce_w1a1.tflite"))
        for stage, py, last in stages:
            if (out / last).exists() and not args.force:
                continue
            print(f"make_peer_models: {out.name}: stage {stage} ({py})", flush=True)
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
            subprocess.run([py, here, "--stage", stage, "--model", spec_s, "--out", str(out)], check=True, env=env)
        files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if not p.name.endswith((".tmp", ".json"))}
        _save(out / "manifest.json", json.dumps({"spec": spec, "seed": SEED, "files": files}, indent=2).encode())
        print(f"make_peer_models: {out}: {', '.join(files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
