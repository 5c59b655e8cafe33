"""Modelled Cortex-A53 cycles of one inference from its per-inference block profile.

Per thread (vCPU) t:

    cycles_t = sum_b exec_b,t x core_b                         (pipeline.py, per block)
             + taken_b,t x taken_branch + mispredicts_b,t x mispredict
             + (L1 misses - L2 misses)_b,t x l2_hit + L2 misses_b,t x dram   (loads and fetches)

mispredicts: a block ending in a conditional branch mispredicts min(taken, not taken) times (a
loop's exit; a bimodal predictor's count on branches with no pattern). Stores do not stall (the
store buffer), but their misses count as DRAM traffic (a fill and a write-back), as do the lines
the prefetchers bring (libtiming.so: PRFM and the A53's stride prefetcher; they do not stall).
Threads combine in threads.py.
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from edge_sdk.timing import cost, threads
from edge_sdk.timing.a53 import A53, DEFAULT, SOURCES
from edge_sdk.timing.profile import ADD, PerInference

_F = {f: i for i, f in enumerate(ADD)}


def thread_terms(cnt: np.ndarray, bc: cost.BlockCost, c: A53, work: np.ndarray, line_cycles: float = 0.0) -> dict:
    """One vCPU's cycle terms over the blocks selected by `work` (bool per block); a block takes at
    least its DRAM lines x line_cycles (the memory bandwidth)."""
    ex = cnt[:, _F["exec"]] * work
    taken = cnt[:, _F["taken"]] * work
    mispredicts = np.where(bc.cond, np.minimum(taken, np.maximum(ex - taken, 0)), 0.0)
    ld1, ld2 = cnt[:, _F["ld_l1"]] * work, cnt[:, _F["ld_l2"]] * work
    if1, if2 = cnt[:, _F["if_l1"]] * work, cnt[:, _F["if_l2"]] * work
    st1, st2 = cnt[:, _F["st_l1"]] * work, cnt[:, _F["st_l2"]] * work
    pf2, stw = cnt[:, _F["pf_l2"]] * work, cnt[:, _F["st_w"]] * work  # prefetched lines, streamed stores
    if c.store_miss_stalls:
        ld1, ld2 = ld1 + st1, ld2 + st2
    core = ex * bc.cycles
    bound = np.maximum.reduce([bc.issue, bc.neon, bc.ls])
    dep = ex * np.maximum(bc.cycles - bound, 0)
    base = core - dep
    which = np.argmax(np.stack([bc.issue, bc.neon, bc.ls]), axis=0)
    l2 = ((ld1 - ld2) + (if1 - if2)) * c.l2_hit
    dram = (ld2 + if2) * c.dram
    branch = taken * c.taken_branch + mispredicts * c.mispredict
    lines = ld2 + if2 + pf2 + stw + (2 * st2 if not c.store_miss_stalls else st2)
    bandwidth = np.maximum(lines * line_cycles - (core + branch + l2 + dram), 0.0)
    per_block = core + branch + l2 + dram + bandwidth
    return {
        "cycles": float(per_block.sum()), "per_block": per_block,
        "instructions": float((ex * bc.instructions).sum()),
        "issue": float(base[which == 0].sum()), "neon": float(base[which == 1].sum()),
        "load_store": float(base[which == 2].sum()), "dependency": float(dep.sum()),
        "branch": float(branch.sum()), "mispredicts": float(mispredicts.sum()), "bandwidth": float(bandwidth.sum()),
        "l2_stall": float(l2.sum()), "dram_stall": float(dram.sum()),
        "l1d_misses": float((ld1 + st1).sum()) if not c.store_miss_stalls else float(ld1.sum()),
        "l2_misses": float((ld2 + st2 + if2).sum()) if not c.store_miss_stalls else float((ld2 + if2).sum()),
        "l1i_misses": float(if1.sum()),
        "prefetch_fills": float((cnt[:, _F["pf_l1"]] * work).sum()),
        "dram_bytes": 64 * float(lines.sum()),
    }


def model_profile(pi: PerInference, *, threads_n: int = 1, clock_ghz: float, mem_gbps: float | None = None,
                  c: A53 = DEFAULT, layers: int = 0, symbol_files: dict | None = None) -> dict:
    """The modelled cycles and ms of one inference, with their terms (see module docstring)."""
    bc = cost.block_costs(pi.blocks, pi.pred, c)
    skip = threads.runtime_blocks(pi, symbol_files) if threads_n > 1 else np.zeros(len(pi.blocks), dtype=bool)
    outside = threads.library_blocks(pi) & ~skip  # runtime work the plugin's epochs leave out
    # cycles per streamed line: the bus's (mem_gbps) or, slower, line_fills_in_flight per dram cycles --
    # a limit of the memory as a whole, so four cores share it as one does (threads.py)
    line_cycles = max(64 / (mem_gbps / clock_ghz) if mem_gbps else 0.0, c.dram / c.line_fills_in_flight)
    terms = {v: thread_terms(cnt, bc, c, ~skip, line_cycles) for v, cnt in pi.counts.items()}
    combined = threads.combine(pi, terms, threads_n=threads_n, c=c, line_cycles=line_cycles,
                               outside={v: float(t["per_block"][outside].sum()) for v, t in terms.items()})
    total = combined["modelled_cycles"]
    keys = ("issue", "neon", "load_store", "dependency", "branch", "l2_stall", "dram_stall", "bandwidth")
    out = {
        "modelled_cycles": total, "modelled_ms": total / (clock_ghz * 1e6), "clock_ghz": clock_ghz,
        "threads": threads_n, "instructions": sum(t["instructions"] for t in terms.values()),
        "cycles_split": {k: sum(t[k] for t in terms.values()) for k in keys} | {
            k: combined[k] for k in ("fork_join", "parallel_wait", "shared_bandwidth", "runtime_work")},
        "misses": {k: sum(t[k] for t in terms.values()) for k in ("l1d_misses", "l1i_misses", "l2_misses",
                                                                   "mispredicts")},
        "dram_bytes": sum(t["dram_bytes"] for t in terms.values()),
        "per_thread": {str(v): {k: t[k] for k in ("cycles", "instructions")} for v, t in terms.items()},
        "regions": combined["regions"],
        "model": {"a53": asdict(c), "sources": SOURCES, "method": "edge_sdk.timing (per-block A53 pipeline "
                  "rules + libtiming cache misses), (K=3 - K=1) / 2 inferences under qemu"},
    }
    if layers:
        out["functions"] = top_functions(pi, terms, layers, symbol_files)
    return out


def top_functions(pi: PerInference, terms: dict, n: int, files: dict | None = None) -> list[dict]:
    """The n functions with the most modelled cycles (all threads), by the symbol of each block."""
    from edge_sdk.timing.symbols import Symbolizer

    sym = Symbolizer(pi.maps, files)
    per_block = sum(t["per_block"] for t in terms.values())
    by: dict[tuple, float] = {}
    for i in np.argsort(-per_block)[:5000]:
        if per_block[i] <= 0:
            break
        key = sym.lookup(pi.blocks[i][0])
        by[key] = by.get(key, 0.0) + float(per_block[i])
    total = float(per_block.sum()) or 1.0
    top = sorted(by.items(), key=lambda kv: -kv[1])[:n]
    return [{"file": f, "function": fn, "cycles": cyc, "share": cyc / total} for (f, fn), cyc in top]
