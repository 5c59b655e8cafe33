"""Showing and keeping a BenchResult: one rich table with ratios, and rows in the results store.

Ratio columns: "vs float32" is our float32's figure divided by the row's (a speed-up: >1 is faster);
"vs best peer" is the row's figure divided by the best peer of the same precision family at the same
thread count (<=1: at or below the best peer). w1a1 compares with binary peers (LCE) when there
are any, the other bitserial variants with float peers (the issue's goals). Under --emulate, the figure is
the modelled Pi ms of one inference (edge_sdk/timing: the executed blocks priced by the A53's pipeline
and cache rules at the target's clock; a model, not a measurement), with the aarch64 instructions
(deterministic) and the model's L1D/L2 misses and DRAM bytes beside it; the ratios use modelled ms.
With --memory each counted row also shows qemu cache.c's misses priced by timing.proxy.A53Model (the
instruction-count proxy) with its memory share and roofline verdict.
"""
from __future__ import annotations

import sys

_STYLE = {"ok": "green", "wrong output": "bold red", "failed": "red", "unavailable": "yellow"}


def _fmt_ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def _figure(r, inst: bool, modelled: bool) -> tuple[str, str, str]:
    """(main figure, second column, runs) of a row: modelled ms and M instr, or median ms and p10-p90."""
    if r.metric() is not None and inst:
        ms = f"{r.modelled_ms:.2f}" if modelled and r.modelled_ms is not None else ""
        return ms, f"{r.instructions / 1e6:.2f}" if r.instructions is not None else "", "K=1,3"
    if r.latency_ms:
        lat = r.latency_ms
        return f"{lat['median']:.3f}", f"{lat['p10']:.3f}-{lat['p90']:.3f}", str(r.repeats)
    return "", "", ""


def _miss_cols(r) -> list[str]:
    m = r.misses if r.metric() is not None else None
    if not m:
        return ["", "", ""]
    return [f"{m['l1d_misses'] / 1e6:.2f}", f"{m['l2_misses'] / 1e6:.3f}", f"{m['dram_bytes'] / 1e6:.1f}"]


def _where(result, inst: bool, modelled: bool) -> str:
    if modelled:
        from edge_sdk.labels import modelled_label

        board = next((r.timing["target"] for r in result.rows if r.timing), result.target)
        return (f"{modelled_label(board)} per inference (A53 timing model over the code qemu -cpu {result.emulate_cpu} "
                f"executes, (K=3 - K=1)/2; a model, not a measurement), aarch64 instructions and the model's misses")
    return (f"aarch64 instructions per inference under qemu -cpu {result.emulate_cpu} "
            f"(deterministic: (K=3 - K=1)/2; instructions are not cycles)" if inst else "latency, ms")


def _system(s: dict) -> str:
    load = s.get("load_average")
    return (f"{s.get('cpu_model')} ({s.get('logical_cpus')} CPUs"
            + (f", {s['clock_mhz']:.0f} MHz" if "clock_mhz" in s else "")
            + (f", {s['temperature_c']:.1f} C" if "temperature_c" in s else "")
            + (f", load {load[0]:.2f}" if load else "") + "); "
            + ", ".join(f"{k} {v}" for k, v in s.get("versions", {}).items()))


