"""edge-sdk bench: our variants and the peer engines, side by side, in one run.

Lifecycle: Model -> one cached .edgepkg per variant (compile_model) -> timed runs with the runtime
bundle (or instruction counts under qemu with --emulate) -> one BenchRow per (engine, variant,
threads) -> BenchResult: a rich table, JSON, and rows in the results store.

Measured like a measurement: warm-up runs, then repeats until a minimum time has passed (at least
--repeat), median and p10/p90; every row has a status: ok, wrong output (the package's golden check
failed), failed (with the error), unavailable (variant not landed, peer not set up). Threads, CPU,
clock, temperature, load and versions go with every figure (sysinfo.py).

Packages are cached under $EDGE_SDK_CACHE/bench/, keyed by the model (source, options, file
sha256), variant, target, edge-sdk and TVM versions, and a digest of edge_sdk/compiler's sources
(so a teammate's faster kernel is rebuilt, not served stale).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk import __version__
from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import EdgeError, UsageError
from edge_sdk.runtime.bundle import cache_root

OK, WRONG, FAILED, UNAVAILABLE = "ok", "wrong output", "failed", "unavailable"
SCHEMA = "edge-sdk.bench/1"
_COMPILER_DIR = Path(__file__).resolve().parents[1] / "compiler"


@dataclass
class BenchRow:
    engine: str  # "edge-sdk" or a peer engine
    variant: str
    family: str  # float / int8 / bitserial (ours), float / int8 / binary (peers)
    threads: int
    status: str = OK
    detail: str = ""
    latency_ms: dict | None = None  # median, p10, p90, min, max
    repeats: int = 0
    instructions: float | None = None  # per inference, under --emulate
    counts: dict | None = None  # raw qemu counts per K
    memory: dict | None = None  # under --emulate --memory: misses, DRAM bytes, modelled cycles (emulate.py)
    golden: dict | None = None
    package: str | None = None
    cached: bool | None = None
    speedup_vs_float32: float | None = None  # our float32 / this (>1: faster)
    vs_best_peer: float | None = None  # this / best peer of the same family (<=1: at or below)
    best_peer: str | None = None
    run_json: dict | None = field(default=None, repr=False)
    manifest: dict | None = field(default=None, repr=False)
    latencies: list[float] = field(default_factory=list, repr=False)  # all rounds, in ms

    @property
    def ours(self) -> bool:
        return self.engine == "edge-sdk"

    def metric(self) -> float | None:
        if self.status != OK:
            return None
        return self.instructions if self.instructions is not None else (self.latency_ms or {}).get("median")

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("run_json"), d.pop("manifest"), d.pop("latencies")
        return d


@dataclass
class BenchResult:
    model: dict
    target: str
    mode: str  # "latency" or "instructions"
    emulate_cpu: str | None
    options: dict
    system: dict
    rows: list[BenchRow]
    store: dict = field(default_factory=dict)
    device: str | None = None  # a fleet device's name when measured there (device.py), else None: this machine

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "model": self.model, "target": self.target, "device": self.device, "mode": self.mode,
                "emulate_cpu": self.emulate_cpu, "options": self.options, "system": self.system,
                "rows": [r.to_json() for r in self.rows], "store": self.store}


def _stats(lat: list[float]) -> dict:
    a = np.asarray(lat, np.float64)
    return {"median": float(np.median(a)), "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)),
            "min": float(a.min()), "max": float(a.max())}


def _compiler_digest() -> str:
    """The compiler's, model builders' and quantizers' sources and the tuning records compile applies by default (shipped and the user's)."""
    from edge_sdk.tuning.store import records_digest

    h = hashlib.sha256()
    root = _COMPILER_DIR.parent  # models/ and quant/ shape packages too (binarized layouts, stems, goldens)
    for p in sorted(q for d in ("compiler", "models", "quant") for q in (root / d).rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    h.update(b"tuning\0" + records_digest().encode())
    return h.hexdigest()[:16]


def package_key(model, variant, target) -> str:
    """What decides a package's contents; its hash names the cached .edgepkg."""
    import tvm

    src = Path(model.source) if model.source and not model.source.startswith("zoo:") else None
    ident = {"model": model.name, "source": model.source, "options": model.options,
             "file_sha256": hashlib.sha256(src.read_bytes()).hexdigest() if src and src.is_file() else None,
             "variant": variant.name, "target": target.name, "llvm": target.llvm, "edge_sdk": __version__,
             "tvm": tvm.__version__, "compiler": _compiler_digest()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cached_package(model, variant, target, *, seed: int, progress) -> tuple[Path, bool]:
    from edge_sdk.compiler.build import compile_model

    out = cache_root() / "bench" / f"{model.name}-{variant.name}-{target.name}-{package_key(model, variant, target)}.edgepkg"
    if out.is_file():
        return out, True
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.edgepkg")
    try:
        compile_model(model, variant=variant, target=target, out=tmp, seed=seed,
                      progress=lambda m: progress(f"{variant.name}: {m}"))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out, False


def parse_variants(text: str) -> list[str]:
    from edge_sdk.variants import VARIANTS

    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        raise UsageError("--variants: give at least one variant, e.g. float32,int8")
    for n in names:
        if n not in VARIANTS:
            raise UsageError(f"--variants: unknown variant '{n}': {did_you_mean(n, VARIANTS)}")
    return list(dict.fromkeys(names))


def parse_threads(text: str) -> list[int]:
    try:
        threads = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"--threads: expected a comma-separated list of integers, got '{text}'") from None
    if not threads or min(threads) < 1:
        raise UsageError(f"--threads: expected integers >= 1, got '{text}'")
    return list(dict.fromkeys(threads))


