"""edge-sdk bench: our variants and the peer engines, side by side, in one run.

Lifecycle: Model -> one cached .edgepkg per variant (compiler/cache.py) -> timed runs with the runtime
bundle (or instruction counts under qemu with --emulate) -> one BenchRow per (engine, variant,
threads) -> BenchResult: a rich table, JSON, and rows in the results store.

Measured like a measurement: warm-up runs, then repeats until a minimum time has passed (at least
--repeat), median and p10/p90; every row has a status (rows.py): ok, wrong output (the package's golden
check failed), failed (with the error), unavailable (variant not landed, peer not set up). Threads, CPU,
clock, temperature, load and versions go with every figure (sysinfo.py).

Packages are cached under $EDGE_SDK_CACHE/bench/ by compiler/cache.py, keyed on everything compile
depends on (model, variant, target, seed, versions, the compiler's sources, the tuning records).
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk._suggest import did_you_mean
from edge_sdk.bench.rows import (FAILED, OK, SCHEMA, UNAVAILABLE, WRONG, BenchResult, BenchRow, failure,
                                 finish_latencies, ratios)
from edge_sdk.compiler.cache import cached_package
from edge_sdk.errors import EdgeError, UsageError
from edge_sdk.runtime.bundle import cache_root

__all__ = ["FAILED", "OK", "SCHEMA", "UNAVAILABLE", "WRONG", "BenchOptions", "BenchResult", "BenchRow", "Built",
           "cached_package", "compile_all", "package_folder", "parse_threads", "parse_variants", "run_bench"]


def package_folder() -> Path:
    """Where bench (here and on a device) keeps its compiled packages: $EDGE_SDK_CACHE/bench."""
    return cache_root() / "bench"


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


def _qemu_cpu(manifest: dict) -> str | None:
    """The qemu CPU model a package runs under here (None: it runs natively)."""
    if manifest["target"]["arch"] == os.uname().machine:
        return None
    from edge_sdk.targets import get_target

    return get_target(manifest["target"]["name"]).qemu_cpu()


def _run_ours(row: BenchRow, pkg_path: Path, *, emulate_cpu: str | None, warmup: int, repeat: int,
              min_time_ms: float, caches=None) -> np.ndarray:
    """Time (or count) one package; fills the row; returns its golden input (for the peers)."""
    from edge_sdk.package import open_package
    from edge_sdk.runtime.result import RunResult, golden_check, head_output, top_k
    from edge_sdk.runtime.execute import LocalRun, run_compiled

    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        pkg = open_package(pkg_path, Path(tmp) / "pkg")
        m = pkg.manifest
        lib, params, x = pkg.member("model.so"), pkg.member("params.bin"), pkg.golden_input
        if emulate_cpu:
            from edge_sdk.qemu.runner import count_runner
            from edge_sdk.timing.proxy import memory_row
            from edge_sdk.targets import get_target

            c = count_runner(lib=lib, params=params, input=x, cpu=emulate_cpu, caches=caches, threads=row.threads)
            row.instructions, row.counts, out, row.manifest = c.per_inference, c.counts, c.output, m
            row.memory = memory_row(c, target=get_target(m["target"]["name"]))
            row.set_modelled(c.modelled)  # the A53 timing model's figures (timing_session in run_bench)
        else:
            res = run_compiled(lib=lib, params=params, input=x, arch=m["target"]["arch"], emulate_cpu=_qemu_cpu(m),
                               how=LocalRun(threads=row.threads, warmup=warmup, repeat=repeat, min_time_ms=min_time_ms))
            row.latencies, out = list(res.latencies_ms), res.output
            if res.emulated:
                row.detail = "; ".join(d for d in (row.detail, "run under qemu: emulated time, not a Pi's") if d)
            ok, err = golden_check(pkg, out)
            rr = RunResult(package=str(pkg_path), model=m["model"]["name"], variant=m["variant"],
                           target=m["target"]["name"], emulated=res.emulated, threads=row.threads,
                           latencies_ms=res.latencies_ms, load_ms=res.load_ms, golden_ok=ok, golden_max_abs_err=err,
                           top_k=top_k(head_output(out, m), m.get("labels"), 5), output=out)
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
    from edge_sdk.runtime.execute import LocalRun, run_compiled

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
                                           how=LocalRun(threads=row.threads, warmup=warmup, repeat=1,
                                                        min_time_ms=min_time_ms))
                    row.latencies += res.latencies_ms
                else:
                    peer = next(p for p in P.PEERS if (p.engine, p.variant) == (row.engine, row.variant))
                    js = P.time_peer(key, peer, threads=row.threads, warmup=warmup, repeat=1,
                                     min_time_ms=min_time_ms, input_npy=input_npy)
                    row.latencies += js["latencies_ms"]
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                row.status, row.detail = FAILED, f"round {i}: {failure(e)}"


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


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What run_bench measures (variants, target, threads, peers, --emulate/--memory) and how long (warm-up,
    repeats, minimum time, rounds). run_bench_device reads variants, threads, warmup, repeat and seed."""

    variants: Sequence[str]
    target: str = "host"
    threads: Sequence[int] = (1,)
    peers: bool = False
    emulate: str | None = None  # a Pi target: count its instructions under qemu instead of timing
    memory: bool = False  # with emulate: the same qemu runs also simulate the device's caches (emulate.py)
    warmup: int = 3
    repeat: int = 5
    min_time_ms: float = 1000.0
    rounds: int = 3
    seed: int = 0
    ncnn_models: Path | None = None  # benchncnn's .param files by name (--ncnn-models)
    choice: str = "default"  # compile's per-layer schedule choice on Pi targets: on, off, both (a row each), default

    def to_json(self, *, rounds: int) -> dict:
        return {"variants": list(self.variants), "threads": list(self.threads), "peers": self.peers,
                "memory": self.memory, "warmup": self.warmup, "repeat": self.repeat,
                "min_time_ms": self.min_time_ms, "rounds": rounds, "seed": self.seed, "choice": self.choice}