def render(result, *, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    inst = result.mode == "instructions"
    mem = inst and any(getattr(r, "memory", None) for r in result.rows)
    modelled = inst and any(getattr(r, "modelled_ms", None) is not None for r in result.rows)
    out = console or Console(width=None if sys.stdout.isatty() else 200 if mem else 160)
    on = f"device {result.device} ({result.target})" if getattr(result, "device", None) else result.target
    out.print(f"[bold]{result.model['name']}[/] on {on}: {_where(result, inst, modelled)}")
    out.print(_system(result.system), highlight=False)
    t = Table(show_lines=False)
    first = "modelled ms" if modelled else "" if inst else "median ms"
    for col, just in (("engine", "left"), ("variant", "left"), ("thr", "right"), ("status", "left"),
                      (first, "right"), ("M instr" if inst else "p10-p90 ms", "right"),
                      ("runs", "right"), ("vs float32", "right"), ("vs best peer", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    if modelled:
        for col in ("L1D miss M", "L2 miss M", "DRAM MB"):
            t.add_column(col, justify="right", no_wrap=True)
    if mem:
        for col in ("cache.c L1D M", "L2 M", "DRAM MB", "proxy M cycles*", "mem %", "roofline"):
            t.add_column(col, justify="right", no_wrap=True)
    t.add_column("detail", overflow="fold", max_width=70, min_width=20)
    for r in result.rows:
        fig, spread, runs = _figure(r, inst, modelled)
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
                  runs, _fmt_ratio(r.speedup_vs_float32), peer, *(_miss_cols(r) if modelled else []), *memcols,
                  detail[:300])
    out.print(t)
    if modelled:
        out.print("modelled ms: edge_sdk/timing (per-block A53 dual-issue pipeline rules, libtiming.so's Pi 3 caches "
                  "with the A53's prefetcher, at the target's clock; constants and sources in timing/a53.py, "
                  "calibration in docs/BENCHMARKS.md). Modelled Pi time, not a measurement.", highlight=False)
    if mem:
        md = next(r.memory["model"] for r in result.rows if getattr(r, "memory", None))
        out.print(f"* modelled A53 cycles = instructions / {md['ipc']:g} + L2 hits x {md['l2_hit_cycles']:g} + L2 misses x "
                  f"{md['dram_cycles']:g} (no overlap: an upper bound for streams); mem % = the miss terms' share; "
                  f"roofline: DRAM bytes at {md['mem_gbps']:g} GB/s vs instructions at {md['clock_ghz']:g} GHz x IPC "
                  f"{md['ipc']:g}. Caches: qemu cache.c as a Pi 3B (L1D 32K/4, L1I 32K/2, L2 512K/16, 64 B, LRU); "
                  "misses per inference = (K=3 - K=1)/2, deterministic. See edge_sdk/qemu/runner.py.", highlight=False)
    note = result.store.get("note")
    if note:
        out.print(f"results store: {note}", highlight=False)


def _modelled_extra(r, extra: dict) -> tuple[float, dict]:
    """(the modelled ms to store, extra with the model's figures) of an --emulate row."""
    extra = extra | {"instructions": r.instructions}
    if r.memory:
        extra |= {"memory": {k: v for k, v in r.memory.items() if k != "raw"},
                  "clock_mhz": r.memory["model"]["clock_ghz"] * 1000}
    if not r.modelled_ms:
        return r.memory["ms_at_clock"], extra
    from edge_sdk.timing.package_figures import model_version

    return r.modelled_ms, extra | {"modelled_ms": r.modelled_ms, "modelled_cycles": r.modelled_cycles,
                                   "model_version": model_version(), "misses": r.misses,
                                   "clock_mhz": r.timing["clock_ghz"] * 1000, "timing": r.timing,
                                   **({"per_layer_modelled_ms": r.per_layer_modelled_ms} if r.per_layer_modelled_ms
                                      else {})}


def record(result, *, db=None) -> dict:
    """Write the measured rows to the results store (edge_sdk.results.store), when it is there.

    Our rows carry their package manifest; a peer row gets a small manifest of its own (variant
    "<engine>-<precision>", e.g. "litert-int8") so the dashboard can put it next to ours.
    Instruction counts are not latencies: --emulate rows are stored as the A53 timing model's time
    (modelled_ms, also in the store's modelled columns with modelled_cycles and the model version; the
    --memory proxy's time where no timing model ran), under the device name "qemu-<cpu> (A53 timing
    model)", emulated, with the counts and misses in the run's extra JSON.
    """
    modelled = result.mode != "latency"
    if modelled and not any(getattr(r, "memory", None) or r.modelled_ms for r in result.rows):
        return {"written": 0, "note": "instruction counts are not stored (the store holds latencies; "
                                      "no row has a modelled time)"}
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
        timed = any(r.modelled_ms for r in result.rows)
        device = f"qemu-{result.emulate_cpu} (A53 {'timing ' if timed else ''}model)"
        base |= {"source": "bench-emulate", "cpu_model": f"{result.emulate_cpu} (qemu + "
                 f"{'edge_sdk.timing' if timed else 'timing.proxy.A53Model'})",
                 "clock_mhz": None, "temperature_c": None, "load_average": None}
    written = 0
    with ResultsStore(path) as store:
        for r in result.rows:
            if r.status not in ("ok", "wrong output") or not ((r.modelled_ms or r.memory) if modelled else r.latency_ms):
                continue
            lat, repeats, run_json, extra = r.latency_ms, r.repeats, r.run_json, {**base, "status": r.status}
            if modelled:  # the row keeps its instruction figure; the store gets the model's time
                ms, extra = _modelled_extra(r, extra)
                lat, repeats = {k: ms for k in ("median", "p10", "p90", "min", "max")}, 1
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
