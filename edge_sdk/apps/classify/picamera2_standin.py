"""A STAND-IN for picamera2's `Picamera2` class, for machines without a camera or libcamera (tests, CI).

It follows the part of picamera2's API the classify app uses, with picamera2's behaviour:

    cam = Picamera2()
    config = cam.create_preview_configuration(main={"size": (w, h), "format": "RGB888"})
    cam.configure(config)
    cam.start()
    frame = cam.capture_array()        # (h, w, 3) uint8; "RGB888" is libcamera's order: [B, G, R] per pixel
    cam.close()

The frames are a synthetic scene (a moving gradient with a bright square), deterministic per frame
number. It is never picked silently in place of the real camera: the app asks for it by name.
"""
from __future__ import annotations

import numpy as np

_FORMATS = {"RGB888": 3, "BGR888": 3, "XRGB8888": 4, "XBGR8888": 4}


class Picamera2:
    """Stand-in for picamera2.Picamera2 (same method names, arguments and return shapes)."""

    def __init__(self, camera_num: int = 0):
        self.camera_num = camera_num
        self.camera_config: dict | None = None
        self.started = False
        self.closed = False
        self.frames_captured = 0

    def __enter__(self) -> Picamera2:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- configurations (picamera2 returns dicts of streams; unset fields get defaults) --
    def _configuration(self, use_case: str, main: dict | None, buffer_count: int) -> dict:
        main = dict(main or {})
        unknown = set(main) - {"size", "format", "stride", "framesize"}
        if unknown:
            raise ValueError(f"Picamera2 (stand-in): unknown main stream keys {sorted(unknown)}")
        main.setdefault("size", (640, 480))
        main.setdefault("format", "XBGR8888")
        if main["format"] not in _FORMATS:
            raise ValueError(f"Picamera2 (stand-in): unsupported format {main['format']!r}")
        return {"use_case": use_case, "main": main, "lores": None, "raw": None, "buffer_count": buffer_count}

    def create_preview_configuration(self, main: dict | None = None, **_kwargs) -> dict:
        return self._configuration("preview", main, 4)

    def create_still_configuration(self, main: dict | None = None, **_kwargs) -> dict:
        return self._configuration("still", main, 1)

    def configure(self, camera_config: dict) -> None:
        if self.closed:
            raise RuntimeError("Camera is closed")
        if self.started:
            raise RuntimeError("Camera must be stopped before configuring")
        self.camera_config = camera_config

    def start(self) -> None:
        if self.camera_config is None:
            raise RuntimeError("Camera has not been configured")
        self.started = True

    def stop(self) -> None:
        self.started = False

    def close(self) -> None:
        self.stop()
        self.closed = True

    def capture_array(self, name: str = "main") -> np.ndarray:
        if not self.started:
            raise RuntimeError("Camera must be started before capture_array")
        if name != "main":
            raise ValueError(f"Picamera2 (stand-in): only the 'main' stream exists, not {name!r}")
        w, h = self.camera_config["main"]["size"]
        fmt = self.camera_config["main"]["format"]
        rgb = scene(h, w, self.frames_captured)
        self.frames_captured += 1
        # libcamera names formats by word order: "RGB888" is stored B, G, R in memory
        out = rgb[..., ::-1] if fmt in ("RGB888", "XRGB8888") else rgb
        if _FORMATS[fmt] == 4:
            out = np.concatenate([out, np.full((h, w, 1), 255, np.uint8)], axis=2)
        return np.ascontiguousarray(out)


def scene(h: int, w: int, n: int) -> np.ndarray:
    """RGB: a gradient that drifts with n, and a white square moving across it."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1) + 7 * n) % 256, y * 255 // max(h - 1, 1),
                    np.full_like(x, (40 * n) % 256)], axis=-1).astype(np.uint8)
    s = max(2, min(h, w) // 4)
    x0, y0 = (n * 5) % max(w - s, 1), (n * 3) % max(h - s, 1)
    img[y0:y0 + s, x0:x0 + s] = 255
    return img
