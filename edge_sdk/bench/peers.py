"""The engines users pick instead of us, timed in the same bench run: LiteRT, ONNX Runtime, LCE, ncnn.

Why subprocesses: each engine runs in the environment it needs (LiteRT and ONNX Runtime in this
venv; Larq Compute Engine in $EDGE_SDK_CACHE/venv-lce, whose TensorFlow needs numpy<2 and
protobuf<3.21), with its own thread pool, through one small script (tools/peers/time_engine.py)
that prints JSON. Peer models are converter-written files of the same layout with random weights,
made by tools/make_peer_models.py under $EDGE_SDK_CACHE/peers/<key>/ (tools/setup_peers.sh does it all).

ncnn runs a network definition the way benchncnn does (zero weights; time_engine.py): for a full-size
zoo model (alpha 1.0, 224, 1000 classes) benchncnn's own file by name (--ncnn-models DIR, else the
copies in ncnn_models/), for any other size our zoo model written as an ncnn .param (ncnn_convert.py);
the int8 row without a benchncnn file (MobileNetV2) is its float .param by ncnn2int8's rule. The chosen
file is copied to peers/<key>/ncnn_<variant>.param, which the row runs and names.

A model the user brought as a file is its own peer (file_key): LiteRT or ONNX Runtime runs that very file.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.errors import EdgeError, RuntimeFailure
from edge_sdk.runtime.bundle import cache_root

TIME_ENGINE = Path(__file__).resolve().parents[2] / "tools" / "peers" / "time_engine.py"
SETUP_HINT = "run tools/setup_peers.sh"


@dataclass(frozen=True)
class Peer:
    engine: str  # "litert", "onnxruntime", "lce", "ncnn"
    variant: str  # the precision, in our variant names
    family: str  # "float", "int8", "binary": what our rows compare it with
    file: str  # name under peers/<key>/
    models: tuple[str, ...] | None = None  # zoo names it applies to (None: all)

    @property
    def label(self) -> str:
        return f"{self.engine} {self.variant}"


PEERS = (
    Peer("litert", "float32", "float", "litert_float32.tflite"),
    Peer("litert", "int8", "int8", "litert_int8.tflite"),
    Peer("onnxruntime", "float32", "float", "onnxruntime_float32.onnx"),
    Peer("onnxruntime", "int8", "int8", "onnxruntime_int8.onnx"),
    Peer("lce", "w1a1", "binary", "lce_w1a1.tflite", models=("resnet18",)),
    Peer("ncnn", "float32", "float", "ncnn_float32.param", models=("mobilenet_v1", "mobilenet_v2", "resnet18")),
    Peer("ncnn", "int8", "int8", "ncnn_int8.param", models=("mobilenet_v1", "mobilenet_v2", "resnet18")),
)
_MODULE = {"litert": ("ai_edge_litert", "pip install ai-edge-litert==2.3.0"),
           "onnxruntime": ("onnxruntime", "pip install -e '.[test]' (onnxruntime)"),
           "ncnn": ("ncnn", "pip install -e '.[test]' (ncnn)")}
# benchncnn's network definition for (zoo model, variant), by the name benchncnn runs it under.
NCNN_NAMES = {("mobilenet_v1", "float32"): "mobilenet", ("mobilenet_v1", "int8"): "mobilenet_int8",
              ("mobilenet_v2", "float32"): "mobilenet_v2", ("resnet18", "float32"): "resnet18",
              ("resnet18", "int8"): "resnet18_int8"}
NCNN_SHIPPED = Path(__file__).resolve().parent / "ncnn_models"
_FULL_SIZE = (1.0, 224, 1000)


@dataclass(frozen=True)
class PeerRun:
    """How bench runs its peers: the rows' thread counts, the target, counting (emulate_cpu) or timing."""

    threads: tuple[int, ...]
    target: object  # targets.Target
    emulate_cpu: str | None = None
    input_npy: Path | None = None  # our golden input, for the float peers
    warmup: int = 0
    repeat: int = 1
    min_time_ms: float = 0.0
    say: Callable[[str], None] = print
    ncnn_models: Path | None = None  # benchncnn's .param files by name (--ncnn-models)


def peers_root() -> Path:
    return cache_root() / "peers"


def peer_key(model) -> str:
    """`<zoo name>_<alpha>_<resolution>[_c<classes>]`, as tools/make_peer_models.py names the folders.

    For a model file, its stem without the converter suffix (mobilenet_v1_1.0_224_float.tflite ->
    mobilenet_v1_1.0_224), so the full-size test models find the peers of the same network.
    """
    opts = model.options or {}
    if {"alpha", "resolution"} <= set(opts):
        classes = int(opts.get("classes", 1000))
        return f"{model.name}_{float(opts['alpha'])}_{opts['resolution']}" + ("" if classes == 1000 else f"_c{classes}")
    return re.sub(r"_(float|int8|int8_float_io|float32)$", "", model.name)


