"""The digits classifier for `edge-sdk eval`: its held-out images as an ImageFolder, and converter-written .tflite files.

    .venv/bin/python tools/make_digits_eval.py --images /tmp/digits     # 360 held-out PNGs, 40..96 px
    .venv/bin/python tools/make_digits_eval.py --tflite                 # TF venv (bash tools/setup_tf_env.sh)

--tflite writes, from the trained float weights (tools/train_digits.py, edge_sdk/models/weights/digits_float.npz)
put into tools/make_test_models.py's Keras ResNet18, with TFLite's converter:
  tests/data/digits/digits_float.tflite     float32
  tests/data/digits/digits_int8_io.tflite   full int8 with int8 input and output (calibrated on 200 training digits),
                                     so eval exercises the input quantization (digits_int8.tflite, which
                                     train_digits.py writes, keeps float ends)
They are the LiteRT references of tests/test_eval_litert.py.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
OUT = {"float": ROOT / "tests" / "data" / "digits" / "digits_float.tflite", "int8": ROOT / "tests" / "data" / "digits" / "digits_int8_io.tflite"}


def stage(calib: Path) -> None:
    """In the TF venv: the Keras model with the float weights, converted twice."""
    import make_test_models as mtm
    from edge_sdk.bench.accuracy import SPEC, weights_path

    model = mtm.resnet18(size=SPEC["resolution"], classes=SPEC["classes"], width=max(8, int(64 * SPEC["alpha"])))
    with np.load(weights_path("float")) as f:
        w = {k: f[k].astype(np.float32) for k in f.files}
    for layer in model.layers:
        if not layer.get_weights():
            continue
        if layer.name.endswith(".bn"):
            layer.set_weights([w[f"{layer.name}.{k}"] for k in ("gamma", "beta", "mean", "var")])
        else:
            layer.set_weights([w[f"{layer.name}.weight"]] + ([w[f"{layer.name}.bias"]] if layer.name == "fc" else []))
    for kind, mode in (("float", "float"), ("int8", "int8")):
        data = mtm.convert(model, mode=mode, rep=np.load(calib))
        mtm._write(OUT[kind], data)
        print(f"wrote {OUT[kind]} ({len(data)} bytes, {mode})")


def make_tflite() -> None:
    from train_digits import TF_PY, split

    from edge_sdk.bench.accuracy import to_input

    if not TF_PY.exists():
        raise SystemExit(f"{TF_PY} missing: run `bash tools/setup_tf_env.sh`")
    with tempfile.TemporaryDirectory(prefix="digits-eval-") as tmp:
        calib = Path(tmp) / "calib.npy"
        np.save(calib, to_input(split()[0][:200]))  # the TF venv has no scikit-learn
        subprocess.run([str(TF_PY), __file__, "--stage", str(calib)], check=True,
                       env=dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, metavar="DIR", help="write the held-out digits as DIR/<label>/*.png")
    ap.add_argument("--tflite", action="store_true", help="(re)write the converter-written .tflite files")
    ap.add_argument("--stage", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage:
        stage(args.stage)
        return 0
    if not (args.images or args.tflite):
        ap.error("give --images DIR and/or --tflite")
    if args.images:
        from edge_sdk.evaluation.samples import write_digits

        print(f"wrote {write_digits(args.images)}")
    if args.tflite:
        make_tflite()
    return 0


if __name__ == "__main__":
    sys.exit(main())
