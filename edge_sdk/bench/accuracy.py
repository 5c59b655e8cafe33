"""The handwritten-digits classifier: every variant's accuracy on real data (scikit-learn's digits).

tools/train_digits.py trains a zoo ResNet18 (alpha SPEC["alpha"], 32x32 RGB input, 10 classes) in float and
its binarized counterparts (straight-through estimator, the Riptide layout of models/binarized.py with shift
normalization), and stores the weights in edge_sdk/models/weights under the zoo's names, so
    build_zoo_model("resnet18", weights=weights_path("float"), ...)       and
    binarized_resnet18(a_bits=.., w_bits=.., weights=weights_path("w1a2"), ...)
load them. Binary layers' weights are stored as s * sign(w) (s = the layer's per-channel scale), which is
exactly what the binarized builder derives from the trained float weights, and compresses to a few KB.

Inputs: an 8x8 digit (values 0..16) is upsampled 4x (nearest) to 32x32, copied to 3 channels, and mapped
to [-1, 1] as v / 8 - 1: a multiple of 1/8, so on the 1/128 grid the binarized stem is exact on (its codes
are the numpy reference's, bit for bit). The held-out split (20%, stratified, seed 0) is stored with the
weights (digits_heldout.npz), so evaluating needs neither scikit-learn nor torch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.errors import ModelError

SPEC = {"alpha": 0.25, "resolution": 32, "classes": 10}
WEIGHTS = Path(__file__).parents[1] / "models" / "weights"  # shipped with the zoo (package data)
KINDS = ("float", "w1a1", "w1a2", "w2a2", "w1a2-plainbn")  # plainbn: trained without shift normalization
# The stem the binarized digits nets compile with: the zoo bitserial variants' (variants.py: w1a1/w1a2/...
# "int8"), so a digits accuracy is of the same net whose modelled Pi ms the demo and bench show. stem="float32"
# (the stem the nets were trained with, variant w1a2-float-stem) stays selectable.
STEM = "int8"


def weights_path(kind: str) -> Path:
    if kind not in KINDS:
        raise ModelError(f"digits weights '{kind}': expected one of {', '.join(KINDS)}")
    return WEIGHTS / f"digits_{kind}.npz"


def to_input(images) -> np.ndarray:
    """(N, 8, 8) digits with values 0..16 -> (N, 32, 32, 3) float32 in [-1, 1] (module docstring)."""
    img = np.asarray(images, dtype=np.float32).reshape(-1, 8, 8)
    up = img.repeat(4, axis=1).repeat(4, axis=2)
    return np.repeat((up / 8.0 - 1.0)[..., None], 3, axis=-1).astype(np.float32)


def load_heldout() -> tuple[np.ndarray, np.ndarray]:
    """(inputs (N, 32, 32, 3) float32, labels (N,) int64) of the held-out split."""
    path = WEIGHTS / "digits_heldout.npz"
    if not path.is_file():
        raise ModelError(f"{path}: missing; run tools/train_digits.py")
    with np.load(path) as f:
        return to_input(f["images"]), f["labels"].astype(np.int64)


def float_model():
    from edge_sdk.models.zoo import build_zoo_model

    return build_zoo_model("resnet18", **SPEC, weights=weights_path("float"))


def binarized_net(kind: str, *, shiftnorm: bool = True, stem: str = STEM):
    """The binarized ResNet18 of weights `kind` ("w1a2", "w1a2-plainbn", ...) with `stem` ("int8" / "float32")."""
    from edge_sdk.models.binarized import binarized_resnet18

    bits = kind.split("-")[0]
    w_bits, a_bits = int(bits[1]), int(bits[3])
    return binarized_resnet18(a_bits=a_bits, w_bits=w_bits, weights=weights_path(kind), shiftnorm=shiftnorm,
                              stem=stem, **SPEC)


def compile_float(target):
    from edge_sdk.compiler.lower import compile_relax

    return compile_relax(float_model().mod, target)


def compile_int8(target):
    """The int8 model (TFLite's full-int8 conversion of the float weights, float input and output)."""
    from edge_sdk.compiler.int8.backend import compile_int8 as build

    ex, params, _ = build(WEIGHTS / "digits_int8.tflite", target)
    return ex, params


def compile_binarized_kind(kind: str, target, *, glue: str, shiftnorm: bool = True, stem: str = STEM):
    from edge_sdk.compiler.bitserial.backend import compile_binarized

    ex, params, _ = compile_binarized(binarized_net(kind, shiftnorm=shiftnorm, stem=stem), target, glue=glue)
    return ex, params


def predict_compiled(ex, params, x) -> np.ndarray:
    """Class scores of a compiled (batch 1) model on every input, run on the host's VM."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(params[k]) for k in sorted(params)]
    return np.concatenate([vm["main"](tvm.runtime.tensor(x[i:i + 1]), *args).numpy() for i in range(len(x))])


def predict_reference(net, x, *, glue: str) -> np.ndarray:
    """Class scores of the numpy network reference (quant/bitserial_net_ref.py)."""
    from edge_sdk.quant.bitserial_net_ref import run_reference

    return np.concatenate([run_reference(net, x[i:i + 1], glue=glue).scores for i in range(len(x))])


def accuracy(scores, labels) -> float:
    return float(np.mean(np.argmax(scores, axis=-1) == labels))
