"""The engines users pick instead of us, timed in the same bench run: LiteRT, ONNX Runtime, LCE, ncnn.

One module per engine in this folder (litert.py, onnxruntime.py, lce.py, ncnn.py): its rows (variant,
family, file), how to tell it is installed, whether and how it is counted under qemu, and `load`, which
runs the model in the engine's own Python. A new engine is one such module, listed in ENGINE_MODULES.

Why subprocesses: each engine runs in the environment it needs (LiteRT and ONNX Runtime in this
venv; Larq Compute Engine in $EDGE_SDK_CACHE/venv-lce, whose TensorFlow needs numpy<2 and
protobuf<3.21), with its own thread pool, through one small script (time_engine.py, package code, run
by file path) that prints JSON. Peer models are converter-written files of the same layout with random
weights, made by tools/make_peer_models.py under $EDGE_SDK_CACHE/peers/<key>/ (tools/setup_peers.sh).

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

from edge_sdk.bench.peers import lce, litert, ncnn, onnxruntime, time_engine
from edge_sdk.errors import EdgeError, RuntimeFailure
from edge_sdk.runtime.bundle import cache_root

TIME_ENGINE = Path(time_engine.__file__).resolve()  # run by file path in the engine's Python
ENGINE_MODULES = {m.ENGINE: m for m in (litert, onnxruntime, lce, ncnn)}  # the row order of every bench
NCNN_NAMES, NCNN_SHIPPED = ncnn.NCNN_NAMES, ncnn.SHIPPED
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


PEERS = tuple(Peer(name, *row) for name, m in ENGINE_MODULES.items() for row in m.PEERS)


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


def prepare_peer(key: str, peer: Peer, ncnn_models: Path | None = None) -> str | None:
    """For an engine that writes the file its row runs (ncnn: the network definition, to peers/<key>/<peer.file>):
    write it and return its origin (None: there is none, or the engine runs the file as it is)."""
    m = ENGINE_MODULES[peer.engine]
    return m.prepare(parse_key(key), peer.variant, peer_file(key, peer), ncnn_models) if hasattr(m, "prepare") else None


prepare_ncnn = prepare_peer


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
    m = ENGINE_MODULES[peer.engine]
    if hasattr(m, "missing"):  # an engine in its own environment says what is missing itself
        return m.missing(SETUP_HINT)
    if importlib.util.find_spec(m.MODULE) is None:
        return f"{m.MODULE} not installed ({m.INSTALL})"
    return None


def lce_python() -> Path:
    return lce.python()


def python_for(peer: Peer) -> str:
    m = ENGINE_MODULES[peer.engine]
    return str(m.python()) if hasattr(m, "python") else sys.executable


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
    """Which peers we count under qemu (aarch64 wheels in the guest Python: LiteRT, ncnn): None, else why not."""
    return ENGINE_MODULES[peer.engine].emulate_unavailable(threads)


def count_peer(key: str, peer: Peer, *, cpu: str, threads: int = 1):
    return ENGINE_MODULES[peer.engine].count(peer_file(key, peer), threads=threads, cpu=cpu)


def peer_rows(key: str, run: PeerRun) -> list:
    """One row per (peer, threads): timed (first round), counted under qemu, or why it is unavailable."""
    from edge_sdk.bench.rows import UNAVAILABLE, BenchRow

    rows = []
    for peer in peers_for(key):
        origin, why = None, None
        if hasattr(ENGINE_MODULES[peer.engine], "prepare"):  # ncnn: the network definition the row runs
            try:
                origin = prepare_peer(key, peer, run.ncnn_models)
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
