"""Frame sources for the classify app: one small interface, four kinds of source.

    with open_source("synthetic", size=(96, 96)) as src:
        for name, rgb in src:          # rgb: (h, w, 3) uint8 in R, G, B order
            ...

Specs: "picamera2" (the Pi camera through picamera2/libcamera), "picamera2-standin" (the stand-in
in picamera2_standin.py, for machines without a camera), "camera:N" or "/dev/videoN" (OpenCV
VideoCapture on V4L2), a video file (OpenCV), a folder of images (.ppm/.npy read with numpy alone,
.jpg/.png through Pillow or OpenCV when installed), "synthetic[:seed]" (seeded random frames).
Cameras are asked for `size`, so the ISP scales instead of the CPU. Numpy is the only hard dependency.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".mov", ".h264", ".mjpeg", ".webm"}
IMAGE_SUFFIXES = {".ppm", ".pnm", ".npy", ".png", ".jpg", ".jpeg", ".bmp"}


class SourceError(RuntimeError):
    """A source cannot be opened or read; the message names it."""


class FrameSource:
    """Iterate for (name, rgb uint8 (h, w, 3)) frames; close() releases the device or file."""

    def __iter__(self) -> Iterator[tuple[str, np.ndarray]]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> FrameSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Picamera2Source(FrameSource):
    """picamera2: configure the main stream at `size` in RGB888 once, then capture_array per frame."""

    def __init__(self, size: tuple[int, int], *, standin: bool = False):
        if standin:
            from picamera2_standin import Picamera2
        else:
            try:
                from picamera2 import Picamera2
            except ImportError as e:
                raise SourceError(f"--source picamera2 needs picamera2 (on Raspberry Pi OS: apt install "
                                  f"python3-picamera2): {e}") from e
        self.name = "picamera2-standin" if standin else "picamera2"
        self.cam = Picamera2()
        self.cam.configure(self.cam.create_preview_configuration(main={"size": tuple(size), "format": "RGB888"}))
        self.cam.start()

    def __iter__(self):
        n = 0
        while True:
            bgr = self.cam.capture_array()  # RGB888 is [B, G, R] in memory
            yield f"{self.name}:{n}", np.ascontiguousarray(bgr[..., 2::-1])
            n += 1

    def close(self) -> None:
        self.cam.close()


class OpenCVSource(FrameSource):
    """cv2.VideoCapture on a V4L2 camera index/device or a video file; frames come as BGR."""

    def __init__(self, target: int | str, size: tuple[int, int]):
        try:
            import cv2
        except ImportError as e:
            raise SourceError(f"reading {target!r} needs OpenCV (apt install python3-opencv, or pip install "
                              f"opencv-python-headless): {e}") from e
        self.cv2, self.target = cv2, target
        self.cap = cv2.VideoCapture(target)
        if not self.cap.isOpened():
            raise SourceError(f"OpenCV cannot open {target!r}")
        if isinstance(target, int) or str(target).startswith("/dev/video"):
            self.cap.set(cv2.CAP_PROP_FRAME_WIDTH, size[0])
            self.cap.set(cv2.CAP_PROP_FRAME_HEIGHT, size[1])

    def __iter__(self):
        n = 0
        while True:
            ok, bgr = self.cap.read()
            if not ok:
                return  # end of the video (a camera that stops delivering ends the run too)
            yield f"{self.target}:{n}", np.ascontiguousarray(bgr[..., 2::-1])
            n += 1

    def close(self) -> None:
        self.cap.release()


class FolderSource(FrameSource):
    """The images of a folder in name order, each once."""

    def __init__(self, folder: Path):
        self.files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.files:
            raise SourceError(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))})")

    def __iter__(self):
        for p in self.files:
            yield p.name, read_image(p)


class SyntheticSource(FrameSource):
    """Seeded random frames, endless: for soak tests and machines with no pictures."""

    def __init__(self, size: tuple[int, int], seed: int = 0):
        self.size, self.rng = size, np.random.default_rng(seed)

    def __iter__(self):
        w, h = self.size
        n = 0
        while True:
            yield f"synthetic:{n}", self.rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            n += 1


def open_source(spec: str, *, size: tuple[int, int]) -> FrameSource:
    """The source a --source string names; `size` is (width, height) asked of cameras and synthetic."""
    if spec in ("picamera2", "picamera2-standin"):
        return Picamera2Source(size, standin=spec.endswith("standin"))
    m = re.fullmatch(r"synthetic(?::(\d+))?", spec)
    if m:
        return SyntheticSource(size, int(m.group(1) or 0))
    m = re.fullmatch(r"camera:(\d+)", spec)
    if m:
        return OpenCVSource(int(m.group(1)), size)
    if spec.startswith("/dev/video") or Path(spec).suffix.lower() in VIDEO_SUFFIXES:
        if not spec.startswith("/dev/video") and not Path(spec).is_file():
            raise SourceError(f"{spec}: no such video file")
        return OpenCVSource(spec, size)
    if Path(spec).is_dir():
        return FolderSource(Path(spec))
    raise SourceError(f"--source {spec!r}: not picamera2, picamera2-standin, camera:N, /dev/videoN, "
                      f"synthetic[:seed], a folder of images or a video file")


def read_image(path: Path) -> np.ndarray:
    """(h, w, 3) uint8 RGB. PPM (P6, maxval 255) and .npy need only numpy; others Pillow or OpenCV."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        img = np.load(path, allow_pickle=False)
    elif suffix in (".ppm", ".pnm"):
        img = _read_ppm(path)
    else:
        img = _read_other(path)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] < 3:
        raise SourceError(f"{path}: expected an (h, w, 3) uint8 image, got {img.shape} {img.dtype}")
    return img[..., :3]


