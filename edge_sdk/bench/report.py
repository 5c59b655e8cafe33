"""Showing and keeping a BenchResult: one rich table with ratios, and rows in the results store.

Ratio columns: "vs float32" is our float32's figure divided by the row's (a speed-up: >1 is faster);
"vs best peer" is the row's figure divided by the best peer of the same precision family at the same
thread count (<=1: at or below the best peer). w1a1 compares with binary peers (LCE) when there
are any, the other bitserial variants with float peers (the issue's goals). Under --emulate, the figure is aarch64 instructions per
inference (deterministic), not milliseconds.
"""
from __future__ import annotations

import sys

_STYLE = {"ok": "green", "wrong output": "bold red", "failed": "red", "unavailable": "yellow"}


def _fmt_ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def render(result, *, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    out = console or Console(width=None if sys.stdout.isatty() else 160)
    s, inst = result.system, result.mode == "instructions"
    where = (f"aarch64 instructions per inference under qemu -cpu {result.emulate_cpu} "
             f"(deterministic: (K=3 - K=1)/2; instructions are not cycles)" if inst else "latency, ms")
    on = f"device {result.device} ({result.target})" if getattr(result, "device", None) else result.target
    out.print(f"[bold]{result.model['name']}[/] on {on}: {where}")
    load = s.get("load_average")
    out.print(f"{s.get('cpu_model')} ({s.get('logical_cpus')} CPUs"
              + (f", {s['clock_mhz']:.0f} MHz" if "clock_mhz" in s else "")
              + (f", {s['temperature_c']:.1f} C" if "temperature_c" in s else "")
              + (f", load {load[0]:.2f}" if load else "") + "); "
              + ", ".join(f"{k} {v}" for k, v in s.get("versions", {}).items()), highlight=False)
    t = Table(show_lines=False)
    for col, just in (("engine", "left"), ("variant", "left"), ("thr", "right"), ("status", "left"),
                      ("M instr" if inst else "median ms", "right"), ("" if inst else "p10-p90 ms", "right"),
                      ("runs", "right"), ("vs float32", "right"), ("vs best peer", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    t.add_column("detail", overflow="fold", max_width=70)
    for r in result.rows:
        if r.metric() is not None and inst:
            fig, spread, runs = f"{r.instructions / 1e6:.2f}", "", "K=1,3"
        elif r.latency_ms:
            lat = r.latency_ms
            fig, spread, runs = f"{lat['median']:.3f}", f"{lat['p10']:.3f}-{lat['p90']:.3f}", str(r.repeats)
        else:
            fig, spread, runs = "", "", ""
        peer = f"{_fmt_ratio(r.vs_best_peer)} ({r.best_peer})" if r.vs_best_peer is not None else ""
        detail = r.detail
        if r.ours and r.golden and r.status == "ok":
            detail = "; ".join(x for x in (f"golden ok vs {r.golden['reference']} (max err "
                                           f"{r.golden['max_abs_err']:.1e})" + (", cached" if r.cached else ""),
                                           r.detail) if x)
        t.add_row(r.engine, r.variant, str(r.threads), f"[{_STYLE.get(r.status, '')}]{r.status}[/]", fig, spread,
                  runs, _fmt_ratio(r.speedup_vs_float32), peer, detail[:300])
    out.print(t)
    note = result.store.get("note")
    if note:
        out.print(f"results store: {note}", highlight=False)


def record(result, *, db=None) -> dict:
    """Write the measured rows to the results store (edge_sdk.results.store), when it is there.

    Our rows carry their package manifest; a peer row gets a small manifest of its own (variant
    "<engine>-<precision>", e.g. "litert-int8") so the dashboard can put it next to ours.
    Instruction counts are not latencies: --emulate runs are not stored.
    """
    if result.mode != "latency":
        return {"written": 0, "note": "instruction counts are not stored (the store holds latencies)"}
    try:
        from edge_sdk.results.store import ResultsStore, default_db_path
    except ImportError as e:
        return {"written": 0, "note": f"skipped: the results store is not available ({e})"}
    path = db or default_db_path()
    s = result.system
    device = getattr(result, "device", None) or s["hostname"]  # a fleet device's name, else this machine's
    base = {"source": "bench", "cpu_model": s.get("cpu_model"), "clock_mhz": s.get("clock_mhz"),
            "temperature_c": s.get("temperature_c"), "load_average": s.get("load_average"),
            "versions": s.get("versions")}
    written = 0
    with ResultsStore(path) as store:
        for r in result.rows:
            if not r.latency_ms or r.status not in ("ok", "wrong output"):
                continue
            if r.ours and r.run_json and r.manifest:
                store.record_run(r.run_json, r.manifest, device=device, extra={**base, "status": r.status})
            elif not r.ours:
                name = f"{r.engine}-{r.variant}"
                manifest = {"model": {"name": result.model["name"]}, "variant": name,
                            "target": {"name": result.target, "arch": s.get("arch")},
                            "versions": {"edge_sdk": s["versions"].get("edge-sdk"), "peer": r.detail},
                            "peer_file": r.package}
                run = {"model": result.model["name"], "variant": name, "target": result.target,
                       "threads": r.threads, "emulated": False, "repeats": r.repeats, "latency_ms": r.latency_ms}
                store.record_run(run, manifest, device=device, extra={**base, "engine": r.engine,
                                                                             "status": r.status})
            else:
                continue
            written += 1
    return {"written": written, "path": str(path), "note": f"{written} row(s) written to {path}"}
