"""The dashboard's data and its one HTML page.

`chart_data(store)` turns the results store into what each chart draws (computed here, in Python, so
it is tested without a browser): latency with spread, speedup over float32, per-layer conv/glue time,
roofline points, accuracy vs latency. `render_page` inlines the CSS and the small SVG-drawing script
from static/ into one HTML document; with `data` it also inlines the data, which makes the file work
offline (the export), else the page fetches `api/data` from the server.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
from importlib import resources
from pathlib import Path

from edge_sdk.results.store import SCHEMA_VERSION, ResultsStore, atomic_write

CONV_OPS = ("conv", "dense", "matmul")  # substrings of an op name that make a layer "conv" (compute), else glue


def layer_kind(op: str | None, name: str = "") -> str:
    """'conv' for the compute layers (conv, depthwise, dense, bitserial conv/dense), 'glue' for the rest."""
    text = (op or name).lower()
    return "conv" if any(s in text for s in CONV_OPS) else "glue"


def setup_label(r: dict) -> str:
    """How a run was made, in words: 'kitchen-pi (pi3, 4 threads, emulated)'."""
    bits = [r["target"], f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}"]
    if r["emulated"]:
        bits.append("emulated")
    return f"{r['device']} ({', '.join(bits)})"


def _run_key(r: dict) -> dict:
    return {"run_id": r["run_id"], "model": r["model"], "variant": r["variant"], "device": r["device"],
            "target": r["target"], "threads": r["threads"], "emulated": r["emulated"], "setup": setup_label(r)}


def _layer_rows(run: dict, pkg: dict | None) -> list[dict]:
    """The run's per-layer times joined to the package's layer table by name (for op, FLOPs, bytes).

    conv_ms/glue_ms: the runner's measured split when the run was profiled (runtime/profile.py: a
    fused conv kernel's epilogue counts as glue), else all of the layer's time goes to its op's kind.
    """
    by_name = {lyr["name"]: lyr for lyr in (pkg or {}).get("layers", [])}
    rows = []
    for t in run["per_layer_ms"]:
        lyr = by_name.get(t["name"], {})
        op = t.get("op") or lyr.get("op")
        kind = layer_kind(op, t["name"])
        measured = t.get("conv_ms") is not None and t.get("glue_ms") is not None
        conv, glue = ((t["conv_ms"], t["glue_ms"]) if measured else
                      (t["ms"], 0.0) if kind == "conv" else (0.0, t["ms"]))
        rows.append({"name": t["name"], "op": op or "", "kind": kind, "ms": t["ms"], "conv_ms": conv,
                     "glue_ms": glue, "split": "measured" if measured else "op",
                     "flops": lyr.get("flops"), "bytes": (lyr["bytes_read"] + lyr["bytes_written"]) if lyr else None,
                     "intensity": lyr.get("intensity")})
    return rows


def _key(r: dict) -> tuple:
    return r["model"], r["variant"], r["device"], r["target"], r["threads"]


def _newest(runs) -> list[dict]:
    """The newest run per (model, variant, device, target, threads), oldest first (the store's `latest`)."""
    best: dict[tuple, dict] = {}
    for r in runs:
        if _key(r) not in best or r["run_id"] > best[_key(r)]["run_id"]:
            best[_key(r)] = r
    return sorted(best.values(), key=lambda r: r["run_id"])


def _select_runs(store: ResultsStore) -> tuple[list[dict], list[dict], list[str]]:
    """(newest runs but eval ones, in table order; newest eval runs (`edge-sdk eval`: the accuracy chart's, so
    they do not hide the latency runs); the variants of both, in the variant table's order)."""
    from edge_sdk.variants import VARIANTS

    every = store.query()
    runs = _newest(r for r in every if r["source"] != "eval")
    evals = _newest(r for r in every if r["source"] == "eval")
    order = {name: i for i, name in enumerate(VARIANTS)}
    runs.sort(key=lambda r: (r["model"], r["device"], r["target"], r["threads"], order.get(r["variant"], 99),
                             r["variant"]))
    variants = sorted({r["variant"] for r in runs + evals}, key=lambda v: (order.get(v, 99), v))
    return runs, evals, variants


def _accuracy_points(evals: list[dict], runs: list[dict]) -> list[dict]:
    """The newest eval run per key, and other runs that recorded an accuracy where no eval did."""
    evaluated = {_key(r) for r in evals}
    return [{**_run_key(r), "median_ms": r["latency_median_ms"], "accuracy": r["accuracy"],
             "top5": r["extra"].get("top5"), "images": r["extra"].get("images"),
             "dataset": r["extra"].get("dataset"), "source": r["source"]}
            for r in [*evals, *(r for r in runs if _key(r) not in evaluated)] if r["accuracy"] is not None]


def chart_data(store: ResultsStore) -> dict:
    """Everything the page draws, from the newest run per model x variant x device x target x threads."""
    from edge_sdk.variants import BASELINE, VARIANTS

    runs, evals, variants = _select_runs(store)
    pkgs = store.packages(sorted({r["package_sha256"] for r in runs}))

    latency = [{**_run_key(r), "median_ms": r["latency_median_ms"], "min_ms": r["latency_min_ms"],
                "max_ms": r["latency_max_ms"], "p10_ms": r["latency_p10_ms"], "p90_ms": r["latency_p90_ms"],
                "repeats": r["repeats"], "golden_ok": r["golden_ok"]} for r in runs]

    floats = {(r["model"], r["device"], r["target"], r["threads"]): r for r in runs if r["variant"] == BASELINE}
    speedup = []
    for r in runs:
        base = floats.get((r["model"], r["device"], r["target"], r["threads"]))
        if base is not None and r["variant"] != BASELINE:
            speedup.append({**_run_key(r), "float_ms": base["latency_median_ms"], "ms": r["latency_median_ms"],
                            "speedup": base["latency_median_ms"] / r["latency_median_ms"]})

    layers, unprofiled = [], []
    for r in runs:
        if not r["per_layer_ms"]:
            unprofiled.append(_run_key(r))
            continue
        rows = _layer_rows(r, pkgs.get(r["package_sha256"]))
        layers.append({**_run_key(r), "segments": rows, "measured": any(x["split"] == "measured" for x in rows),
                       "conv_ms": sum(x["conv_ms"] for x in rows), "glue_ms": sum(x["glue_ms"] for x in rows)})

    roofline: dict[tuple, dict] = {}
    for r in runs:
        pkg = pkgs.get(r["package_sha256"])
        if not pkg or pkg["peak_gflops"] is None or pkg["mem_gbps"] is None or not pkg["layers"]:
            continue
        panel = roofline.setdefault((r["device"], r["target"]), {
            "device": r["device"], "target": r["target"], "peak_gflops": pkg["peak_gflops"],
            "mem_gbps": pkg["mem_gbps"], "ridge": pkg["peak_gflops"] / pkg["mem_gbps"], "points": []})
        timed = {x["name"]: x["ms"] for x in r["per_layer_ms"]}
        for lyr in pkg["layers"]:
            if lyr["flops"] <= 0:
                continue
            ms = timed.get(lyr["name"])
            bound = min(panel["peak_gflops"], panel["mem_gbps"] * lyr["intensity"])
            panel["points"].append({
                **_run_key(r), "layer": lyr["name"], "op": lyr["op"], "kind": layer_kind(lyr["op"]),
                "flops": lyr["flops"], "bytes": lyr["bytes_read"] + lyr["bytes_written"],
                "intensity": lyr["intensity"], "measured": ms is not None and ms > 0, "bound_gflops": bound,
                "gflops": lyr["flops"] / (ms * 1e6) if ms else bound})

    accuracy = _accuracy_points(evals, runs)

    return {
        "meta": {"generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                 "db": str(store.path), "schema_version": SCHEMA_VERSION, "runs_shown": len(runs),
                 "devices": sorted({r["device"] for r in runs}), "models": sorted({r["model"] for r in runs})},
        "variants": [{"name": v, "description": VARIANTS[v].description if v in VARIANTS else v} for v in variants],
        "latency": latency, "speedup": speedup, "layers": layers, "unprofiled": unprofiled,
        "roofline": list(roofline.values()), "accuracy": accuracy,
    }


def _static(name: str) -> str:
    return resources.files("edge_sdk.dashboard").joinpath("static", name).read_text(encoding="utf-8")


def render_page(data: dict | None = None, *, title: str = "edge-sdk latency dashboard") -> str:
    """One HTML document with everything inline. `data` None: the page fetches api/data from its server."""
    if data is None:
        embedded, connect = "", "'self'"
    else:  # "</" cannot end the script element early once escaped
        blob = json.dumps(data, default=str).replace("</", "<\\/").replace("<!--", "<\\!--")
        embedded, connect = f'<script id="edge-data" type="application/json">{blob}</script>\n', "'none'"
    csp = (f"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
           f"connect-src {connect}")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<link rel="icon" href="data:,">\n'
            f"<title>{html.escape(title)}</title>\n<style>\n{_static('dashboard.css')}</style>\n</head>\n"
            f'<body>\n<header><h1>{html.escape(title)}</h1><p id="meta">Loading results…</p>\n'
            f'<button type="button" id="toggle-tables" aria-pressed="false">Show data tables</button></header>\n'
            f'<main id="charts"></main>\n{embedded}'
            f"<script>\n{_static('charts.js')}\n{_static('app.js')}\n</script>\n</body>\n</html>\n")


def export_html(store: ResultsStore, out: Path | str) -> Path:
    """Write the dashboard with its data as one self-contained file (no network needed to view it)."""
    out = Path(out)
    with atomic_write(out) as f:
        f.write(render_page(chart_data(store)))
    return out
