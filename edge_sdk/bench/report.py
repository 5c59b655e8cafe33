"""Showing and keeping a BenchResult: one rich table with ratios, and rows in the results store.

Ratio columns: "vs float32" is our float32's figure divided by the row's (a speed-up: >1 is faster);
"vs best peer" is the row's figure divided by the best peer of the same precision family at the same
thread count (<=1: at or below the best peer). w1a1 compares with binary peers (LCE) when there
are any, the other bitserial variants with float peers (the issue's goals). Under --emulate, the figure is aarch64 instructions per
inference (deterministic), not milliseconds; with --memory each counted row also shows its L1D and L2
misses and DRAM bytes per inference, cycles from emulate.A53Model (a stated model, not a measurement)
with the share of them spent waiting on memory, and the roofline verdict (DRAM bytes at the target's
bandwidth vs instructions at the model's IPC).
"""
from __future__ import annotations

import sys

_STYLE = {"ok": "green", "wrong output": "bold red", "failed": "red", "unavailable": "yellow"}


def _fmt_ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def render(result, *, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    s, inst = result.system, result.mode == "instructions"
    mem = inst and any(getattr(r, "memory", None) for r in result.rows)
    out = console or Console(width=None if sys.stdout.isatty() else 200 if mem else 160)
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
    if mem:
        for col in ("L1D miss M", "L2 miss M", "DRAM MB", "M cycles*", "mem %", "roofline"):
            t.add_column(col, justify="right", no_wrap=True)
    t.add_column("detail", overflow="fold", max_width=70, min_width=20)
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
        m = getattr(r, "memory", None) if r.metric() is not None else None
        memcols = [] if not mem else ["", "", "", "", "", ""] if not m else [
            f"{m['l1d_misses'] / 1e6:.2f}", f"{m['l2_misses'] / 1e6:.3f}", f"{m['dram_bytes'] / 1e6:.1f}",
            f"{m['cycles'] / 1e6:.1f}", f"{100 * m['memory_share']:.0f}", m["bound"]]
        t.add_row(r.engine, r.variant, str(r.threads), f"[{_STYLE.get(r.status, '')}]{r.status}[/]", fig, spread,
                  runs, _fmt_ratio(r.speedup_vs_float32), peer, *memcols, detail[:300])
    out.print(t)
    if mem:
        md = next(r.memory["model"] for r in result.rows if getattr(r, "memory", None))
        out.print(f"* modelled A53 cycles = instructions / {md['ipc']:g} + L2 hits x {md['l2_hit_cycles']:g} + L2 misses x "
                  f"{md['dram_cycles']:g} (no overlap: an upper bound for streams); mem % = the miss terms' share; "
                  f"roofline: DRAM bytes at {md['mem_gbps']:g} GB/s vs instructions at {md['clock_ghz']:g} GHz x IPC "
                  f"{md['ipc']:g}. Caches: qemu cache.c as a Pi 3B (L1D 32K/4, L1I 32K/2, L2 512K/16, 64 B, LRU); "
                  "misses per inference = (K=3 - K=1)/2, deterministic. See edge_sdk/bench/emulate.py.", highlight=False)
    note = result.store.get("note")
    if note:
        out.print(f"results store: {note}", highlight=False)


def record(result, *, db=None) -> dict:
    """Write the measured rows to the results store (edge_sdk.results.store), when it is there.

    Our rows carry their package manifest; a peer row gets a small manifest of its own (variant
    "<engine>-<precision>", e.g. "litert-int8") so the dashboard can put it next to ours.
    Instruction counts are not latencies: --emulate runs are stored only with --memory, as the A53
    model's time (modelled cycles at the target's clock), under the device name
    "qemu-<cpu> (A53 model)", emulated, with the counts and misses in the run's extra JSON.
    """
    modelled = result.mode != "latency"
    if modelled and not any(getattr(r, "memory", None) for r in result.rows):
        return {"written": 0, "note": "instruction counts are not stored (the store holds latencies; "
                                      "--memory adds modelled A53 times)"}
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
    if modelled:
        device = f"qemu-{result.emulate_cpu} (A53 model)"
        base |= {"source": "bench-emulate", "cpu_model": f"{result.emulate_cpu} (qemu counts + emulate.A53Model)",
                 "clock_mhz": None, "temperature_c": None, "load_average": None}
    written = 0
    with ResultsStore(path) as store:
        for r in result.rows:
            if r.status not in ("ok", "wrong output") or not (r.memory if modelled else r.latency_ms):
                continue
            lat, repeats, run_json, extra = r.latency_ms, r.repeats, r.run_json, {**base, "status": r.status}
            if modelled:  # the row keeps its instruction figure; the store gets the model's time
                ms = r.memory["ms_at_clock"]
                lat, repeats = {k: ms for k in ("median", "p10", "p90", "min", "max")}, 1
                extra |= {"clock_mhz": r.memory["model"]["clock_ghz"] * 1000, "instructions": r.instructions,
                          "memory": {k: v for k, v in r.memory.items() if k != "raw"}}
                if r.ours and r.manifest:
                    run_json = {"package": r.package, "model": r.manifest["model"]["name"], "variant": r.variant,
                                "target": result.target, "threads": r.threads, "emulated": True, "repeats": 1,
                                "latency_ms": lat, "golden": r.golden, "versions": r.manifest.get("versions")}
            if r.ours and run_json and r.manifest:
                store.record_run(run_json, r.manifest, device=device, extra=extra)
            elif not r.ours:
                name = f"{r.engine}-{r.variant}"
                manifest = {"model": {"name": result.model["name"]}, "variant": name,
                            "target": {"name": result.target, "arch": s.get("arch")},
                            "versions": {"edge_sdk": s["versions"].get("edge-sdk"), "peer": r.detail},
                            "peer_file": r.package}
                run = {"model": result.model["name"], "variant": name, "target": result.target,
                       "threads": r.threads, "emulated": modelled, "repeats": repeats, "latency_ms": lat}
                store.record_run(run, manifest, device=device, extra=extra | {"engine": r.engine})
            else:
                continue
            written += 1
    return {"written": written, "path": str(path), "note": f"{written} row(s) written to {path}"}
