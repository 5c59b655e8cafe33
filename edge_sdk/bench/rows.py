"""Bench rows: what one (engine, variant, threads) measurement is, its status, and the ratios between rows.

Statuses: ok, wrong output (the package's golden check failed), failed (with the error), unavailable
(variant not landed, peer not set up). The latency dict every run JSON carries (run, remote run, bench,
the demo's app runs) is runtime/result.py's latency_stats.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from edge_sdk.runtime.result import latency_stats

OK, WRONG, FAILED, UNAVAILABLE = "ok", "wrong output", "failed", "unavailable"
SCHEMA = "edge-sdk.bench/1"


@dataclass
class BenchRow:
    engine: str  # "edge-sdk" or a peer engine
    variant: str
    family: str  # float / int8 / bitserial (ours), float / int8 / binary (peers)
    threads: int
    status: str = OK
    detail: str = ""
    latency_ms: dict | None = None  # median, p10, p90, min, max
    repeats: int = 0
    instructions: float | None = None  # per inference, under --emulate
    counts: dict | None = None  # raw qemu counts per K
    memory: dict | None = None  # under --emulate --memory: cache.c misses, DRAM bytes, proxy cycles (emulate.py)
    modelled_cycles: float | None = None  # under --emulate: the A53 timing model's cycles per inference (edge_sdk/timing)
    modelled_ms: float | None = None  # ... at the target's clock: modelled Pi time, not a measurement
    misses: dict | None = None  # under --emulate: L1D/L1I/L2 misses, mispredicts, DRAM bytes per inference (the model's)
    timing: dict | None = None  # the model's cycle split, costliest functions, target and version
    per_layer_modelled_ms: list | None = None  # under --emulate, our rows: the model's ms per layer (timing/per_layer.py)
    golden: dict | None = None
    package: str | None = None
    cached: bool | None = None
    speedup_vs_float32: float | None = None  # our float32 / this (>1: faster)
    vs_best_peer: float | None = None  # this / best peer of the same family (<=1: at or below)
    best_peer: str | None = None
    run_json: dict | None = field(default=None, repr=False)
    manifest: dict | None = field(default=None, repr=False)
    latencies: list[float] = field(default_factory=list, repr=False)  # all rounds, in ms

    @property
    def ours(self) -> bool:
        return self.engine == "edge-sdk"

    def metric(self) -> float | None:
        """The row's figure for ratios: modelled ms under --emulate (instructions where no model ran), else
        the median latency."""
        if self.status != OK:
            return None
        if self.modelled_ms is not None:
            return self.modelled_ms
        return self.instructions if self.instructions is not None else (self.latency_ms or {}).get("median")

    def set_modelled(self, fig: dict | None) -> None:
        """Copy the timing model's figures (emulate.Count.modelled) into the row."""
        if not fig:
            return
        self.modelled_cycles, self.modelled_ms = fig["modelled_cycles"], fig["modelled_ms"]
        self.misses = dict(fig["misses"]) | {"dram_bytes": fig["dram_bytes"]}
        self.timing = {k: fig[k] for k in ("cycles_split", "functions", "target", "clock_ghz", "threads") if k in fig}
        if fig.get("functions") is not None:
            from edge_sdk.timing.per_layer import layer_split
            from edge_sdk.timing.package_figures import TOP_FUNCTIONS

            if self.manifest and self.manifest.get("layers"):  # every priced function, joined to the layers
                self.per_layer_modelled_ms = layer_split(fig, self.manifest["layers"])
            self.timing["functions"] = fig["functions"][:TOP_FUNCTIONS]
        if fig.get("instructions") and int(fig.get("threads", 1)) > 1:
            # libinsn's inline counter is not atomic: with threads it undercounts; libtiming's per-vCPU sum is exact
            self.instructions = fig["instructions"]

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("run_json"), d.pop("manifest"), d.pop("latencies")
        return d


@dataclass
class BenchResult:
    model: dict
    target: str
    mode: str  # "latency" or "instructions"
    emulate_cpu: str | None
    options: dict
    system: dict
    rows: list[BenchRow]
    store: dict = field(default_factory=dict)
    device: str | None = None  # a fleet device's name when measured there (device.py), else None: this machine

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "model": self.model, "target": self.target, "device": self.device, "mode": self.mode,
                "emulate_cpu": self.emulate_cpu, "options": self.options, "system": self.system,
                "rows": [r.to_json() for r in self.rows], "store": self.store}


def failure(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".strip()[:2000]


def finish_latencies(rows: list[BenchRow]) -> None:
    for row in rows:
        if row.latencies:
            row.latency_ms, row.repeats = latency_stats(row.latencies), len(row.latencies)
            if row.run_json:
                row.run_json.update(latency_ms=row.latency_ms, repeats=row.repeats)


def ratios(rows: list[BenchRow]) -> None:
    """Each measured row vs our baseline (speedup_vs_float32) and, for ours, vs the best peer of the first
    peer family its variant row compares with (variants.py: w1a1 with binary peers (LCE), then float)."""
    from edge_sdk.variants import BASELINE, VARIANTS

    def alike(a, b):  # modelled ms with modelled ms, instructions with instructions
        return (a.modelled_ms is None) == (b.modelled_ms is None)

    for r in rows:
        m = r.metric()
        if m is None:
            continue
        base = [x.metric() for x in rows if x.ours and x.variant == BASELINE and x.threads == r.threads and alike(x, r)]
        if base and base[0]:
            r.speedup_vs_float32 = base[0] / m
        if not r.ours:
            continue
        v = VARIANTS.get(r.variant)
        for fam in v.peer_families if v else ():
            peers = [p for p in rows if not p.ours and p.family == fam and p.threads == r.threads and p.metric()
                     and alike(p, r)]
            if peers:
                best = min(peers, key=lambda p: p.metric())
                r.vs_best_peer, r.best_peer = m / best.metric(), f"{best.engine} {best.variant}"
                break
