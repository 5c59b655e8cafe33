"""Write tests/data/trained/: converter-written files of the kinds trained models come as (issue 21).

Runs in the TF venv (tools/setup_tf_env.sh): TFLiteConverter.from_keras_model, the default conversion a
Keras user runs, so the batch stays dynamic (shape_signature -1) and every Reshape layer becomes
SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE.

    "$(bash tools/setup_tf_env.sh --print-python)" tools/make_trained_models.py

Files (seeded random weights, SEED below; tests/data/trained/README.md lists them):
    keras_dynbatch_reshape_32_float.tflite  32x32x3, Keras MobileNet's head (pool, Reshape, 1x1 conv, Reshape)
    gray_48x48_1ch_float.tflite             48x48x1 grayscale classifier, logits scaled into the hundreds
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "trained"
SEED = 20261201


def _save(model, name: str) -> None:
    import tensorflow as tf

    data = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    tmp = OUT / (name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, OUT / name)
    print(f"{OUT / name}: {len(data)} bytes")


def dynbatch_reshape():
    import tf_keras as keras

    L = keras.layers
    inp = keras.Input((32, 32, 3))
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inp)
    x = L.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Reshape((1, 1, 8))(x)  # Keras MobileNet's head: Reshape, 1x1 conv, Reshape, softmax
    x = L.Conv2D(10, 1)(x)
    x = L.Reshape((10,))(x)
    return keras.Model(inp, L.Activation("softmax")(x))


def grayscale():
    import tf_keras as keras

    L = keras.layers
    inp = keras.Input((48, 48, 1))
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = L.MaxPooling2D(2)(x)
    x = L.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(7)(x)
    return keras.Model(inp, L.Lambda(lambda t: t * 300.0)(x))  # outputs in the hundreds (item 7)


def main() -> None:
    import tf_keras as keras

    OUT.mkdir(parents=True, exist_ok=True)
    for i, (fn, name) in enumerate([(dynbatch_reshape, "keras_dynbatch_reshape_32_float.tflite"),
                                    (grayscale, "gray_48x48_1ch_float.tflite")]):
        keras.utils.set_random_seed(SEED + i)
        _save(fn(), name)


if __name__ == "__main__":
    main()