def zoo_name(key: str) -> str:
    return re.sub(r"_[0-9.]+_\d+(_c\d+)?$", "", key)


def parse_key(key: str) -> tuple[str, float, int, int] | None:
    """(zoo name, alpha, resolution, classes) of a peer key, or None when it is not one."""
    m = re.fullmatch(r"(.+)_([0-9.]+)_(\d+)(?:_c(\d+))?", key)
    if not m:
        return None
    try:
        return m[1], float(m[2]), int(m[3]), int(m[4] or 1000)
    except ValueError:
        return None


def _ncnn_text(key: str, variant: str, ncnn_models: Path | None) -> tuple[str, str] | None:
    """The .param text the ncnn row of (key, variant) runs and where it came from (None: no definition)."""
    from edge_sdk.bench.ncnn_convert import int8_param, param_text

    spec = parse_key(key)
    if spec is None or (spec[0], "float32") not in NCNN_NAMES:
        return None
    name = NCNN_NAMES.get((spec[0], variant))
    if tuple(spec[1:]) == _FULL_SIZE:
        for folder in (ncnn_models, NCNN_SHIPPED):
            where = "edge_sdk/bench/ncnn_models" if folder == NCNN_SHIPPED else str(folder)
            if folder is None:
                continue
            if name and (folder / f"{name}.param").is_file():
                return (folder / f"{name}.param").read_text(), f"benchncnn's {name}.param ({where})"
            base = folder / f"{NCNN_NAMES[(spec[0], 'float32')]}.param"
            if variant == "int8" and base.is_file():
                return int8_param(base.read_text()), f"benchncnn's {base.name} ({where}), int8 by ncnn2int8's rule"
    from edge_sdk.bench.ncnn_convert import from_relax
    from edge_sdk.models.zoo import build_zoo_model

    model = build_zoo_model(spec[0], alpha=spec[1], resolution=spec[2], classes=spec[3])
    text = param_text(from_relax(model.mod))
    return (int8_param(text) if variant == "int8" else text), "our zoo model written as an ncnn .param" + (
        ", int8 by ncnn2int8's rule" if variant == "int8" else "")


def prepare_ncnn(key: str, peer: Peer, ncnn_models: Path | None = None) -> str | None:
    """Write peers/<key>/<peer.file>, the network definition the row runs; returns its origin (None: none)."""
    from edge_sdk.bench.ncnn_convert import write_atomic

    got = _ncnn_text(key, peer.variant, ncnn_models)
    if got is None:
        return None
    path = peer_file(key, peer)
    if not path.is_file() or path.read_text() != got[0]:
        write_atomic(path, got[0])
    return got[1]


def peers_for(key: str) -> list[Peer]:
    if key.startswith(FILE_KEY):  # a user's own file: only the engine that runs that file (file_key)
        return [p for p in PEERS if peer_file(key, p).is_file()]
    name = zoo_name(key)
    return [p for p in PEERS if p.models is None or name in p.models]


FILE_KEY = "file-"


def file_key(model) -> str | None:
    """For a model the user brought as a .tflite or .onnx file: that file is its own peer (the same network,
    weights and precision), run by LiteRT (.tflite; LCE for a Larq file) or ONNX Runtime (.onnx) at the
    precision it holds (full-integer .tflite / QDQ ONNX: the int8 row). The file is linked (or copied)
    into peers/file-<name>-<sha256[:12]>/ under the peer's file name; returns that key. None for zoo models."""
    import hashlib
    import shutil

    from edge_sdk.models.importers import is_int8_file
    from edge_sdk.models.lce import is_lce_file

    src = Path(str(model.source or ""))
    if str(model.source or "").startswith("zoo:") or src.suffix.lower() not in (".tflite", ".onnx") or not src.is_file():
        return None
    if src.suffix.lower() == ".onnx":
        engine, variant = "onnxruntime", "int8" if is_int8_file(src) else "float32"
    else:
        engine, variant = ("lce", "w1a1") if is_lce_file(src) else ("litert", "int8" if is_int8_file(src) else "float32")
    peer = next(p for p in PEERS if p.engine == engine and p.variant == variant)
    key = f"{FILE_KEY}{model.name}-{hashlib.sha256(src.read_bytes()).hexdigest()[:12]}"
    dst = peer_file(key, peer)
    if not dst.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        try:
            os.link(src, tmp)
        except OSError:  # another file system: a copy
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    return key


def peer_file(key: str, peer: Peer) -> Path:
    return peers_root() / key / peer.file


