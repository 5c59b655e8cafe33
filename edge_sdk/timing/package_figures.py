"""Modelled Raspberry Pi time of a Pi package, computed once per package content and thread count.

    figures = modelled_package(pkg_path, threads=1)
    figures["modelled_ms"], figures["modelled_cycles"], figures["model_version"], figures["target"], ...
    figures["per_layer_modelled_ms"]       the model's price of each layer's functions (timing/per_layer.py)

The figures come from the Cortex-A53 timing model (edge_sdk/timing, api.model_package: the package's
code under qemu with libtiming.so, one inference priced by the A53's pipeline and cache rules at the
target's clock). That takes seconds to minutes, and the answer depends only on the package's bytes,
the target, the thread count and the model itself, so it is kept in

    $EDGE_SDK_CACHE/timing/packages/<package sha256>-<target>-t<threads>-<model version>.json

and read back the next time (the demo runs the same cached packages again and again). The model
version is a digest of the model's sources (edge_sdk/timing/*.py, the qemu runner edge_sdk/qemu/*.py
and the plugin's timing.c): a changed model is recomputed, never served from an older one's figures. These are modelled Pi
figures, not measurements; every caller labels them so.
"""
from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path

from edge_sdk.labels import modelled_label
from edge_sdk.qemu import TIMING_PLUGIN

_TIMING = Path(__file__).resolve().parent  # edge_sdk/timing
_QEMU = _TIMING.parent / "qemu"  # the runner the profiles come from, and the plugin's source
KEPT = ("modelled_ms", "modelled_cycles", "clock_ghz", "threads", "target", "instructions", "cycles_split",
        "misses", "dram_bytes", "functions")  # what the cache keeps of api.model_package's dict
TOP_FUNCTIONS = 12  # of every function priced, the cache keeps this many (the per-layer split holds the rest)


@functools.cache
def model_version() -> str:
    """'a53-' + a digest of the timing model's sources: timing/*.py, the qemu runner (qemu/*.py) and the plugin's C."""
    h = hashlib.sha256()
    for p in sorted(_TIMING.glob("*.py")) + sorted(_QEMU.glob("*.py")) + [TIMING_PLUGIN]:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return "a53-" + h.hexdigest()[:12]


def cache_dir() -> Path:
    from edge_sdk.runtime.bundle import cache_root

    return cache_root() / "timing" / "packages"


def cache_path(sha256: str, *, target: str, threads: int) -> Path:
    return cache_dir() / f"{sha256}-{target}-t{threads}-{model_version()}.json"


def modelled_package(pkg_path: Path, *, threads: int = 1, sha256: str | None = None) -> tuple[dict, bool]:
    """(the timing model's figures for one inference of the package at its own target, cached?).

    `sha256`: the package file's, when the caller has it (else it is hashed here). Raises what the
    model raises (MissingDependency without llvm-mc-14 or the qemu plugins, RuntimeFailure, ...).
    """
    from edge_sdk.package import read_manifest, sha256_file
    from edge_sdk.results.store import atomic_write

    pkg_path = Path(pkg_path)
    sha = sha256 or sha256_file(pkg_path)
    manifest = read_manifest(pkg_path)
    target = manifest["target"]["name"]
    path = cache_path(sha, target=target, threads=threads)
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(got, dict) and isinstance(got.get("modelled_ms"), (int, float)) and got["modelled_ms"] > 0:
            return got, True
    except (OSError, ValueError):
        pass  # not cached yet (or a damaged entry): compute it again
    from edge_sdk.timing.api import model_package
    from edge_sdk.timing.per_layer import ALL_FUNCTIONS, layer_split

    full = model_package(pkg_path, target, threads, layers=ALL_FUNCTIONS)
    figures = {k: full[k] for k in KEPT if k in full} | {
        "model_version": model_version(), "package_sha256": sha, "what": "modelled Pi time (edge_sdk.timing), "
        "not a measurement", "functions": full.get("functions", [])[:TOP_FUNCTIONS],
        "per_layer_modelled_ms": layer_split(full, manifest.get("layers") or [])}
    with atomic_write(path) as f:
        json.dump(figures, f, indent=1, sort_keys=True)
    return figures, False


def model_all(paths: list[Path], *, threads: int, say, notes: list[str]) -> dict[Path, dict]:
    """package -> its modelled figures at `threads` (modelled_package, so cached); a package the model
    cannot price (no llvm-mc-14 or qemu plugins, a failed run) gets a note and no entry."""
    from edge_sdk.errors import EdgeError

    out: dict[Path, dict] = {}
    t1 = time.monotonic()
    for pkg in paths:
        try:
            out[pkg], cached = modelled_package(pkg, threads=threads)
        except (EdgeError, ValueError) as e:  # ValueError: a libtiming file the model could not parse
            notes.append(f"{pkg.name}: no modelled Pi time ({type(e).__name__}: {str(e).strip()[:300]}); "
                         "its speedup is not shown")
            say(f"note: {notes[-1]}")
            continue
        fig = out[pkg]
        say(f"{pkg.name}: {fig['modelled_ms']:.1f} {modelled_label(fig['target'])} at {threads} thread(s)"
            f"{' (cached)' if cached else ''}")
    if paths:
        say(f"timing model for {len(paths)} packages: {time.monotonic() - t1:.0f} s")
    return out
