"""The results store's modelled-time columns (issue 12): measurements.modelled_ms, modelled_cycles, model_version.

A run's per-layer modelled split (timing/per_layer.py; the demo and bench --emulate pass it as
extra["per_layer_modelled_ms"]) is kept in runs.extra, checked here when it is written (check_per_layer).

They carry the Cortex-A53 timing model's figure for a run where one is known (edge_sdk/timing/package_figures.py; on
an emulated Pi the latency columns are then the emulator's wall time, not a Pi's). They were added
within schema 1, so nothing older misreads them: an older edge-sdk names the columns it writes and
reads and ignores these. A file written before them gets them on its first read-write open
(ALTER TABLE, one transaction); opened read-only it reads them as NULL (the store's query).
"""
from __future__ import annotations

import math

from edge_sdk.errors import ConfigError, UsageError

ADDED = {"modelled_ms": "REAL", "modelled_cycles": "REAL", "model_version": "TEXT"}
COLUMNS = tuple(ADDED)  # also in store._SCHEMA for a new file


def add_columns(store) -> None:
    """The columns a read-write file from before them lacks, added in one transaction (none read-only:
    the store's query reads them as NULL there)."""
    if store.read_only:
        return
    if all(c in _have(store._db) for c in ADDED):
        return
    with store._transaction() as tx:  # looked at again inside: another process may have added them meanwhile
        for col in [c for c in ADDED if c not in _have(tx)]:
            tx.execute(f"ALTER TABLE measurements ADD COLUMN {col} {ADDED[col]}")


def _have(db) -> set[str]:
    return {r[1] for r in db.execute("PRAGMA table_info(measurements)")}


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf


def fields(run_json: dict, extra: dict) -> tuple:
    """(modelled_ms, modelled_cycles, model_version) from `extra` or the run JSON (bench --emulate's
    field names); all None when the run has no modelled figure. A figure that is not a positive
    number is a UsageError naming the key."""
    check_per_layer(extra.get("per_layer_modelled_ms"))
    ms, cycles, version = (extra.get(k, run_json.get(k)) for k in ADDED)
    if ms is None:
        return None, None, None
    for key, value in (("modelled_ms", ms), ("modelled_cycles", cycles)):
        if value is not None and not _positive(value):
            raise UsageError(f"run JSON {key}: {value!r} is not a positive number")
    return float(ms), None if cycles is None else float(cycles), None if version is None else str(version)


def check(d: dict, path, where: str) -> None:
    """A stored modelled_ms must be a positive time (or NULL): a damaged file is a ConfigError."""
    if d.get("modelled_ms") is not None and not _positive(d["modelled_ms"]):
        raise ConfigError(f"{path}: {where}: modelled_ms is {d['modelled_ms']!r}, not a positive time",
                          hint="the file was edited by hand or damaged; remove that run")


def check_per_layer(rows) -> None:
    """None, or [{"name": str, "op"?, "ms", "conv_ms", "glue_ms": numbers >= 0}]; else a UsageError naming the row."""
    if rows is None:
        return
    if not isinstance(rows, list):
        raise UsageError(f"per_layer_modelled_ms: expected a list of layer rows, got {type(rows).__name__}")
    for i, r in enumerate(rows):
        bad = not isinstance(r, dict) or not isinstance(r.get("name"), str) or any(
            not isinstance(r.get(k), (int, float)) or isinstance(r.get(k), bool) or not 0 <= r[k] < math.inf
            for k in ("ms", "conv_ms", "glue_ms"))
        if bad:
            raise UsageError(f"per_layer_modelled_ms[{i}]: expected {{'name', 'ms', 'conv_ms', 'glue_ms'}} with "
                             f"times >= 0, got {r!r}"[:300])
