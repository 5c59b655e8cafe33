"""A labelled image set in the ImageFolder layout, matched to a model's classes.

    DIR/<class>/<image>      one sub-folder per class, named by the class label ("tabby cat") or its
                             index ("281"); images .png .jpg .jpeg .bmp .gif .tif .webp (Pillow) and
                             .ppm / .npy (numpy alone)

`scan(DIR, labels=..., classes=...)` resolves every folder to a class index: a folder named like one of
the model's labels (manifest or --labels) takes that label's index, else a folder named by a number
takes that index. Anything else is an error naming the folder, as are an empty folder and a class
folder without images. `--limit N` takes images round-robin over the classes, so a short run still
sees every class.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk.errors import UsageError
from edge_sdk.runtime.device.preprocess import ImageFileError, check_pixels, read_image_file

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pnm", ".npy")


class ImageError(UsageError):
    """An image file cannot be read; the message names it."""


@dataclass(frozen=True)
class Sample:
    path: Path
    label: int  # the model's class index


@dataclass(frozen=True)
class ImageFolder:
    root: Path
    folders: dict[str, int]  # sub-folder name -> class index
    samples: tuple[Sample, ...]
    labels: tuple[str, ...] | None  # the model's class names, when known

    def name_of(self, index: int) -> str:
        if self.labels and 0 <= index < len(self.labels):
            return self.labels[index]
        return str(index)

    def __str__(self) -> str:
        return f"{self.root}: {len(self.samples)} images in {len(self.folders)} classes"


def read_labels(path: Path) -> list[str]:
    """One label per line (blank lines skipped)."""
    if not Path(path).is_file():
        raise UsageError(f"{path}: no such labels file")
    labels = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not labels:
        raise UsageError(f"{path}: the labels file is empty")
    return labels


def _class_index(folder: str, labels: list[str] | None, classes: int, root: Path) -> int:
    if labels:
        if folder in labels:
            return labels.index(folder)
        lower = [lbl.lower() for lbl in labels]
        if folder.lower() in lower and lower.count(folder.lower()) == 1:
            return lower.index(folder.lower())
    if re.fullmatch(r"\d+", folder) and int(folder) < classes:
        return int(folder)
    known = (f"labels {', '.join(labels[:5])}{', ...' if len(labels) > 5 else ''} or indices 0..{classes - 1}"
             if labels else f"class indices 0..{classes - 1} (the model has no labels: pass --labels FILE)")
    close = difflib.get_close_matches(folder, labels or [], n=1, cutoff=0.6)
    raise UsageError(f"{root / folder}: class '{folder}' is not one the model knows; expected {known}"
                     + (f"; did you mean '{close[0]}'?" if close else ""))


def scan(root: Path, *, labels: list[str] | None, classes: int, limit: int | None = None) -> ImageFolder:
    """The images under `root`, each with the model's class index (module docstring)."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such folder (--images wants DIR/<class>/<image>)")
    subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    loose = [p.name for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    if not subdirs:
        extra = f" (it has {len(loose)} images at the top level; put them in one sub-folder per class)" if loose else ""
        raise UsageError(f"{root}: empty: no class sub-folders{extra}")
    folders = {d.name: _class_index(d.name, labels, classes, root) for d in subdirs}
    per_class: list[list[Sample]] = []
    for d in subdirs:
        files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise UsageError(f"{d}: class folder has no images ({', '.join(IMAGE_SUFFIXES)})")
        per_class.append([Sample(p, folders[d.name]) for p in files])
    samples = _round_robin(per_class)
    if limit is not None:
        if limit < 1:
            raise UsageError(f"--limit {limit}: must be at least 1")
        samples = samples[:limit]
    return ImageFolder(root, folders, tuple(samples), tuple(labels) if labels else None)


def _round_robin(groups: list[list[Sample]]) -> list[Sample]:
    out, i = [], 0
    while any(i < len(g) for g in groups):
        out += [g[i] for g in groups if i < len(g)]
        i += 1
    return out


def read_image(path: Path) -> np.ndarray:
    """(h, w, 3) uint8 RGB, at most MAX_IMAGE_PIXELS (as `run` reads its input). Pillow for compressed
    formats (runtime/device/preprocess.py's read_image_file: bombs refused, 16-bit scaled); .ppm and .npy with
    numpy alone."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            img = np.load(path, mmap_mode="r", allow_pickle=False)  # the header first: nothing read yet
            check_pixels(path, img.shape[1] if img.ndim > 1 else 1, img.shape[0] if img.ndim else 1)
            img = np.array(img)
        elif suffix in (".ppm", ".pnm"):
            img = _read_ppm(path)
        else:
            img = read_image_file(path)
    except ImageFileError as e:
        raise ImageError(str(e)) from e
    except (OSError, ValueError, EOFError) as e:
        raise ImageError(f"{path}: not a readable image ({type(e).__name__}: {e})") from e
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] < 3) or img.size == 0:
        raise ImageError(f"{path}: expected an (h, w, 3) uint8 image, got {list(img.shape)} {img.dtype}")
    return np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else img[..., :3]


def _read_ppm(path: Path) -> np.ndarray:
    data = path.read_bytes()
    m = re.match(rb"P6\s+(?:#[^\n]*\s+)*(\d+)\s+(?:#[^\n]*\s+)*(\d+)\s+(?:#[^\n]*\s+)*(\d+)\s", data)
    if not m or int(m.group(3)) != 255:
        raise ValueError("not a binary PPM (P6) with maxval 255")
    w, h = int(m.group(1)), int(m.group(2))
    check_pixels(path, w, h)
    if len(data) < m.end() + w * h * 3:
        raise ValueError(f"PPM data is shorter than {w}x{h}x3 bytes")
    return np.frombuffer(data, np.uint8, count=w * h * 3, offset=m.end()).reshape(h, w, 3)
