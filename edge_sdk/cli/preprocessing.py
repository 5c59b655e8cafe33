"""compile's preprocessing options: --mean R,G,B --std R,G,B --resize METHOD --crop FRACTION --channel-order.

They replace the model's defaults (a zoo model's training preprocessing; for a model file mean 127.5,
std 127.5, bilinear, no crop, RGB, with a warning) and go into the package manifest (input.preprocess),
which run, eval, the device app and calibration all follow (edge_sdk/runtime/device/preprocess.py).
"""
from __future__ import annotations

import argparse
import dataclasses

from edge_sdk.errors import UsageError
from edge_sdk.runtime.device.preprocess import CHANNEL_ORDERS, RESIZE_METHODS, PreprocessError

FILE_DEFAULT_WARNING = (
    "{src}: the file does not say how its images were normalised; assuming x = (pixel - 127.5) / 127.5, "
    "bilinear resize, no crop, RGB. If it was trained otherwise, compile with --mean R,G,B --std R,G,B "
    "(pixel units, e.g. --mean 123.675,116.28,103.53 --std 58.395,57.12,57.375 for torchvision) "
    "and --resize bilinear|area|nearest, --crop FRACTION, --channel-order RGB|BGR")


def _triple(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected R,G,B numbers (or one number for all three)") from None
    if len(values) not in (1, 3):
        raise argparse.ArgumentTypeError(f"'{text}': expected three comma-separated numbers R,G,B")
    return values * 3 if len(values) == 1 else values


def add_preprocess_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("preprocessing (stored in the package; default: the zoo model's training "
                             "preprocessing, or mean 127.5 std 127.5 bilinear for a file)")
    g.add_argument("--mean", type=_triple, metavar="R,G,B", help="per-channel mean in pixel units (0..255)")
    g.add_argument("--std", type=_triple, metavar="R,G,B", help="per-channel std in pixel units: x = (pixel - mean) / std")
    g.add_argument("--resize", choices=RESIZE_METHODS, help="resize method (antialiased when shrinking)")
    g.add_argument("--crop", type=float, metavar="FRACTION", help="keep the central FRACTION of each side first "
                   "(0.875: 224 of 256; 1: no crop)")
    g.add_argument("--channel-order", choices=CHANNEL_ORDERS, help="the channel order the model expects")


def apply_preprocess_options(args, model, *, warn) -> None:
    """Set model.preprocess from the options; `warn(text)` when a file model keeps the assumed defaults."""
    given = {k: v for k, v in (("mean", args.mean), ("std", args.std), ("interpolation", args.resize),
                               ("crop", args.crop), ("channel_order", args.channel_order)) if v is not None}
    if not model.source.startswith("zoo:") and not ({"mean", "std"} <= set(given)):
        warn(FILE_DEFAULT_WARNING.format(src=model.source))
    if not given:
        return
    try:
        model.preprocess = dataclasses.replace(model.preprocess, **given)
    except PreprocessError as e:
        raise UsageError(f"--mean/--std/--resize/--crop/--channel-order: {e}") from e
