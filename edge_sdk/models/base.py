"""The Model object: what intake produces and the compiler consumes."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.runtime.device.preprocess import Preprocess  # noqa: F401 - the one preprocessing (resize, crop, mean/std, ...)


def model_name(path: Path) -> str:
    """A model's name from its file: the stem, with anything but letters, digits, '_', '.', '-' as '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem)


@dataclass
class Model:
    """A model for compile: `mod["main"]` (a float Relax graph) takes one NHWC input, all weights bound as
    constants; `mod` is None for files a backend reads itself (full-integer .tflite, LCE models)."""

    name: str
    mod: object  # tvm.IRModule, or None (see above)
    input_name: str
    input_shape: tuple[int, ...]
    input_dtype: str
    preprocess: Preprocess
    source: str  # "zoo:mobilenet_v1?alpha=0.25", or the file path it came from
    labels: list[str] | None = None
    layout: str = "NHWC"
    options: dict = field(default_factory=dict)
    outputs: list[dict] | None = None  # several outputs: the manifest's "outputs" rows (models/outputs.py)

    def __str__(self) -> str:
        return f"Model {self.name} ({self.source}) input {self.input_name}{list(self.input_shape)} {self.input_dtype}"

    def example_input(self, *, seed: int = 0) -> np.ndarray:
        """A seeded input in the model's input range (as if from a camera frame)."""
        rng = np.random.default_rng(seed)
        if self.input_dtype == "float32" and self.preprocess.channels not in (1, 3):  # not an image
            lo, hi = self.preprocess.input_range()
            return rng.uniform(lo, hi, size=self.input_shape).astype(np.float32)
        if self.input_dtype == "float32":
            frame = rng.integers(0, 256, size=(self.preprocess.height, self.preprocess.width, 3), dtype=np.uint8)
            x = self.preprocess.apply(frame)
            return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if self.layout == "NCHW" else x
        info = np.iinfo(self.input_dtype)
        return rng.integers(info.min, info.max + 1, size=self.input_shape).astype(self.input_dtype)
