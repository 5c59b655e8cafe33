"""Image -> model input, the one implementation used on the host and on the device (numpy + stdlib only).

    pre = Preprocess.from_json(manifest["input"]["preprocess"])
    x = model_input(rgb_uint8_hwc, manifest["input"])     # crop, resize, normalise, layout, quantize

Steps, in order (every one recorded in the package manifest, so a device reproduces the host's input):
1. center crop: keep the central `crop` fraction of each side (TensorFlow's central_crop arithmetic:
   start = int((n - n * crop) / 2), size = n - 2 * start); 1.0 keeps the whole image.
2. resize to (height, width): "bilinear" (default), "area" or "nearest", with Pillow's arithmetic:
   pixel centres at (i + 0.5) * scale, and when shrinking the filter's support is scaled by the
   shrink factor (antialiased; "area" is Pillow's BOX filter: an average over each output pixel's
   footprint). Computed in float32 without Pillow's intermediate uint8 rounding, so it is within one
   uint8 step of Pillow's uint8 result and equal to Pillow's float ("F" mode) result.
3. x = (pixel - mean) / std per channel, mean and std in pixel units (0..255), given in R, G, B order.
4. channel order: "BGR" reverses the channels after normalising. A 1-channel input (channels 1) takes the
   image's luma, Pillow's convert("L") arithmetic (R*19595 + G*38470 + B*7471 + 0x8000) >> 16 (ITU-R 601-2,
   what Keras' grayscale loading and OpenCV's COLOR_RGB2GRAY compute), right after the crop; mean and std
   are then the first of their three values. Inputs of other channel counts are not images (.npy only).
5. layout: NHWC or NCHW, batch 1.
6. integer inputs (int8/uint8 models): q = clip(round(x / scale) + zero_point), dividing in float32
   and rounding half away from zero, as TFLite's QUANTIZE does.

The runtime bundle ships this file as edge_sdk_runtime/preprocess.py; it must import nothing but numpy
(and Pillow, imported only by read_image_file, which turns an image file into RGB uint8 pixels).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESIZE_METHODS = ("bilinear", "area", "nearest")
CHANNEL_ORDERS = ("RGB", "BGR")
LAYOUTS = ("NHWC", "NCHW")
_SUPPORT = {"bilinear": 1.0, "area": 0.5}


class PreprocessError(ValueError):
    """A preprocessing spec or an image it is applied to is invalid; the message names the field."""


@dataclass(frozen=True)
class Preprocess:
    """How an RGB uint8 image becomes the model input (the module docstring lists the steps)."""

    height: int
    width: int
    mean: tuple[float, float, float] = (127.5, 127.5, 127.5)
    std: tuple[float, float, float] = (127.5, 127.5, 127.5)
    channel_order: str = "RGB"
    interpolation: str = "bilinear"
    crop: float = 1.0
    channels: int = 3  # 3: RGB/BGR; 1: grayscale (luma); anything else is not an image input

    def __post_init__(self) -> None:
        if int(self.height) < 1 or int(self.width) < 1:
            raise PreprocessError(f"preprocess resize: {self.height}x{self.width} is not a positive size")
        object.__setattr__(self, "mean", _triple("mean", self.mean))
        object.__setattr__(self, "std", _triple("std", self.std))
        if any(s <= 0 for s in self.std):
            raise PreprocessError(f"preprocess std {list(self.std)}: every value must be > 0")
        if self.channel_order not in CHANNEL_ORDERS:
            raise PreprocessError(f"preprocess channel_order '{self.channel_order}': expected RGB or BGR")
        if self.interpolation not in RESIZE_METHODS:
            raise PreprocessError(f"preprocess interpolation '{self.interpolation}': expected one of "
                                  f"{', '.join(RESIZE_METHODS)}")
        if not 0.0 < float(self.crop) <= 1.0:
            raise PreprocessError(f"preprocess crop {self.crop}: expected a fraction in (0, 1]")
        if isinstance(self.channels, bool) or not isinstance(self.channels, int) or self.channels < 1:
            raise PreprocessError(f"preprocess channels {self.channels!r}: expected a positive integer")

    def to_json(self) -> dict:
        return {"resize": [int(self.height), int(self.width)], "interpolation": self.interpolation,
                "crop": float(self.crop), "mean": list(self.mean), "std": list(self.std),
                "channel_order": self.channel_order, "channels": self.channels}

    @classmethod
    def from_json(cls, d: dict) -> Preprocess:
        """From a manifest's input.preprocess. Packages written before "interpolation" existed were made
        with a nearest-neighbour resize, so a missing key means "nearest"."""
        try:
            h, w = (int(v) for v in d["resize"])
            return cls(h, w, tuple(d.get("mean", (127.5,) * 3)), tuple(d.get("std", (127.5,) * 3)),
                       d.get("channel_order", "RGB"), d.get("interpolation", "nearest"), float(d.get("crop", 1.0)),
                       d.get("channels", 3))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, PreprocessError):
                raise
            raise PreprocessError(f"manifest input.preprocess {d!r}: {type(e).__name__}: {e}") from e

    def apply(self, image: np.ndarray, *, layout: str = "NHWC") -> np.ndarray:
        """An (h, w, 3) uint8 RGB image -> (1, H, W, C) float32 (or (1, C, H, W) for NCHW), C = channels."""
        if layout not in LAYOUTS:
            raise PreprocessError(f"layout '{layout}': expected NHWC or NCHW")
        if self.channels not in (1, 3):
            raise PreprocessError(f"the model's input has {self.channels} channels: not an image (give the "
                                  "input as an .npy array)")
        img = center_crop(as_rgb(image), self.crop)
        if self.channels == 1:
            img = luma(img)
        x = resize(img, (int(self.height), int(self.width)), self.interpolation)
        c = self.channels
        x = (x - np.asarray(self.mean[:c], np.float32)) / np.asarray(self.std[:c], np.float32)
        if self.channel_order == "BGR" and c == 3:
            x = x[..., ::-1]
        x = x[None]
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if layout == "NCHW" else x, dtype=np.float32)

    def input_range(self) -> tuple[float, float]:
        """The lowest and highest value any channel can take (pixels 0..255 through the normalisation)."""
        lows = [(0.0 - m) / s for m, s in zip(self.mean, self.std)]
        highs = [(255.0 - m) / s for m, s in zip(self.mean, self.std)]
        return min(lows), max(highs)


def _triple(name: str, v) -> tuple[float, float, float]:
    try:
        t = tuple(float(x) for x in v)
    except (TypeError, ValueError) as e:
        raise PreprocessError(f"preprocess {name} {v!r}: expected three numbers (R, G, B)") from e
    if len(t) == 1:
        t = t * 3
    if len(t) != 3 or not all(math.isfinite(x) for x in t):
        raise PreprocessError(f"preprocess {name} {list(t)}: expected three finite numbers (R, G, B)")
    return t


def as_rgb(image: np.ndarray) -> np.ndarray:
    """(h, w) grey, (h, w, 3) RGB or (h, w, 4) RGBA uint8 -> (h, w, 3) uint8."""
    img = np.asarray(image)
    if img.dtype != np.uint8:
        raise PreprocessError(f"image dtype {img.dtype}: expected uint8 pixels")
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] < 3 or img.shape[0] < 1 or img.shape[1] < 1:
        raise PreprocessError(f"image shape {list(img.shape)}: expected (height, width, 3)")
    return img[..., :3]


def luma(rgb: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8 RGB -> (h, w, 1) uint8 grey, Pillow's convert("L") to the bit."""
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]


