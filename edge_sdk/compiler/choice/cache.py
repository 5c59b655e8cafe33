"""The choice cache: one JSON file per (family, workload, candidates' code, timing model, SDK, target).

    $EDGE_SDK_CACHE/choice/<target>/<key>.json   {"schedule", "modelled_cycles", "default_cycles", "candidates"}

The key hashes every candidate's PrimFunc (tvm structural hash), so a changed kernel body, a new
candidate or a new timing model (modelled.model_version: a digest of edge_sdk/timing and the plugin)
is chosen again, never served from an older decision. Writes are atomic (temp file + rename).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def root() -> Path:
    from edge_sdk.runtime.bundle import cache_root

    return cache_root() / "choice"


def key(site, hashes: dict[str, str], target) -> str:
    from edge_sdk import __version__
    from edge_sdk.timing.package_figures import model_version

    text = json.dumps({"family": site.family, "workload": site.workload, "code": hashes, "timing": model_version(),
                       "edge_sdk": __version__, "target": target.name}, sort_keys=True, default=str)
    return f"{target.name}/{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def load(k: str) -> dict | None:
    p = root() / f"{k}.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("schedule"), str) else None


def store(k: str, decision: dict) -> None:
    p = root() / f"{k}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(decision, sort_keys=True, default=float))
    os.replace(tmp, p)