@dataclass(frozen=True)
class _Setup:
    """What the options resolve to: the target built for, the qemu cpu (emulate), caches (memory), rounds."""

    target: object  # targets.Target
    emulate_cpu: str | None
    caches: object | None  # targets.CacheConfig
    rounds: int
    slice_ms: float  # each round's minimum time


def _setup(opts: BenchOptions) -> _Setup:
    from edge_sdk.targets import get_target

    target, emulate = opts.target, opts.emulate
    if opts.memory and not emulate:
        raise UsageError("--memory simulates the device's caches under qemu: it needs --emulate (e.g. --emulate pi3)")
    if opts.memory and list(opts.threads) != [1]:
        raise UsageError("--memory simulates one core's caches: use it with --threads 1 (--emulate alone models "
                         "N threads, the shared L2 included)")
    if emulate:
        if target not in ("host", emulate):
            raise UsageError(f"--emulate {emulate} counts {emulate} builds; it cannot be combined with --target {target}")
        target = emulate
    tgt = get_target(target)
    if emulate and tgt.arch != "aarch64":
        raise UsageError(f"--emulate needs an aarch64 target, not '{target}' ({tgt.arch})")
    emulate_cpu = tgt.qemu_cpu() if emulate else None
    rounds = 1 if emulate else max(1, opts.rounds)
    from edge_sdk.qemu import runner as E

    caches = E.caches_for(emulate_cpu) if opts.memory else None
    return _Setup(tgt, emulate_cpu, caches, rounds, opts.min_time_ms / rounds)


@dataclass(frozen=True)
class Built:
    """One variant's package for the bench's target: compiled now or reused from the cache."""

    variant: object  # variants.Variant
    package: Path
    cached: bool
    note: str  # where the int8 row's model came from, when not the model given
    choose: bool | None = None  # compile's per-layer choice (None: compile's default)


# BenchOptions.choice -> compile's `choose` ("default": compile's own, $EDGE_SDK_CHOICE)
CHOICES = {"on": (True,), "off": (False,), "both": (True, False), "default": (None,)}


def compile_all(model, names: Sequence[str], tgt, *, threads: Sequence[int], seed: int, say,
                where: str = "", choice: str = "default") -> tuple[list[BenchRow], list[Built]]:
    """Each variant's package (cached_package); rows for the variants that are unavailable or do not compile.
    choice "both": each variant twice, with compile's per-layer schedule choice and without (--no-choice)."""
    rows: list[BenchRow] = []
    built: list[Built] = []
    for choose in CHOICES[choice]:
        r, b = _compile_each(model, names, tgt, threads=threads, seed=seed, say=say, where=where, choose=choose)
        rows, built = rows + r, built + b
    return rows, built


def _compile_each(model, names, tgt, *, threads, seed: int, say, where: str, choose) -> tuple[list, list]:
    from edge_sdk.variants import VARIANTS

    rows: list[BenchRow] = []
    built: list[Built] = []
    off = " (--no-choice)" if choose is False else ""
    for name in names:
        v = VARIANTS[name]
        if not v.available:
            rows += [BenchRow("edge-sdk", name, v.family, t, UNAVAILABLE, "variant not implemented yet in this version")
                     for t in threads]
            continue
        try:
            src, note = _int8_source(model, v)
            say(f"{name}: compiling for {tgt.name}{where}{off} (or reusing the cached package)")
            pkg, cached = cached_package(src, v, tgt, folder=package_folder(), seed=seed, progress=say, choose=choose)
        except (EdgeError, RuntimeError, ValueError, OSError) as e:
            rows += [BenchRow("edge-sdk", name, v.family, t, FAILED, f"compile{off}: {failure(e)}") for t in threads]
            continue
        built.append(Built(v, pkg, cached, "; ".join(x for x in (note, "per-layer choice off" if off else "") if x),
                           choose))
    return rows, built