def _read_ppm(path: Path) -> np.ndarray:
    data = path.read_bytes()
    m = re.match(rb"P6\s+(?:#[^\n]*\s+)*(\d+)\s+(?:#[^\n]*\s+)*(\d+)\s+(?:#[^\n]*\s+)*(\d+)\s", data)
    if not m or int(m.group(3)) != 255:
        raise SourceError(f"{path}: not a binary PPM (P6) with maxval 255")
    w, h = int(m.group(1)), int(m.group(2))
    if len(data) < m.end() + w * h * 3:
        raise SourceError(f"{path}: PPM data is shorter than {w}x{h}x3 bytes")
    return np.frombuffer(data, np.uint8, count=w * h * 3, offset=m.end()).reshape(h, w, 3)


def write_ppm(path: Path, rgb: np.ndarray) -> None:
    """Binary PPM (P6): the image format every machine here can read back without Pillow."""
    rgb = np.ascontiguousarray(rgb, np.uint8)
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_bytes(f"P6 {rgb.shape[1]} {rgb.shape[0]} 255\n".encode() + rgb.tobytes())
    os.replace(tmp, path)


def _read_other(path: Path) -> np.ndarray:
    """Pillow through the runtime's reader (edge_sdk_runtime/preprocess.py: the pixel cap, bombs and 16-bit
    images handled as `edge-sdk run` and `eval` handle them); OpenCV when Pillow is not installed."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        pass
    else:
        pp = _preprocess_module()
        try:
            return pp.read_image_file(path)
        except pp.ImageFileError as e:
            raise SourceError(str(e)) from e
    try:
        import cv2
    except ImportError:
        raise SourceError(f"{path}: reading {path.suffix} needs Pillow or OpenCV (or use .ppm/.npy)") from None
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise SourceError(f"{path}: OpenCV cannot read it")
    if bgr.shape[0] * bgr.shape[1] > MAX_IMAGE_PIXELS:
        raise SourceError(f"{path}: {bgr.shape[1]}x{bgr.shape[0]} pixels is more than an input image may have")
    return np.ascontiguousarray(bgr[..., ::-1])


MAX_IMAGE_PIXELS = 40_000_000  # as edge_sdk_runtime/preprocess.py


def _preprocess_module():
    """edge_sdk_runtime.preprocess (the runtime bundle, on sys.path as classify.run puts it), or the SDK's own
    copy of the same file when the app runs from a checkout."""
    try:
        from edge_sdk_runtime import preprocess
    except ImportError:
        try:
            from edge_sdk.runtime.device import preprocess
        except ImportError:
            raise SourceError("reading .png/.jpg needs the runtime bundle (edge_sdk_runtime) on the path: "
                              "give --runtime, or use .ppm/.npy frames") from None
    return preprocess