def center_crop(image: np.ndarray, fraction: float) -> np.ndarray:
    """The central `fraction` of each side (TensorFlow's central_crop arithmetic)."""
    if fraction >= 1.0:
        return image
    h, w = image.shape[:2]
    top, left = int((h - h * fraction) / 2), int((w - w * fraction) / 2)
    return image[top:h - top, left:w - left]


def _taps(n_in: int, n_out: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's resampling coefficients: (indices, weights), both (n_out, K); weights sum to 1 per row."""
    scale = n_in / n_out
    if method == "nearest":
        # floor((i + 0.5) * scale) as Pillow computes it: 0.5 * scale, then scale added once per pixel (in double)
        steps = np.full(n_out, scale)
        steps[0] = 0.5 * scale
        idx = np.minimum(np.add.accumulate(steps).astype(np.int64), n_in - 1)
        return idx[:, None], np.ones((n_out, 1), np.float32)
    fscale = max(scale, 1.0)
    support = _SUPPORT[method] * fscale
    k = int(math.ceil(support)) * 2 + 1
    centre = (np.arange(n_out) + 0.5) * scale
    lo = np.maximum((centre - support + 0.5).astype(np.int64), 0)  # C's (int) cast: truncation
    hi = np.minimum((centre + support + 0.5).astype(np.int64), n_in)
    idx = lo[:, None] + np.arange(k)[None, :]
    d = (idx - centre[:, None] + 0.5) / fscale
    if method == "bilinear":
        w = np.clip(1.0 - np.abs(d), 0.0, None)
    else:  # box: (-0.5, 0.5]
        w = ((d > -0.5) & (d <= 0.5)).astype(np.float64)
    w[idx >= hi[:, None]] = 0.0
    w /= w.sum(axis=1, keepdims=True)
    return np.minimum(idx, n_in - 1), w.astype(np.float32)


def _resample_axis(x: np.ndarray, n_out: int, axis: int, method: str) -> np.ndarray:
    """Resample float32 `x` along `axis` (0 or 1) to n_out: an explicit sum over taps, in a fixed order,
    so every machine computes the same float32 values."""
    n_in = x.shape[axis]
    if n_in == n_out:
        return x
    idx, w = _taps(n_in, n_out, method)
    out = None
    for j in range(idx.shape[1]):
        if axis == 0:
            term = x[idx[:, j]] * w[:, j, None, None]
        else:
            term = x[:, idx[:, j]] * w[None, :, j, None]
        out = term if out is None else out + term
    return out


def resize(image: np.ndarray, size: tuple[int, int], method: str = "bilinear") -> np.ndarray:
    """(h, w, C) pixels -> (height, width, C) float32, with Pillow's resampling arithmetic (module docstring).

    Horizontal pass first, then vertical, as Pillow does."""
    if method not in RESIZE_METHODS:
        raise PreprocessError(f"resize method '{method}': expected one of {', '.join(RESIZE_METHODS)}")
    height, width = int(size[0]), int(size[1])
    x = np.asarray(image)
    if x.ndim != 3:
        raise PreprocessError(f"image shape {list(x.shape)}: expected (height, width, channels)")
    if method == "nearest":  # pure indexing: exact whatever the dtype
        rows, _ = _taps(x.shape[0], height, "nearest")
        cols, _ = _taps(x.shape[1], width, "nearest")
        return x[rows[:, 0]][:, cols[:, 0]].astype(np.float32)
    x = x.astype(np.float32)
    return np.ascontiguousarray(_resample_axis(_resample_axis(x, width, 1, method), height, 0, method))


def quantize(x: np.ndarray, quantization: dict | None, dtype: str) -> np.ndarray:
    """float32 -> the model's integer input: q = clip(round(x / scale) + zero_point), dividing in float32
    and rounding half away from zero (TFLite's QUANTIZE). Float inputs pass through."""
    if dtype == "float32":
        return np.asarray(x, np.float32)
    if dtype not in ("int8", "uint8"):
        raise PreprocessError(f"input dtype '{dtype}': expected float32, int8 or uint8")
    if not quantization or "scale" not in quantization or "zero_point" not in quantization:
        raise PreprocessError(f"the input is {dtype} but the manifest has no input quantization "
                              "(scale, zero_point)")
    r = np.asarray(x, np.float32) / np.float32(quantization["scale"])
    t = np.trunc(r)
    r = t + np.where(np.abs(r - t) >= 0.5, np.sign(r), 0)
    info = np.iinfo(dtype)
    return np.clip(r.astype(np.int64) + int(quantization["zero_point"]), info.min, info.max).astype(dtype)


def model_input(image: np.ndarray, spec: dict) -> np.ndarray:
    """The model's input tensor for `image` from a manifest's "input" entry (preprocess, layout, dtype,
    quantization): the whole pipeline, as the device runs it."""
    try:
        pre, layout, dtype = Preprocess.from_json(spec["preprocess"]), spec.get("layout", "NHWC"), spec["dtype"]
    except (KeyError, TypeError) as e:
        raise PreprocessError(f"manifest input {spec!r}: missing {e}") from e
    return quantize(pre.apply(image, layout=layout), spec.get("quantization"), dtype)


# ---- image files -> (h, w, 3) uint8 RGB (Pillow, imported only here; the host and the device read alike) ----

MAX_IMAGE_PIXELS = 40_000_000  # a camera frame is a few MP; a decompression bomb decodes to gigabytes
_16BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
_ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")


class ImageFileError(PreprocessError):
    """An image file cannot be read, is too large, or has pixels with no 8-bit meaning; names the file."""


def read_image_file(path, *, max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """(h, w, 3) uint8 RGB of an image file Pillow reads. The header's size is checked against `max_pixels`
    before any pixel is decoded; whatever Pillow raises (a decompression bomb included) becomes an
    ImageFileError naming the file. Modes: 16-bit grey (I;16*, and I with values 0..65535) is scaled
    to 8 bits with rounding (v * 255 / 65535), never clipped; alpha (RGBA, LA, PA, P or L with a
    transparent colour) is composited onto white; F (float pixels, no fixed range) is refused; other
    modes (1, L, P, CMYK, YCbCr, RGBX) go through Pillow's RGB conversion."""
    import struct
    import warnings
    import zlib

    try:
        from PIL import Image
    except ImportError as e:
        raise ImageFileError(f"{path}: reading this image needs Pillow (pip install pillow, or apt install "
                             f"python3-pil), or give a .ppm/.npy file") from e
    pillow_errors = (OSError, ValueError, SyntaxError, EOFError, IndexError, KeyError, MemoryError, struct.error,
                     zlib.error, Image.DecompressionBombError, Image.DecompressionBombWarning)
    try:
        with warnings.catch_warnings():  # Pillow only warns up to twice its own cap: a warning is refused too
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:  # lazy: only the header is read here
                check_pixels(path, im.width, im.height, max_pixels)
                mode, raw = im.mode, _pixels(im)
    except pillow_errors as e:
        what = "too large (a decompression bomb?)" if "DecompressionBomb" in type(e).__name__ else \
            "not a readable image"
        raise ImageFileError(f"{path}: {what} ({type(e).__name__}: {e})") from e
    return _to_rgb8(path, mode, raw)


def check_pixels(path, width: int, height: int, max_pixels: int = MAX_IMAGE_PIXELS) -> None:
    if width * height > max_pixels:
        raise ImageFileError(f"{path}: {width}x{height} pixels is more than an input image may have "
                             f"({max_pixels / 1e6:g} MP); a decompression bomb?")


def _pixels(im) -> np.ndarray:
    """The decoded pixels as Pillow holds them (16-bit and float modes untouched), or RGBA/RGB."""
    if im.mode in _16BIT_MODES or im.mode in ("I", "F"):
        return np.asarray(im)
    if im.mode in _ALPHA_MODES or "transparency" in im.info:
        return np.asarray(im.convert("RGBA"))
    return np.asarray(im.convert("RGB"))


def _to_rgb8(path, mode: str, a: np.ndarray) -> np.ndarray:
    if mode == "F":
        raise ImageFileError(f"{path}: mode F (32-bit float pixels) has no fixed range to map to 8 bits; "
                             "save it as an 8- or 16-bit image")
    if mode in _16BIT_MODES or mode == "I":
        if a.size and (int(a.min()) < 0 or int(a.max()) > 65535):
            raise ImageFileError(f"{path}: mode {mode} pixels span {int(a.min())}..{int(a.max())}, outside "
                                 "16 bits (0..65535); save it as an 8- or 16-bit image")
        grey = ((a.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=2)
    if a.ndim == 3 and a.shape[2] == 4:  # onto white: a transparent pixel's colour is not part of the picture
        rgb, alpha = a[..., :3].astype(np.uint32), a[..., 3:].astype(np.uint32)
        return ((rgb * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)
    return np.ascontiguousarray(a)