def _time_ours(built: list[Built], opts: BenchOptions, setup: _Setup, say) -> tuple[list[BenchRow], list[np.ndarray]]:
    """A row per (package, threads), timed or counted; the float golden inputs (the float peers' input)."""
    rows, inputs = [], []
    for b in built:
        for t in opts.threads:
            row = BenchRow("edge-sdk", b.variant.name, b.variant.family, t, package=str(b.package), cached=b.cached,
                           detail=b.note)
            say(f"{b.variant.name}: {'counting instructions' if opts.emulate else 'timing'} with {t} thread(s)")
            try:
                x = _run_ours(row, b.package, emulate_cpu=setup.emulate_cpu, warmup=opts.warmup, repeat=opts.repeat,
                              min_time_ms=setup.slice_ms, caches=setup.caches)
                inputs += [x] if x.dtype == np.float32 else []
            except (EdgeError, RuntimeError, ValueError, OSError) as e:
                row.status, row.detail = FAILED, failure(e)
            rows.append(row)
    return rows, inputs


def _peers_and_rounds(rows: list[BenchRow], key: str, inputs: list[np.ndarray], opts: BenchOptions, setup: _Setup,
                      say) -> None:
    """The peer rows (first round), then rounds 2..N over every timed row."""
    from edge_sdk.bench import peers as peers_mod

    with tempfile.TemporaryDirectory(prefix="edge-bench-in-") as tmp:
        npy = None
        if inputs:
            npy = Path(tmp) / "input.npy"
            np.save(npy, inputs[0], allow_pickle=False)
        run = peers_mod.PeerRun(tuple(opts.threads), setup.target, setup.emulate_cpu, npy, warmup=opts.warmup,
                                repeat=opts.repeat, min_time_ms=setup.slice_ms, say=say, ncnn_models=opts.ncnn_models)
        if opts.peers and setup.caches is not None:
            rows += _peer_rows_with_memory(peers_mod, setup.caches, key, run)
        elif opts.peers:
            rows += peers_mod.peer_rows(key, run)
        _more_rounds(rows, setup.rounds, key=key, input_npy=npy, warmup=opts.warmup, min_time_ms=setup.slice_ms,
                     say=say)


def _peer_rows_with_memory(peers_mod, caches, key, run) -> list:
    """bench/peers.py's counted rows (run: its PeerRun), with the cache misses its count_litert and
    count_ncnn calls also measured (the qemu runner's memory_session)."""
    from dataclasses import replace

    from edge_sdk.qemu.runner import memory_session
    from edge_sdk.timing.proxy import memory_row

    with memory_session(caches) as seen:
        rows = peers_mod.peer_rows(key, replace(run, warmup=0, repeat=1, min_time_ms=0))
    for r in rows:
        c = seen.get(str(r.package)) if r.package else None
        r.memory = memory_row(c, target=run.target) if c is not None and r.status == "ok" else None
    return rows


def run_bench(model, *, progress: Callable[[str], None] | None = None, **options) -> BenchResult:
    """Compile (or reuse), run and compare; every failure becomes a row status, never an exception.

    `options` are BenchOptions' fields (variants=[...], target, threads, peers, emulate, memory, ...).
    Timing is split into `rounds` passes over all rows (each min_time_ms / rounds long), so that
    a neighbour's load on a shared machine lands on every row alike, as in tools/bench_float.py.
    """
    from edge_sdk.bench import peers as peers_mod
    from edge_sdk.bench.sysinfo import system_info

    opts = BenchOptions(**options)
    setup = _setup(opts)
    say = progress or (lambda _m: None)
    rows, built = compile_all(model, opts.variants, setup.target, threads=opts.threads, seed=opts.seed, say=say,
                              choice=opts.choice)
    with _modelled(setup):  # under --emulate every counted row also gets the A53 timing model's figures
        timed, inputs = _time_ours(built, opts, setup, say)
        rows = _in_variant_order(rows + timed, opts.variants)
        key = (peers_mod.file_key(model) if opts.peers else None) or peers_mod.peer_key(model)
        _peers_and_rounds(rows, key, inputs, opts, setup, say)
    finish_latencies(rows)
    ratios(rows)
    return BenchResult(model={"name": model.name, "source": model.source, "options": model.options, "peer_key": key},
                       target=setup.target.name, mode="instructions" if opts.emulate else "latency",
                       emulate_cpu=setup.emulate_cpu, options=opts.to_json(rounds=setup.rounds),
                       system=system_info(), rows=rows)


def _modelled(setup: _Setup):
    """Under --emulate: a timing session at the target (edge_sdk/timing/session.py), else nothing."""
    import contextlib

    from edge_sdk.timing.per_layer import ALL_FUNCTIONS
    from edge_sdk.timing.session import timing_session

    # every function priced, so each of our rows can be split by layer (BenchRow.set_modelled)
    return timing_session(target=setup.target, layers=ALL_FUNCTIONS) if setup.emulate_cpu else contextlib.nullcontext()


def _in_variant_order(rows: list[BenchRow], names: Sequence[str]) -> list[BenchRow]:
    """Our rows in the order the variants were asked for (a stable sort: threads keep their order)."""
    order = {n: i for i, n in enumerate(names)}
    return sorted(rows, key=lambda r: order.get(r.variant, len(order)))
