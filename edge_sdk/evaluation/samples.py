"""A real labelled image set that ships with edge-sdk: the held-out handwritten digits as an ImageFolder.

    write_digits(Path("/tmp/digits"))      # /tmp/digits/0/0000.png ... /tmp/digits/9/...; 360 images

The digits (scikit-learn's, 8x8, values 0..16) are the held-out split the digits models were not trained on
(edge_sdk/models/weights/digits_heldout.npz). Each is written as a grey RGB PNG, pixel = round(v * 255 / 16),
scaled up by whole pixels (nearest) to a size from `sizes`, all larger than the models' 32x32 input, so
`edge-sdk eval` exercises the package's resize. Folder names are the class labels "0".."9" (= indices).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

SIZES = (40, 48, 64, 72, 96)
# How the digits models were trained (tools/train_digits.py: 8x8 -> 32x32 by whole pixels, v / 8 - 1): in pixel
# units mean 127.5, std 127.5; "area" shrinks these whole-pixel images back exactly as the training upscale
# made them. compile: --mean 127.5,127.5,127.5 --std 127.5,127.5,127.5 --resize area --crop 1
DIGITS_PREPROCESS = {"mean": (127.5,) * 3, "std": (127.5,) * 3, "interpolation": "area", "crop": 1.0}
DIGITS_LABELS = [str(i) for i in range(10)]


def digit_image(digit8x8: np.ndarray, size: int) -> np.ndarray:
    """One 8x8 digit (0..16) -> (size, size, 3) uint8, nearest upscaling (Pillow's NEAREST arithmetic)."""
    from edge_sdk.runtime.device.preprocess import resize

    grey = np.clip(np.rint(np.asarray(digit8x8, np.float64) * 255.0 / 16.0), 0, 255).astype(np.uint8)
    rgb = np.repeat(grey.reshape(8, 8, 1), 3, axis=2)
    return resize(rgb, (size, size), "nearest").astype(np.uint8)


def write_digits(dest: Path, *, sizes: tuple[int, ...] = SIZES, limit: int | None = None) -> Path:
    """Write the held-out digits under dest/<label>/NNNN.png; replaces dest atomically, returns it."""
    from PIL import Image

    from edge_sdk.bench.accuracy import WEIGHTS

    with np.load(WEIGHTS / "digits_heldout.npz") as f:
        images, labels = f["images"], f["labels"].astype(np.int64)
    n = len(labels) if limit is None else min(limit, len(labels))
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        for c in range(10):
            (tmp / str(c)).mkdir()
        for i in range(n):
            img = digit_image(images[i], sizes[i % len(sizes)])
            Image.fromarray(img).save(tmp / str(labels[i]) / f"{i:04d}.png")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
