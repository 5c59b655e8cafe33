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

from edge_sdk.labels import QEMU_WALL, modelled_label
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


OUTSIDE = "outside the layers"  # the op of a modelled row that is no layer's (runtime/profile.OUTSIDE)


def modelled_layers(r: dict) -> list[dict] | None:
    """An emulated run's per-layer modelled Pi ms (runs.extra["per_layer_modelled_ms"], timing/per_layer.py:
    the timing model's price of each layer's functions, the rest as named rows), or None without a usable one."""
    rows = (r.get("extra") or {}).get("per_layer_modelled_ms") if r.get("emulated") else None
    if not isinstance(rows, list) or not rows:
        return None
    ok = all(isinstance(x, dict) and isinstance(x.get("name"), str) and all(
        isinstance(x.get(k), (int, float)) and x[k] >= 0 for k in ("ms", "conv_ms", "glue_ms")) for x in rows)
    return rows if ok else None


def _layer_rows(run: dict, pkg: dict | None) -> list[dict]:
    """The run's per-layer times joined to the package's layer table by name (for op, FLOPs, bytes).

    An emulated run with a modelled split: its modelled Pi ms per layer (split "modelled": conv vs glue as
    the timing model's functions and the compiler's glue estimate give it; the runtime and other rest rows
    are kind "outside"). Else the run's recorded times: conv_ms/glue_ms the runner's measured split when
    profiled (runtime/profile.py: a fused conv kernel's epilogue counts as glue), else all of a layer's
    time goes to its op's kind.
    """
    by_name = {lyr["name"]: lyr for lyr in (pkg or {}).get("layers", [])}
    modelled = modelled_layers(run)
    rows = []
    for t in modelled or run["per_layer_ms"]:
        lyr = by_name.get(t["name"], {})
        op = t.get("op") or lyr.get("op")
        kind = "outside" if op == OUTSIDE else layer_kind(op, t["name"])
        split = t.get("conv_ms") is not None and t.get("glue_ms") is not None
        conv, glue = ((t["conv_ms"], t["glue_ms"]) if split else
                      (t["ms"], 0.0) if kind == "conv" else (0.0, t["ms"]))
        rows.append({"name": t["name"], "op": op or "", "kind": kind, "ms": t["ms"], "conv_ms": conv,
                     "glue_ms": glue, "split": "modelled" if modelled else "measured" if split else "op",
                     "ms_is": modelled_label(run["target"]) if modelled else
                     QEMU_WALL if run.get("emulated") else "measured on the device",
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
    # an emulated run is placed at its modelled Pi ms when it has one (the emulator's time is not a device's)
    return [{**_run_key(r), "median_ms": pi_time(r)[0], "basis": pi_time(r)[1],
             "ms_is": pi_time(r)[2] if pi_time(r)[1] != "measured" else "measured", "accuracy": r["accuracy"],
             "top5": r["extra"].get("top5"), "images": r["extra"].get("images"),
             "dataset": r["extra"].get("dataset"), "source": r["source"]}
            for r in [*evals, *(r for r in runs if _key(r) not in evaluated)] if r["accuracy"] is not None]


def pi_time(r: dict) -> tuple[float, str, str]:
    """(the ms a latency or speedup chart uses for run r, its basis, its label): a device's measured
    median; for an emulated run the modelled Pi time (edge_sdk/timing) where the run has one, else
    the emulator's wall time, basis "qemu-wall", which is drawn labelled and never in a speedup."""
    if not r["emulated"]:
        return r["latency_median_ms"], "measured", "measured ms"
    if r.get("modelled_ms") is not None:
        return r["modelled_ms"], "modelled", modelled_label(r["target"])
    return r["latency_median_ms"], "qemu-wall", QEMU_WALL


def _latency_rows(runs: list[dict]) -> list[dict]:
    """One bar per run (pi_time); the spread (p10/p90/min/max) only where the bar is a recorded time."""
    out = []
    for r in runs:
        ms, basis, label = pi_time(r)
        spread = {k: None if basis == "modelled" else r[f"latency_{k}"] for k in ("p10_ms", "p90_ms", "min_ms", "max_ms")}
        out.append({**_run_key(r), "ms": ms, "basis": basis, "basis_label": label, **spread,
                    "median_ms": r["latency_median_ms"], "qemu_wall_ms": r["latency_median_ms"] if r["emulated"] else None,
                    "modelled_ms": r.get("modelled_ms"), "modelled_cycles": r.get("modelled_cycles"),
                    "model_version": r.get("model_version"), "repeats": r["repeats"], "golden_ok": r["golden_ok"]})
    return out


def _speedup_rows(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(float32 / variant per model, device, target and threads, from pi_time; the pairs left out because
    one side has only the emulator's wall time)."""
    from edge_sdk.variants import BASELINE

    floats = {(r["model"], r["device"], r["target"], r["threads"]): r for r in runs if r["variant"] == BASELINE}
    speedup, skipped = [], []
    for r in runs:
        base = floats.get((r["model"], r["device"], r["target"], r["threads"]))
        if base is None or r["variant"] == BASELINE:
            continue
        (b, b_basis, _), (ms, basis, label) = pi_time(base), pi_time(r)
        if "qemu-wall" in (b_basis, basis) or b_basis != basis:
            lacking = [v for v, x in ((BASELINE, b_basis), (r["variant"], basis)) if x == "qemu-wall"]
            skipped.append({**_run_key(r), "reason": f"no modelled Pi time for {' and '.join(lacking) or 'one side'} "
                            f"(only the {QEMU_WALL}, which is never a speedup)"})
            continue
        speedup.append({**_run_key(r), "float_ms": b, "ms": ms, "basis": basis, "basis_label": label,
                        "speedup": b / ms})
    return speedup, skipped


def _cores(target: str) -> int | None:
    from edge_sdk.errors import EdgeError
    from edge_sdk.targets import get_target

    try:
        return get_target(target).cores
    except EdgeError:
        return None


def _roof_panel(r: dict, pkg: dict) -> dict:
    """The roof a run is drawn against: the package's peak (all the target's cores) scaled to the cores
    the run's threads use (a one-thread run: one core's peak); the memory bandwidth is shared, not scaled."""
    cores = _cores(r["target"])
    used = min(r["threads"], cores) if cores else None
    peak = pkg["peak_gflops"] * used / cores if cores else pkg["peak_gflops"]
    return {"device": r["device"], "target": r["target"], "threads": r["threads"], "cores": cores, "cores_used": used,
            "peak_gflops": peak, "peak_gflops_all_cores": pkg["peak_gflops"], "mem_gbps": pkg["mem_gbps"],
            "ridge": peak / pkg["mem_gbps"], "points": []}


def chart_data(store: ResultsStore) -> dict:
    """Everything the page draws, from the newest run per model x variant x device x target x threads."""
    from edge_sdk.variants import VARIANTS

    runs, evals, variants = _select_runs(store)
    pkgs = store.packages(sorted({r["package_sha256"] for r in runs}))
    latency = _latency_rows(runs)
    speedup, speedup_skipped = _speedup_rows(runs)

    layers, unprofiled = [], []
    for r in runs:
        if not r["per_layer_ms"] and not modelled_layers(r):
            unprofiled.append(_run_key(r))
            continue
        rows = _layer_rows(r, pkgs.get(r["package_sha256"]))
        layers.append({**_run_key(r), "segments": rows, "measured": any(x["split"] == "measured" for x in rows),
                       "modelled": any(x["split"] == "modelled" for x in rows), "ms_is": rows[0]["ms_is"],
                       "conv_ms": sum(x["conv_ms"] for x in rows if x["kind"] != "outside"),
                       "glue_ms": sum(x["glue_ms"] for x in rows if x["kind"] != "outside"),
                       "outside_ms": sum(x["ms"] for x in rows if x["kind"] == "outside")})

    roofline: dict[tuple, dict] = {}
    for r in runs:
        pkg = pkgs.get(r["package_sha256"])
        if not pkg or pkg["peak_gflops"] is None or pkg["mem_gbps"] is None or not pkg["layers"]:
            continue
        key = (r["device"], r["target"], r["threads"])
        if key not in roofline:
            roofline[key] = _roof_panel(r, pkg)
        panel = roofline[key]
        # an emulated run's recorded per-layer times are the emulator's: no attained GFLOP/s from them (hollow
        # points); its modelled Pi ms per layer (timing/per_layer.py) are a Pi's figure (filled, basis "modelled")
        modelled = modelled_layers(r)
        timed = {x["name"]: x["ms"] for x in modelled if x.get("op") != OUTSIDE} if modelled else \
            {} if r["emulated"] else {x["name"]: x["ms"] for x in r["per_layer_ms"]}
        for lyr in pkg["layers"]:
            if lyr["flops"] <= 0:
                continue
            ms = timed.get(lyr["name"])
            bound = min(panel["peak_gflops"], panel["mem_gbps"] * lyr["intensity"])
            panel["points"].append({
                **_run_key(r), "layer": lyr["name"], "op": lyr["op"], "kind": layer_kind(lyr["op"]),
                "flops": lyr["flops"], "bytes": lyr["bytes_read"] + lyr["bytes_written"],
                "intensity": lyr["intensity"], "measured": ms is not None and ms > 0, "bound_gflops": bound,
                "basis": ("modelled" if modelled else "measured") if ms else "bound",
                "gflops": lyr["flops"] / (ms * 1e6) if ms else bound})

    accuracy = _accuracy_points(evals, runs)

    return {
        "meta": {"generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                 "db": str(store.path), "schema_version": SCHEMA_VERSION, "runs_shown": len(runs),
                 "devices": sorted({r["device"] for r in runs}), "models": sorted({r["model"] for r in runs})},
        "variants": [{"name": v, "description": VARIANTS[v].description if v in VARIANTS else v} for v in variants],
        "latency": latency, "speedup": speedup, "speedup_skipped": speedup_skipped, "layers": layers,
        "unprofiled": unprofiled, "labels": {"qemu_wall": QEMU_WALL},
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