def _failure(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".strip()[:2000]


def _qemu_cpu(manifest: dict) -> str | None:
    """The qemu CPU model a package runs under here (None: it runs natively)."""
    if manifest["target"]["arch"] == os.uname().machine:
        return None
    from edge_sdk.targets import get_target

    return get_target(manifest["target"]["name"]).emulate_cpu or "cortex-a53"


def _run_ours(row: BenchRow, pkg_path: Path, *, emulate_cpu: str | None, warmup: int, repeat: int,
              min_time_ms: float, caches=None) -> np.ndarray:
    """Time (or count) one package; fills the row; returns its golden input (for the peers)."""
    from edge_sdk.package import open_package
    from edge_sdk.run import RunResult, golden_check, top_k
    from edge_sdk.runtime.execute import run_compiled

    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        pkg = open_package(pkg_path, Path(tmp) / "pkg")
        m = pkg.manifest
        lib, params, x = pkg.member("model.so"), pkg.member("params.bin"), pkg.golden_input
        if emulate_cpu:
            from edge_sdk.bench.emulate import count_runner, memory_row
            from edge_sdk.targets import get_target

            c = count_runner(lib=lib, params=params, input=x, cpu=emulate_cpu, caches=caches)
            row.instructions, row.counts, out, row.manifest = c.per_inference, c.counts, c.output, m
            row.memory = memory_row(c, target=get_target(m["target"]["name"]))
        else:
            res = run_compiled(lib=lib, params=params, input=x, arch=m["target"]["arch"],
                               emulate_cpu=_qemu_cpu(m), threads=row.threads,
                               warmup=warmup, repeat=repeat, min_time_ms=min_time_ms)
            row.latencies, out = list(res.latencies_ms), res.output
            if res.emulated:
                row.detail = "; ".join(d for d in (row.detail, "run under qemu: emulated time, not a Pi's") if d)
            ok, err = golden_check(pkg, out)
            rr = RunResult(package=str(pkg_path), model=m["model"]["name"], variant=m["variant"],
                           target=m["target"]["name"], emulated=res.emulated, threads=row.threads,
                           latencies_ms=res.latencies_ms, load_ms=res.load_ms, golden_ok=ok, golden_max_abs_err=err,
                           top_k=top_k(out, m.get("labels"), 5), output=out)
            row.run_json, row.manifest = rr.to_json() | {"versions": m.get("versions")}, m
        ok, err = golden_check(pkg, out)
        g = m["golden"]
        row.golden = {"ok": ok, "max_abs_err": err, "reference": g["reference"], "rtol": g["rtol"], "atol": g["atol"]}
        if not ok:
            row.status, row.detail = WRONG, f"golden check failed: max abs err {err:.3g} vs {g['reference']}"
        return x


def _more_rounds(rows: list[BenchRow], rounds: int, *, key: str, input_npy: Path | None, warmup: int,
                 min_time_ms: float, say) -> None:
    """Rounds 2..N: every timed row again, in turn, so load from other users hits all rows alike."""
    from edge_sdk.bench import peers as P
    from edge_sdk.package import open_package
    from edge_sdk.runtime.execute import run_compiled

    for i in range(2, rounds + 1):
        for row in rows:
            if row.status != OK or not row.latencies:
                continue
            say(f"round {i}/{rounds}: {row.engine} {row.variant}, {row.threads} thread(s)")
            try:
                if row.ours:
                    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
                        pkg = open_package(Path(row.package), Path(tmp) / "pkg")
                        res = run_compiled(lib=pkg.member("model.so"), params=pkg.member("params.bin"),
                                           input=pkg.golden_input, arch=pkg.manifest["target"]["arch"],
                                           emulate_cpu=_qemu_cpu(pkg.manifest),
                                           threads=row.threads, warmup=warmup, repeat=1, min_time_ms=min_time_ms)
                    row.latencies += res.latencies_ms
                else:
                    peer = next(p for p in P.PEERS if (p.engine, p.variant) == (row.engine, row.variant))
                    js = P.time_peer(key, peer, threads=row.threads, warmup=warmup, repeat=1,
                                     min_time_ms=min_time_ms, input_npy=input_npy)
                    row.latencies += js["latencies_ms"]
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                row.status, row.detail = FAILED, f"round {i}: {_failure(e)}"


def _finish_latencies(rows: list[BenchRow]) -> None:
    for row in rows:
        if row.latencies:
            row.latency_ms, row.repeats = _stats(row.latencies), len(row.latencies)
            if row.run_json:
                row.run_json.update(latency_ms=row.latency_ms, repeats=row.repeats)


def _ratios(rows: list[BenchRow]) -> None:
    # The goals: w1a1 against binary peers (LCE), other bitserial variants against float peers.
    compare = {"float": ("float",), "int8": ("int8",), "bitserial": ("float",), "binary": ("binary",)}
    for r in rows:
        m = r.metric()
        if m is None:
            continue
        f32 = [x.metric() for x in rows if x.ours and x.variant == "float32" and x.threads == r.threads]
        if f32 and f32[0]:
            r.speedup_vs_float32 = f32[0] / m
        if not r.ours:
            continue
        for fam in ("binary", "float") if r.variant == "w1a1" else compare.get(r.family, ()):
            peers = [p for p in rows if not p.ours and p.family == fam and p.threads == r.threads and p.metric()]
            if peers:
                best = min(peers, key=lambda p: p.metric())
                r.vs_best_peer, r.best_peer = m / best.metric(), f"{best.engine} {best.variant}"
                break


def _int8_source(model, variant):
    """A zoo model's int8 row runs the peers folder's converter-written int8 .tflite when there is one (the
    file LiteRT int8 runs: both rows then compare kernels on one model); else the backend's PTQ."""
    from edge_sdk.bench import peers as peers_mod

    if variant.family != "int8" or not str(model.source or "").startswith("zoo:") or model.options.get("calibrate"):
        return model, ""
    peer = next(p for p in peers_mod.PEERS if p.engine == "litert" and p.family == "int8")
    path = peers_mod.peer_file(peers_mod.peer_key(model), peer)
    if not path.is_file():
        return model, ""
    from edge_sdk.models.importers import load_model_file

    return load_model_file(path, family="int8"), f"model: {path.name} from the peers folder (same file as LiteRT int8)"


def run_bench(model, *, variants: list[str], target: str = "host", threads: list[int] = (1,),
              peers: bool = False, emulate: str | None = None, memory: bool = False, warmup: int = 3, repeat: int = 5,
              min_time_ms: float = 1000.0, rounds: int = 3, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> BenchResult:
    """Compile (or reuse), run and compare; every failure becomes a row status, never an exception.

    Timing is split into `rounds` passes over all rows (each min_time_ms / rounds long), so that
    a neighbour's load on a shared machine lands on every row alike, as in tools/bench_float.py.
    `memory` (with emulate): the same qemu runs also simulate the device's caches (emulate.py).
    """
    from edge_sdk.bench import peers as peers_mod
    from edge_sdk.bench.sysinfo import system_info
    from edge_sdk.targets import get_target
    from edge_sdk.variants import VARIANTS

    say = progress or (lambda _m: None)
    if memory and not emulate:
        raise UsageError("--memory simulates the device's caches under qemu: it needs --emulate (e.g. --emulate pi3)")
    if emulate:
        if target not in ("host", emulate):
            raise UsageError(f"--emulate {emulate} counts {emulate} builds; it cannot be combined with --target {target}")
        if list(threads) != [1]:
            raise UsageError("--emulate counts instructions with 1 thread; drop --threads or use --threads 1")
        target = emulate
    tgt = get_target(target)
    emulate_cpu = (tgt.emulate_cpu or "cortex-a53") if emulate else None
    if emulate and tgt.arch != "aarch64":
        raise UsageError(f"--emulate needs an aarch64 target, not '{target}' ({tgt.arch})")
    rounds = 1 if emulate else max(1, rounds)
    from edge_sdk.bench import emulate as E

    caches = E.caches_for(emulate_cpu) if memory else None
    slice_ms = min_time_ms / rounds
    rows: list[BenchRow] = []
    inputs: list[np.ndarray] = []
    for name in variants:
        v = VARIANTS[name]
        if not v.available:
            rows += [BenchRow("edge-sdk", name, v.family, t, UNAVAILABLE, "variant not implemented yet in this version")
                     for t in threads]
            continue
        note = ""
        try:
            src, note = _int8_source(model, v)
            say(f"{name}: compiling for {tgt.name} (or reusing the cached package)")
            pkg, cached = cached_package(src, v, tgt, seed=seed, progress=say)
        except (EdgeError, RuntimeError, ValueError, OSError) as e:
            rows += [BenchRow("edge-sdk", name, v.family, t, FAILED, f"compile: {_failure(e)}") for t in threads]
            continue
        for t in threads:
            row = BenchRow("edge-sdk", name, v.family, t, package=str(pkg), cached=cached, detail=note)
            say(f"{name}: {'counting instructions' if emulate else 'timing'} with {t} thread(s)")
            try:
                x = _run_ours(row, pkg, emulate_cpu=emulate_cpu, warmup=warmup, repeat=repeat, min_time_ms=slice_ms,
                              caches=caches)
                inputs += [x] if x.dtype == np.float32 else []
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                row.status, row.detail = FAILED, _failure(e)
            rows.append(row)
    key = peers_mod.peer_key(model)
    with tempfile.TemporaryDirectory(prefix="edge-bench-in-") as tmp:
        npy = None
        if inputs:
            npy = Path(tmp) / "input.npy"
            np.save(npy, inputs[0], allow_pickle=False)
        if peers and caches is not None:
            rows += E.peer_rows_with_memory(peers_mod, caches, key, threads, tgt, emulate_cpu, npy, say=say)
        elif peers:
            rows += peers_mod.peer_rows(key, threads, tgt, emulate_cpu, npy, warmup=warmup, repeat=repeat,
                                        min_time_ms=slice_ms, say=say)
        _more_rounds(rows, rounds, key=key, input_npy=npy, warmup=warmup, min_time_ms=slice_ms, say=say)
    _finish_latencies(rows)
    _ratios(rows)
    return BenchResult(model={"name": model.name, "source": model.source, "options": model.options, "peer_key": key},
                       target=tgt.name, mode="instructions" if emulate else "latency", emulate_cpu=emulate_cpu,
                       options={"variants": list(variants), "threads": list(threads), "peers": peers,
                                "memory": memory, "warmup": warmup,
                                "repeat": repeat, "min_time_ms": min_time_ms, "rounds": rounds, "seed": seed},
                       system=system_info(), rows=rows)
