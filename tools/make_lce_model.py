"""Write the small Larq Compute Engine model the LCE importer is tested on (tests/data/lce/).

Why LCE's own converter and interpreter: the importer (edge_sdk/models/lce.py) must read what Larq
users actually ship, and the expected output must come from LCE's kernels, not from our reading of them.

The model (16x16x3 in, 10 classes) is built so that the converter emits every op the importer maps:
    CONV_2D (float stem, BN folded; no ReLU, or every sign would be +1)
    LceQuantize + LceBconv2d, bitpacked out    bconv1: 24 -> 32 ch (a partial word in), one-padding
                                               (pad_values=1), ReLU + BN + max pool + sign become
                                               thresholds, then LceBMaxPool2d on the packed bits
    LceBconv2d, bitpacked output (thresholds)  bconv2: 32 -> 40 (partial output word); its only
                                               consumer is bconv3's sign, so BN + sign become thresholds
    LceBconv2d, float output, stride 2         bconv3: 40 -> 48, zero-padding (pad_values=0), BN as
                                               post_activation_multiplier / bias
    sign consumed by float ops -> LceQuantize + LceDequantize, then MEAN, FULLY_CONNECTED, SOFTMAX
Batch-norm statistics are seeded random (so thresholds and multipliers are not trivial).

Writes (atomically): model_lce.tflite, input.npy (4, 16, 16, 3) float32 and expected.npy (4, 10) float32,
row i the output of `larq_compute_engine.testing.Interpreter` on input i alone.

    python tools/make_lce_model.py [--out tests/data/lce]   # re-runs itself in the LCE venv
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EDGE_SDK_CACHE") or Path.home() / ".cache" / "edge-sdk")
VENV_PY = CACHE / "venv-lce" / "bin" / "python"
SEED = 11
N_INPUTS = 4  # each run alone through LCE's interpreter (batch 1)


def _save(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def build_model():
    import larq as lq
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(SEED)
    L = tf.keras.layers
    q = dict(input_quantizer="ste_sign", kernel_quantizer="ste_sign", kernel_constraint="weight_clip",
             use_bias=False, padding="same")
    inp = tf.keras.Input((16, 16, 3))
    x = L.BatchNormalization()(L.Conv2D(24, 3, padding="same", use_bias=False)(inp))  # no ReLU: sign would be +1
    x = lq.layers.QuantConv2D(32, 3, pad_values=1.0, **q)(x)
    x = L.BatchNormalization()(L.ReLU()(x))
    x = L.MaxPooling2D(2)(x)
    x = L.BatchNormalization()(lq.layers.QuantConv2D(40, 3, pad_values=1.0, **q)(x))
    x = L.BatchNormalization()(lq.layers.QuantConv2D(48, 3, strides=2, pad_values=0.0, **q)(x))
    x = lq.quantizers.SteSign()(x)
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(10, activation="softmax")(x)
    model = tf.keras.Model(inp, out)
    rng = np.random.default_rng(SEED)
    for layer in model.layers:  # non-trivial BN: thresholds and multipliers of both signs, offsets
        if isinstance(layer, L.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(-1.5, 1.5, n) * np.where(rng.random(n) < 0.8, 1, -1) + 0.0,
                               rng.normal(0, 0.5, n), rng.normal(0, 3.0, n), rng.uniform(4, 30, n)])
    return model


def main_lce(out: Path) -> None:
    import larq_compute_engine as lce
    import numpy as np


    model = build_model()
    flat = lce.convert_keras_model(model)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED + 1)
    x = rng.normal(0, 1, (N_INPUTS, 16, 16, 3)).astype(np.float32)
    interp = lce.testing.Interpreter(flat, num_threads=1)
    y = np.concatenate([np.asarray(interp.predict(x[i:i + 1])).reshape(1, 10) for i in range(N_INPUTS)])
    y = y.astype(np.float32)
    _save(out / "model_lce.tflite", flat)
    for name, arr in (("input.npy", x), ("expected.npy", y)):
        tmp = out / (name + ".tmp")
        with open(tmp, "wb") as f:
            np.save(f, arr)
        os.replace(tmp, out / name)
    print("wrote", out, "expected", y.round(4).tolist())


def main_argv(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "lce")
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.in_venv:
        if not VENV_PY.exists():
            print(f"error: {VENV_PY} missing: run `bash tools/setup_peers.sh` (creates venv-lce)", file=sys.stderr)
            return 2
        env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
        os.execve(str(VENV_PY), [str(VENV_PY), __file__, "--in-venv", "--out", str(args.out.resolve())], env)
    main_lce(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main_argv())
