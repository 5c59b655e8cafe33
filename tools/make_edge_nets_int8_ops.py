"""Write tiny converter-made full-int8 .tflite files for the int8 ops the edge nets added (issue 14), one op each,
to tests/data/edge_nets/ops/.

One op (after a conv or two that give its inputs their own scales and zero points) per file, on
shapes that broadcast where the op does: squeeze-excite's (1,H,W,C) x (1,1,1,C), a per-pixel
(1,H,W,1) gate, per-channel and scalar constants. Checked op by op against LiteRT's reference
kernels (BUILTIN_REF) by tests/test_int8_ops_tflite_ref.py. Each file is a few KB.

Runs in the TensorFlow venv made by tools/setup_tf_env.sh, never in CI:

    ~/.cache/edge-sdk/venv-tf/bin/python tools/make_edge_nets_int8_ops.py [NAME ...]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_int8_op_models as base  # noqa: E402  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

keras, tf, np = base.keras, base.tf, base.np
L = keras.layers
SEED = 1414
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "edge_nets" / "ops"
HW = (6, 5, 8)  # odd width: broadcasting and resizing bugs show on non-square maps


def _two(shape=HW):
    """An input and two convs of it with their own quantization (a: 1x1, b: 3x3). Ops with a constant
    operand take the input itself: after a conv, the converter folds them into its weights."""
    inp = keras.Input(shape, name="input")
    a = L.Conv2D(shape[-1], 1, name="a")(inp)
    b = L.Conv2D(shape[-1], 3, padding="same", name="b")(inp)
    return inp, a, b


def _gap(x):
    return L.GlobalAveragePooling2D(keepdims=True)(x)


def _lam(fn, name):
    return L.Lambda(fn, name=name)


def binary_models() -> dict:
    m = {}
    inp, a, b = _two()
    m["mul_same"] = keras.Model(inp, L.Multiply()([a, b]))
    inp, a, b = _two()
    gate = L.Conv2D(HW[-1], 1, activation="sigmoid", name="gate")(_gap(b))
    m["mul_se"] = keras.Model(inp, L.Multiply()([a, gate]))        # (1,6,5,8) x (1,1,1,8)
    inp, a, b = _two()
    pix = L.Conv2D(1, 1, name="pix")(b)
    m["mul_pixel"] = keras.Model(inp, L.Multiply()([pix, a]))       # (1,6,5,1) x (1,6,5,8)
    inp, a, _ = _two()
    vec = np.linspace(-1.5, 2.0, HW[-1]).astype(np.float32)
    m["mul_const_channel"] = keras.Model(inp, _lam(lambda t: t * vec, "mulc")(inp))
    inp, a, _ = _two()
    m["mul_const_scalar"] = keras.Model(inp, _lam(lambda t: t * 0.37, "muls")(inp))
    inp, a, _ = _two()
    m["add_const_scalar"] = keras.Model(inp, _lam(lambda t: t + 3.0, "adds")(inp))
    inp, a, b = _two()
    m["add_se"] = keras.Model(inp, L.Add()([a, _gap(b)]))
    inp, a, b = _two()
    m["sub_same"] = keras.Model(inp, L.Subtract()([a, b]))
    inp, a, b = _two()
    m["sub_broadcast"] = keras.Model(inp, L.Subtract()([a, _gap(b)]))
    inp, a, _ = _two()
    m["sub_const_channel"] = keras.Model(inp, _lam(lambda t: t - vec, "subc")(inp))
    inp, a, b = _two()
    m["maximum_same"] = keras.Model(inp, L.Maximum()([a, b]))
    inp, a, b = _two()
    m["minimum_broadcast"] = keras.Model(inp, _lam(lambda t: tf.minimum(t[0], t[1]), "minb")([a, _gap(b)]))
    inp, a, _ = _two()
    m["maximum_const"] = keras.Model(inp, _lam(lambda t: tf.maximum(t, -0.25), "maxc")(inp))
    return m


def unary_models() -> dict:
    m = {}
    for name, fn in [("hard_swish", lambda t: t * tf.nn.relu6(t + 3.0) * (1.0 / 6.0)),
                     ("swish", tf.nn.silu), ("logistic_4d", tf.sigmoid), ("tanh", tf.tanh),
                     ("leaky_relu", lambda t: tf.nn.leaky_relu(t, 0.1)),]:
        inp, a, _ = _two()
        m[name] = keras.Model(inp, _lam(fn, name)(a))
    inp, a, _ = _two()
    m["prelu"] = keras.Model(inp, L.PReLU(shared_axes=[1, 2], alpha_initializer=keras.initializers.RandomUniform(
        -0.5, 0.5, seed=SEED))(a))
    inp, a, _ = _two()
    m["resize_nearest_2x"] = keras.Model(inp, L.UpSampling2D(2, interpolation="nearest")(a))
    inp, a, _ = _two()
    m["resize_bilinear_2x"] = keras.Model(inp, L.UpSampling2D(2, interpolation="bilinear")(a))
    inp, a, _ = _two()
    m["resize_bilinear_9x7"] = keras.Model(inp, _lam(lambda t: tf.image.resize(t, (9, 7)), "rb")(a))
    inp, a, _ = _two()
    m["resize_bilinear_align"] = keras.Model(inp, _lam(
        lambda t: tf.compat.v1.image.resize_bilinear(t, (11, 9), align_corners=True), "rba")(a))
    inp, a, _ = _two()
    m["resize_nearest_9x7"] = keras.Model(inp, _lam(
        lambda t: tf.image.resize(t, (9, 7), method="nearest"), "rn")(a))
    return m


def shape_models() -> dict:
    m = {}
    inp, a, b = _two()
    x, y = _lam(lambda t: tf.split(t, 2, axis=-1), "split")(a)
    m["split"] = keras.Model(inp, L.Concatenate()([L.Conv2D(4, 1)(y), x]))
    inp, a, b = _two()
    x, y = _lam(lambda t: tf.split(t, [3, 5], axis=-1), "splitv")(a)
    m["split_v"] = keras.Model(inp, L.Concatenate()([L.Conv2D(2, 1)(y), x]))
    inp, a, _ = _two()
    m["strided_slice"] = keras.Model(inp, _lam(lambda t: t[:, 1:5, ::2, 2:7], "ss")(a))
    inp, a, _ = _two()
    m["strided_slice_neg"] = keras.Model(inp, _lam(lambda t: t[:, -4:, 1:-1:2, ::3], "ssn")(a))
    inp, a, _ = _two()
    m["transpose_4d"] = keras.Model(inp, L.Permute((2, 1, 3))(a))
    inp, a, _ = _two()
    h, w, c = HW
    shuffled = L.Reshape((h, w, c))(L.Permute((1, 2, 4, 3))(L.Reshape((h, w, 2, c // 2))(a)))
    m["channel_shuffle"] = keras.Model(inp, shuffled)
    inp, a, _ = _two()
    perm = [3, 0, 7, 1, 6, 2, 5, 4]
    m["gather_channels"] = keras.Model(inp, _lam(lambda t: tf.gather(t, perm, axis=-1), "gather")(a))
    inp, a, b = _two()
    m["pack"] = keras.Model(inp, L.Reshape((h, w, 2 * c))(_lam(lambda t: tf.stack(t, axis=3), "pack")([a, a * 0.5])))
    inp, a, b = _two()
    cc = L.Conv2D(3, 1, name="c3")(inp)
    m["concat3"] = keras.Model(inp, L.Concatenate()([a, cc, b]))
    inp, a, b = _two()
    m["concat_axis1"] = keras.Model(inp, L.Concatenate(axis=1)([a, b]))
    inp, a, _ = _two()
    m["mean_keep_1x1"] = keras.Model(inp, L.Conv2D(4, 1)(_gap(a)))
    return m


def convert(model, rep) -> bytes:
    """Full int8 (int8 in and out), traced with a fixed batch of 1 as deployed files are (a dynamic
    batch turns every Reshape into a SHAPE -> STRIDED_SLICE -> PACK chain)."""
    spec = tf.TensorSpec((1, *model.input_shape[1:]), tf.float32)
    fn = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn], model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([rep[i:i + 1]] for i in range(rep.shape[0]))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    return conv.convert()


def main(argv: list[str] | None = None) -> int:
    only = set(argv if argv is not None else sys.argv[1:])
    rng = np.random.default_rng(SEED)
    tf.random.set_seed(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    models = {**binary_models(), **unary_models(), **shape_models()}
    for name, model in models.items():
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
        ops = sorted({d["op_name"] for d in tf.lite.Interpreter(model_content=data)._get_ops_details()})
        print(f"{name}.tflite {len(data)} bytes: {' '.join(ops)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
