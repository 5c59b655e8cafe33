"""The timing model against ncnn's published Raspberry Pi 3B+ benchncnn figures: fit and held-out table.

Profiles: one PerInference per (param, threads), counted as benchncnn runs the param
(qemu/runner.count_ncnn in a timing_session: `collect`), trimmed to the blocks that carry 99.9 % of
the modelled cycles, so the committed ones (tests/data/timing/ncnn) stay small.
Only dram (a53.FITTED: no source gives it) is fitted, and only on MobileNetV1 and ResNet18 float32
with one thread (FIT_ROWS); every other row is held out.

    python -m edge_sdk.timing.calibrate table tests/data/timing/ncnn     # the table, default constants
    python -m edge_sdk.timing.calibrate fit tests/data/timing/ncnn       # refit dram
    python -m edge_sdk.timing.calibrate collect DIR --anchors ANCHORS/ncnn [--params A,B] [--threads 1,4]
                                                       # profile under qemu (benchncnn's params; hours)
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import numpy as np

from edge_sdk.timing import cost, threads
from edge_sdk.timing.a53 import A53, DEFAULT, FITTED
from edge_sdk.timing.model import thread_terms
from edge_sdk.timing.profile import PerInference

# ncnn benchmark/README.md, Raspberry Pi 3 Model B+ (4x A53 @ 1.4 GHz), data of commit 3a74ae4d3
# (2023-06-23), as ../shared/anchors/README.md lists it: param -> (1 thread ms, 4 threads ms).
PUBLISHED = {
    "mobilenet": (205.65, 108.66), "mobilenet_int8": (181.91, 67.03), "mobilenet_v2": (158.80, 111.68),
    "mobilenet_v3": (127.23, 86.44), "resnet18": (379.57, 271.93), "resnet18_int8": (312.68, 160.07),
    "squeezenet": (125.58, 85.22), "squeezenet_int8": (135.98, 74.68), "shufflenet_v2": (74.44, 47.19),
    "efficientnet_b0": (241.27, 135.86), "mnasnet": (148.42, 95.78),
}
FIT_ROWS = (("mobilenet", 1), ("resnet18", 1))
CLOCK_GHZ, MEM_GBPS = 1.4, 4.0  # targets.py's pi3plus row (the board of PUBLISHED)
GOAL_MAX_ABS, GOAL_MEDIAN_ABS = 0.20, 0.10


def load_profiles(folder: Path) -> dict:
    """{(param, threads): PerInference} from <param>-t<threads>.json.gz files."""
    out = {}
    for f in sorted(folder.glob("*-t*.json.gz")):
        name, _, t = f.name[: -len(".json.gz")].rpartition("-t")
        out[(name, int(t))] = PerInference.load(f)
    return out


class _Priced:
    """One profile with its block costs computed once, re-combined cheaply for other memory constants."""

    def __init__(self, pi: PerInference, n_threads: int, c: A53):
        self.pi, self.n = pi, n_threads
        self.bc = cost.block_costs(pi.blocks, pi.pred, c)
        self.work = ~threads.runtime_blocks(pi) if n_threads > 1 else np.ones(len(pi.blocks), dtype=bool)

    def cycles(self, c: A53) -> float:
        line_cycles = max(64 / (MEM_GBPS / CLOCK_GHZ), c.dram / c.line_fills_in_flight)  # as model.model_profile
        terms = {v: thread_terms(cnt, self.bc, c, self.work, line_cycles) for v, cnt in self.pi.counts.items()}
        return threads.combine(self.pi, terms, threads_n=self.n, c=c, line_cycles=line_cycles)["modelled_cycles"]


def table(profiles: dict, c: A53 = DEFAULT) -> list[dict]:
    """One row per profile with a published figure: published ms, modelled ms, error, fitted or held out."""
    rows = []
    for (name, t), pi in sorted(profiles.items()):
        if name not in PUBLISHED or t not in (1, 4):
            continue
        published = PUBLISHED[name][0 if t == 1 else 1]
        ms = _Priced(pi, t, c).cycles(c) / (CLOCK_GHZ * 1e6)
        rows.append({"row": name, "threads": t, "published_ms": published, "modelled_ms": ms,
                     "error": ms / published - 1, "held_out": (name, t) not in FIT_ROWS})
    return rows


def summary(rows: list[dict]) -> dict:
    held = [abs(r["error"]) for r in rows if r["held_out"]]
    return {"held_out": len(held), "max_abs_error": max(held, default=float("nan")),
            "median_abs_error": statistics.median(held) if held else float("nan"),
            "misses": [f"{r['row']} t{r['threads']}" for r in rows if r["held_out"] and abs(r["error"]) > GOAL_MAX_ABS]}


def fit(profiles: dict, c: A53 = DEFAULT) -> A53:
    """dram minimising the squared log error on FIT_ROWS (a 1-cycle grid, then a 0.1-cycle one)."""
    priced = [(_Priced(profiles[r], r[1], c), PUBLISHED[r[0]][0] * CLOCK_GHZ * 1e6) for r in FIT_ROWS]

    def loss(dram: float) -> float:
        cc = dataclasses.replace(c, dram=dram)
        return sum(math.log(p.cycles(cc) / want) ** 2 for p, want in priced)

    best = min(np.arange(0.0, 801.0, 1.0), key=loss)
    best = min(np.arange(best - 1, best + 1, 0.1), key=loss)
    assert FITTED == ("dram",)
    return dataclasses.replace(c, dram=round(float(best), 1))


def trim(pi: PerInference, keep: float = 0.999, c: A53 = DEFAULT) -> PerInference:
    """The blocks that carry `keep` of the modelled cycles (all threads; none of the parallel runtime's,
    which the model leaves out of the threads' work)."""
    n_threads = int(pi.meta.get("threads", 1))
    priced = _Priced(pi, n_threads, c)
    line_cycles = max(64 / (MEM_GBPS / CLOCK_GHZ), c.dram / c.line_fills_in_flight)
    per_block = sum(thread_terms(cnt, priced.bc, c, priced.work, line_cycles)["per_block"] for cnt in pi.counts.values())
    order = np.argsort(-per_block)
    csum = np.cumsum(per_block[order])
    want = np.zeros(len(pi.blocks), dtype=bool)
    want[order[: int(np.searchsorted(csum, keep * csum[-1])) + 1]] = True
    return pi.subset(want)


def collect(out: Path, params: list[str], threads: list[int], anchors: Path) -> None:
    """Profile each (param, threads) as benchncnn runs it, into out/<param>-t<threads>.json.gz (trimmed)."""
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing.session import timing_session

    out.mkdir(parents=True, exist_ok=True)
    for t in threads:
        for name in params:
            dst = out / f"{name}-t{t}.json.gz"
            if dst.exists():
                continue
            with timing_session() as seen:
                c = E.count_ncnn(anchors / f"{name}.param", t)
            pi = seen[str(anchors / f"{name}.param")]
            pi.meta |= {"name": name, "instructions_libinsn": c.per_inference,
                        "source": "qemu/runner.count_ncnn (benchncnn's options, zero weights), qemu 7.2"}
            trim(pi).save(dst)


def markdown(rows: list[dict]) -> str:
    lines = ["| row | threads | published ms (Pi 3B+) | modelled ms | error | |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['threads']} | {r['published_ms']:.2f} | {r['modelled_ms']:.2f} | "
                     f"{r['error'] * 100:+.1f} % | {'held out' if r['held_out'] else 'fitted'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("table", "fit", "collect"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("--params", default=",".join(PUBLISHED), help="collect: comma-separated param names")
    ap.add_argument("--threads", default="1,4", help="collect: comma-separated thread counts")
    ap.add_argument("--anchors", type=Path, help="collect: the folder of benchncnn's .param files (the anchors' ncnn/)")
    args = ap.parse_args(argv)
    if args.what == "collect" and args.anchors is None:
        ap.error("collect needs --anchors DIR (benchncnn's .param files)")
    if args.what == "collect":
        collect(args.folder, args.params.split(","), [int(t) for t in args.threads.split(",")], args.anchors)
        return 0
    profiles = load_profiles(args.folder)
    c = fit(profiles) if args.what == "fit" else DEFAULT
    if args.what == "fit":
        print(f"fitted on {FIT_ROWS}: dram={c.dram} (l2_hit={c.l2_hit}, H&P)")
    rows = table(profiles, c)
    print(markdown(rows))
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
