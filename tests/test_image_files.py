"""Image files as eval, run and the classify app read them: real PNG files written here byte by byte (zlib +
the PNG chunk layout, not Pillow's writer): a bomb-sized header, a 13000x13000 image, one over the 40 MP
cap but under Pillow's own, a 16-bit grey gradient, and the modes with alpha or no 8-bit meaning.
Expected pixels come from numpy arithmetic on the values written, never from the reader itself."""
from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.cli import main
from edge_sdk.evaluation.dataset import ImageError, read_image
from edge_sdk.runtime.device.preprocess import ImageFileError, read_image_file

# PNG colour types: 0 grey, 2 RGB, 3 palette, 4 grey + alpha, 6 RGBA
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4, 3: 1}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(path: Path, width: int, height: int, *, depth: int = 8, colour: int = 0, rows=None,
              extra: tuple[bytes, ...] = (), idat: bytes | None = None) -> Path:
    """`rows(y)` gives row y's samples (numpy, big-endian for 16 bits); idat overrides the pixel data."""
    if idat is None:
        z = zlib.compressobj(6)
        parts = []
        for y in range(height):
            parts.append(z.compress(b"\0" + rows(y).tobytes()))
        idat = b"".join(parts) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + b"".join(extra) + _chunk(b"IDAT", idat)
                     + _chunk(b"IEND", b""))
    return path


def _zeros(width: int, channels: int = 1):
    row = np.zeros(width * channels, np.uint8)
    return lambda y: row


def _gradient16(width: int) -> np.ndarray:
    return np.round(np.linspace(0, 65535, width)).astype(">u2")


@pytest.fixture()
def images(tmp_path) -> dict[str, Path]:
    """The hostile files (and a 16-bit gradient), each in its own eval class folder."""
    out = {}
    for name in ("bomb", "huge", "over_cap", "grey16"):
        (tmp_path / name / "0").mkdir(parents=True)
    # 20000x20000 in the header, one byte of data: Pillow raises DecompressionBombError at open
    out["bomb"] = write_png(tmp_path / "bomb/0/bomb.png", 20000, 20000, idat=zlib.compress(b"\0"))
    # 13000x13000 zeros, a real 169 MP image (~170 KB on disk): over Pillow's warning threshold (89 MP)
    out["huge"] = write_png(tmp_path / "huge/0/huge.png", 13000, 13000, rows=_zeros(13000))
    # 8000x6000 = 48 MP: under Pillow's threshold, over the 40 MP run applies (and now eval)
    out["over_cap"] = write_png(tmp_path / "over_cap/0/big.png", 8000, 6000, rows=_zeros(8000))
    g = _gradient16(256)
    out["grey16"] = write_png(tmp_path / "grey16/0/grad.png", 256, 4, depth=16, rows=lambda y: g)
    return out


def _grey16_reference(width: int, height: int) -> np.ndarray:
    v = _gradient16(width).astype(np.int64)
    grey = np.floor(v * 255 / 65535 + 0.5).astype(np.uint8)  # nearest 8-bit level
    return np.broadcast_to(grey[None, :, None], (height, width, 3))


def test_bombs_and_images_over_the_cap_are_refused_naming_the_file(images):
    for key, why in (("bomb", "too large"), ("huge", "too large"), ("over_cap", "8000x6000 pixels is more")):
        with pytest.raises(ImageError, match=rf"{images[key].name}: {why}"):
            read_image(images[key])


def test_a_bomb_warning_is_refused_even_when_warnings_are_ignored(images):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ImageFileError, match="DecompressionBombWarning"):
            read_image_file(images["huge"])


def test_sixteen_bit_grey_is_scaled_not_clipped(images):
    got = read_image(images["grey16"])
    assert got.dtype == np.uint8 and got.shape == (4, 256, 3)
    np.testing.assert_array_equal(got, _grey16_reference(256, 4))
    assert (got == 255).mean() < 0.01  # Pillow's own I;16 -> RGB made 99.6 % of it white


def test_alpha_is_composited_onto_white_and_float_pixels_are_refused(tmp_path):
    rng = np.random.default_rng(0)
    la = rng.integers(0, 256, size=(5, 6, 2), dtype=np.uint8)
    write_png(tmp_path / "la.png", 6, 5, colour=4, rows=lambda y: la[y].reshape(-1))
    grey, a = la[..., 0].astype(np.int64), la[..., 1].astype(np.int64)
    want = np.floor((grey * a + 255 * (255 - a)) / 255 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(read_image(tmp_path / "la.png"), np.repeat(want[..., None], 3, axis=2))
    # a palette with a transparent entry: index 1 is red but fully transparent, so it shows as white
    idx = np.array([[0, 1, 2]], np.uint8)
    plte = _chunk(b"PLTE", bytes([0, 0, 255, 255, 0, 0, 0, 255, 0]))
    trns = _chunk(b"tRNS", bytes([255, 0, 255]))
    write_png(tmp_path / "p.png", 3, 1, colour=3, rows=lambda y: idx[y], extra=(plte, trns))
    np.testing.assert_array_equal(read_image(tmp_path / "p.png")[0], [[0, 0, 255], [255, 255, 255], [0, 255, 0]])
    from PIL import Image

    Image.fromarray(np.ones((3, 3), np.float32)).save(tmp_path / "f.tif")
    with pytest.raises(ImageError, match="f.tif: mode F"):
        read_image(tmp_path / "f.tif")


def test_truncated_pixel_data_is_a_named_error(tmp_path):
    write_png(tmp_path / "cut.png", 64, 64, idat=zlib.compress(b"\0" * 100)[:20])
    with pytest.raises(ImageError, match="cut.png: not a readable image"):
        read_image(tmp_path / "cut.png")


def test_the_classify_apps_folder_source_reads_alike(images):
    sys.path.insert(0, str(Path(__file__).parents[1] / "edge_sdk" / "apps" / "classify"))
    try:
        import sources
    finally:
        sys.path.pop(0)
    frames = list(sources.FolderSource(images["grey16"].parent))
    np.testing.assert_array_equal(frames[0][1], _grey16_reference(256, 4))
    with pytest.raises(sources.SourceError, match="bomb.png: too large"):
        list(sources.FolderSource(images["bomb"].parent))


@pytest.mark.slow
def test_eval_and_run_refuse_the_bomb_and_the_big_images_with_exit_2(images, host_package, capsys):
    for key in ("bomb", "huge", "over_cap"):
        folder = images[key].parents[1]
        assert main(["eval", str(host_package), "--images", str(folder), "--no-record"]) == 2, key
        err = capsys.readouterr().err
        assert images[key].name in err and "Traceback" not in err, err
        assert main(["run", str(host_package), "--input", str(images[key]), "--repeat", "1"]) == 2, key
        err = capsys.readouterr().err
        assert images[key].name in err and "Traceback" not in err, err


@pytest.mark.slow
def test_run_feeds_the_model_the_scaled_16_bit_image(images, host_package, tmp_path):
    from edge_sdk.package import open_package
    from edge_sdk.runtime.result import load_input
    from edge_sdk.runtime.device.preprocess import model_input

    pkg = open_package(host_package, tmp_path / "pkg")
    want = model_input(np.ascontiguousarray(_grey16_reference(256, 4)), pkg.manifest["input"])
    np.testing.assert_array_equal(load_input(images["grey16"], pkg), want)
