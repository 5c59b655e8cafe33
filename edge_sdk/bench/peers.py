"""The engines users pick instead of us, timed in the same bench run: LiteRT, ONNX Runtime, LCE.

Why subprocesses: each engine runs in the environment it needs (LiteRT and ONNX Runtime in this
venv; Larq Compute Engine in $EDGE_SDK_CACHE/venv-lce, whose TensorFlow needs numpy<2 and
protobuf<3.21), with its own thread pool, through one small script (tools/peers/time_engine.py)
that prints JSON. Peer models are converter-written files of the same layout with random weights,
made by tools/make_peer_models.py under $EDGE_SDK_CACHE/peers/<key>/ (tools/setup_peers.sh does it all).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.errors import EdgeError, RuntimeFailure
from edge_sdk.runtime.bundle import cache_root

TIME_ENGINE = Path(__file__).resolve().parents[2] / "tools" / "peers" / "time_engine.py"
SETUP_HINT = "run tools/setup_peers.sh"


@dataclass(frozen=True)
class Peer:
    engine: str  # "litert", "onnxruntime", "lce"
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
)
_MODULE = {"litert": ("ai_edge_litert", "pip install ai-edge-litert==2.3.0"),
           "onnxruntime": ("onnxruntime", "pip install -e '.[test]' (onnxruntime)")}


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


def peers_for(key: str) -> list[Peer]:
    name = zoo_name(key)
    return [p for p in PEERS if p.models is None or name in p.models]


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


def emulate_unavailable(peer: Peer) -> str | None:
    """Which peers have aarch64 builds we count under qemu: LiteRT only (its aarch64 wheel)."""
    if peer.engine == "lce":
        return "larq-compute-engine has no aarch64 wheel"
    if peer.engine == "onnxruntime":
        return "not counted under qemu (LiteRT is the A53 reference)"
    return None


def count_peer(key: str, peer: Peer, *, cpu: str):
    from edge_sdk.bench.emulate import count_litert

    return count_litert(peer_file(key, peer), cpu=cpu)


def peer_rows(key, threads, tgt, emulate_cpu, npy, *, warmup, repeat, min_time_ms, say) -> list[BenchRow]:
    """One row per (peer, threads): timed (first round), counted under qemu, or why it is unavailable."""
    from edge_sdk.bench.bench import FAILED, UNAVAILABLE, BenchRow, _failure

    rows = []
    for peer in peers_for(key):
        for t in threads:
            row = BenchRow(peer.engine, peer.variant, peer.family, t)
            why = availability(key, peer)
            if why is None and emulate_cpu:
                why = emulate_unavailable(peer)
            elif why is None and tgt.arch != os.uname().machine:
                why = f"peers run on this {os.uname().machine} host; use --target host or --emulate {tgt.name}"
            if why:
                row.status, row.detail = UNAVAILABLE, why
                rows.append(row)
                continue
            say(f"peer {peer.label}: {'counting' if emulate_cpu else 'timing'} with {t} thread(s)")
            try:
                if emulate_cpu:
                    c = count_peer(key, peer, cpu=emulate_cpu)
                    row.instructions, row.counts = c.per_inference, c.counts
                else:
                    js = time_peer(key, peer, threads=t, warmup=warmup, repeat=repeat,
                                     min_time_ms=min_time_ms, input_npy=npy)
                    row.latencies = list(js["latencies_ms"])
                    row.detail = f"{peer.engine} {js.get('version', '?')}"
                row.package = str(peer_file(key, peer))
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                row.status, row.detail = FAILED, _failure(e)
            rows.append(row)
    return rows