def availability(key: str, peer: Peer) -> str | None:
    """None when the peer can run here, else the reason it cannot (the row's 'unavailable' detail)."""
    if not peer_file(key, peer).is_file():
        return f"no {peer.file} for {key} ({SETUP_HINT})"
    if peer.engine == "lce":
        if not lce_python().exists():
            return f"no LCE environment ({SETUP_HINT})"
    elif importlib.util.find_spec(_MODULE[peer.engine][0]) is None:
        return f"{_MODULE[peer.engine][0]} not installed ({_MODULE[peer.engine][1]})"
    return None


def lce_python() -> Path:
    return cache_root() / "venv-lce" / "bin" / "python"


def python_for(peer: Peer) -> str:
    return str(lce_python()) if peer.engine == "lce" else sys.executable


def time_peer(key: str, peer: Peer, *, threads: int, warmup: int, repeat: int, min_time_ms: float,
              input_npy: Path | None = None, timeout_s: float = 900) -> dict:
    """Run the engine in its own process; returns time_engine.py's JSON (latencies_ms, version, ...)."""
    cmd = [python_for(peer), str(TIME_ENGINE), "--engine", peer.engine, "--model", str(peer_file(key, peer)),
           "--threads", str(threads), "--warmup", str(warmup), "--repeat", str(repeat),
           "--min-time-ms", str(min_time_ms)]
    if input_npy is not None and peer.family == "float":
        cmd += ["--input", str(input_npy)]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env={**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        raise RuntimeFailure(f"{peer.label}: did not finish within {timeout_s:.0f} s") from e
    if proc.returncode != 0:
        raise RuntimeFailure(f"{peer.label} on {peer_file(key, peer)} failed (exit {proc.returncode}): "
                             f"{proc.stderr.strip()[-1500:]}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as e:
        raise RuntimeFailure(f"{peer.label}: no JSON from {TIME_ENGINE.name}: {proc.stdout[-500:]}") from e


def emulate_unavailable(peer: Peer, threads: int = 1) -> str | None:
    """Which peers have aarch64 builds we count under qemu: LiteRT only (its aarch64 wheel)."""
    if peer.engine == "lce":
        return "larq-compute-engine has no aarch64 wheel"
    if peer.engine == "ncnn":
        return None
    if peer.engine == "onnxruntime":
        return "not counted under qemu (LiteRT is the A53 reference)"
    if peer.engine == "litert" and threads > 1:
        return "counted with 1 thread only (XNNPACK's pthreadpool spin-waits are not told apart from work)"
    return None


def count_peer(key: str, peer: Peer, *, cpu: str, threads: int = 1):
    from edge_sdk.qemu.runner import count_litert, count_ncnn

    if peer.engine == "ncnn":
        return count_ncnn(peer_file(key, peer), threads, cpu=cpu)
    return count_litert(peer_file(key, peer), cpu=cpu)


def peer_rows(key: str, run: PeerRun) -> list:
    """One row per (peer, threads): timed (first round), counted under qemu, or why it is unavailable."""
    from edge_sdk.bench.rows import UNAVAILABLE, BenchRow

    rows = []
    for peer in peers_for(key):
        origin, why = None, None
        if peer.engine == "ncnn":
            try:
                origin = prepare_ncnn(key, peer, run.ncnn_models)
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                why = f"no ncnn network definition for {key}: {e}"
        for t in run.threads:
            row = BenchRow(peer.engine, peer.variant, peer.family, t)
            why = why or availability(key, peer)
            if why is None and run.emulate_cpu:
                why = emulate_unavailable(peer, t)
            elif why is None and run.target.arch != os.uname().machine:
                why = f"peers run on this {os.uname().machine} host; use --target host or --emulate {run.target.name}"
            if why:
                row.status, row.detail = UNAVAILABLE, why
            else:
                _measure(row, key, peer, run, origin)
            rows.append(row)
    return rows


def _measure(row, key: str, peer: Peer, run: PeerRun, origin: str | None) -> None:
    from edge_sdk.bench.rows import FAILED, failure

    t = row.threads
    run.say(f"peer {peer.label}: {'counting' if run.emulate_cpu else 'timing'} with {t} thread(s)")
    try:
        if run.emulate_cpu:
            c = count_peer(key, peer, cpu=run.emulate_cpu, threads=t)
            row.instructions, row.counts = c.per_inference, c.counts
            row.set_modelled(c.modelled)  # with bench's timing session: the A53 timing model's figures
            row.detail = origin or ""
        else:
            js = time_peer(key, peer, threads=t, warmup=run.warmup, repeat=run.repeat,
                           min_time_ms=run.min_time_ms, input_npy=run.input_npy)
            row.latencies = list(js["latencies_ms"])
            row.detail = f"{peer.engine} {js.get('version', '?')}" + (f"; {origin}" if origin else "")
        row.package = str(peer_file(key, peer))
    except (EdgeError, RuntimeError, ValueError, OSError) as e:
        row.status, row.detail = FAILED, failure(e)
