"""Write tiny converter-made full-int8 .tflite files, one op (or a short chain) each, to tests/data/int8_ops/.

Why: edge_sdk/quant/int8.py claims to compute exactly what TFLite's reference kernels compute; that
claim is only worth something if it is checked op by op on files the real TFLite converter writes
(its scales, zero points, fused activations, per-channel weights). Each file is a few KB.

Runs in the TensorFlow venv made by tools/setup_tf_env.sh, never in CI:

    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_int8_op_models.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

SEED = 4004
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "int8_ops"
L = keras.layers


def _seq(shape, *layers, name):
    inp = keras.Input(shape, name="input")
    x = inp
    for layer in layers:
        x = layer(x)
    return keras.Model(inp, x, name=name)


def op_models() -> dict[str, keras.Model]:
    """name -> small Keras model; together they cover every op the int8 lowering supports."""
    m = {
        "conv_relu6_s2_same": _seq((11, 10, 3), L.Conv2D(8, 3, strides=2, padding="same"), L.ReLU(6.0), name="c"),
        "conv_valid_relu": _seq((9, 9, 4), L.Conv2D(6, 3, padding="valid", activation="relu"), name="c"),
        "conv_1x1_linear": _seq((5, 7, 16), L.Conv2D(24, 1), name="c"),
        "dw_mult2_s2": _seq((9, 8, 4), L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
                            L.ReLU(6.0), name="c"),
        "dw_mult1_relu": _seq((8, 8, 8), L.DepthwiseConv2D(3, padding="same", activation="relu"), name="c"),
        "dense": _seq((20,), L.Dense(7), name="c"),
        "dense_relu": _seq((3, 3, 4), L.Flatten(), L.Dense(5, activation="relu"), name="c"),
        "avgpool_valid": _seq((9, 7, 5), L.AveragePooling2D(2, 2, padding="valid"), name="c"),
        "avgpool_same": _seq((7, 7, 3), L.AveragePooling2D(3, 2, padding="same"), name="c"),
        "maxpool_same": _seq((9, 8, 3), L.MaxPool2D(3, 2, padding="same"), name="c"),
        "mean_hw": _seq((6, 5, 8), L.GlobalAveragePooling2D(), name="c"),
        "mean_hw_keep": _seq((7, 7, 8), L.GlobalAveragePooling2D(keepdims=True), name="c"),
        "pad": _seq((5, 6, 3), L.ZeroPadding2D(((1, 2), (0, 1))), L.Conv2D(4, 3), name="c"),
        "softmax": _seq((10,), L.Dense(10), L.Softmax(), name="c"),
        "logistic": _seq((12,), L.Dense(6, activation="sigmoid"), name="c"),
        "reshape": _seq((4, 4, 2), L.Reshape((8, 4)), L.Reshape((32,)), L.Dense(3), name="c"),
    }
    inp = keras.Input((6, 6, 4), name="input")
    a = L.Conv2D(8, 1, name="a")(inp)
    b = L.Conv2D(8, 3, padding="same", name="b")(inp)
    m["add"] = keras.Model(inp, L.Add()([a, b]), name="add")
    m["add_relu"] = keras.Model(inp, L.ReLU()(L.Add()([a, b])), name="add_relu")
    c = L.Conv2D(5, 1, name="c5")(inp)
    m["concat"] = keras.Model(inp, L.Concatenate()([a, c]), name="concat")
    return m


def convert(model: keras.Model, rep: np.ndarray, *, float_io: bool = False) -> bytes:
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([rep[i:i + 1]] for i in range(rep.shape[0]))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if not float_io:
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    return conv.convert()


def main(argv: list[str] | None = None) -> int:
    only = set(argv if argv is not None else sys.argv[1:])
    rng = np.random.default_rng(SEED)
    tf.random.set_seed(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, model in op_models().items():
        if only and name not in only:
            continue
        for layer in model.layers:  # non-trivial biases so the int32 bias path is exercised
            w = layer.get_weights()
            if len(w) == 2:
                layer.set_weights([w[0], rng.normal(0, 0.3, w[1].shape).astype(np.float32)])
        rep = rng.normal(0.2, 1.0, (32, *model.input_shape[1:])).astype(np.float32)
        data = convert(model, rep)
        tmp = OUT / f".{name}.tflite.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, OUT / f"{name}.tflite")
        print(f"{name}.tflite {len(data)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
