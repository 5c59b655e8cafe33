"""tune_model: for each kernel workload of a model, time ours, search with MetaSchedule, keep the winner.

    result = tune_model(model, target, search=Search(trials=32), out_root=user_root(), events=...)

Per workload (in the model's call order):
1. A record for it with at least `trials` trials, in out_root/<target>/ or where compile looks
   (the user's and the shipped records): skipped. That is how an interrupted tune resumes:
   finished workloads are recorded, the rest are not.
2. MetaSchedule searches the unscheduled workload. Its database lives under
   $EDGE_SDK_CACHE/tune/<target>/<kind>-<hash>/ and keeps every measured candidate, so the trials
   already done there count: a tune cut mid-search continues with the trials left.
3. Ours and the best candidate are timed again, interleaved, by the same runner (measure.py).
4. The record is written (atomically): the trace when the tuned schedule is faster by more than
   `margin`, else winner "ours", so compile keeps ours and the next tune skips it.
"""
from __future__ import annotations

import logging
import statistics
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback, PyMeasureCallback

from edge_sdk.runtime.bundle import cache_root
from edge_sdk.tune.kernels import Workload
from edge_sdk.tune.measure import Remote
from edge_sdk.tune import store

# Evolutionary search sized for tens of trials, not thousands: the stock population (512) costs
# ~50 s of sampling before the first candidate here; 128 with 2 genetic rounds takes a few seconds.
POPULATION = 128
GENETIC_ITERS = 2
TRIALS_PER_ITER = 8  # a batch is also the unit an interrupted search loses at most
MARGIN = 0.03  # a tuned schedule must be this much faster than ours to be kept (timing noise)


@contextmanager
def metaschedule_logging():
    """Quiet MetaSchedule's console (its log files under the work dir keep the detail) for one tune.

    MetaSchedule 0.27 re-runs logging.dictConfig on every tune and lists the logger's current handlers by
    name in it: a handler without a name (pytest's LogCaptureHandler, an application's own) makes it fail
    with "'NoneType' object has no attribute 'format'". Unnamed handlers are detached for the call."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    logger.setLevel(logging.WARNING)
    unnamed = [h for h in logger.handlers if h.get_name() is None]
    for h in unnamed:
        logger.removeHandler(h)
    try:
        yield
    finally:
        for h in unnamed:
            logger.addHandler(h)


@dataclass
class Row:
    workload: Workload
    status: str  # "tuned" (tuned schedule kept), "ours" (ours kept), "recorded" (skipped), "failed"
    ours_ms: float | None = None
    tuned_ms: float | None = None
    trials: int = 0
    record: Path | None = None
    note: str = ""

    def to_json(self) -> dict:
        w = self.workload
        return {"kernel": w.name, "workload": w.description, "hash": w.whash, "layers": w.layers,
                "status": self.status, "ours_ms": self.ours_ms, "tuned_ms": self.tuned_ms,
                "trials": self.trials, "record": str(self.record) if self.record else None, "note": self.note}


@dataclass
class TuneResult:
    target: str
    out: Path
    rows: list[Row] = field(default_factory=list)
    untunable: list[str] = field(default_factory=list)
    prices: dict | None = None  # modelled clock only: {"run": priced under qemu, "cached": from the cache, "cut": of
    # those run, how many were cut against ours after their first run (their price an estimate)}

    def __str__(self) -> str:
        lines = [f"tuned {len(self.rows)} kernel workload(s) for {self.target}; records in {self.out / self.target}"]
        for r in self.rows:
            t = f"{r.tuned_ms:.4f}" if r.tuned_ms is not None else "-"
            o = f"{r.ours_ms:.4f}" if r.ours_ms is not None else "-"
            lines.append(f"  {r.workload.name:<14} {r.workload.description:<48} ours {o} ms  tuned {t} ms  "
                         f"{r.trials:>4} trials  -> {r.status}{'  ' + r.note if r.note else ''}")
        if self.untunable:
            lines.append(f"  not tunable (no workload on the kernel): {', '.join(self.untunable)}")
        if self.prices:
            lines.append(f"  modelled prices: {self.prices['run']} run under qemu ({self.prices['cut']} cut against ours after "
                         f"their first run), {self.prices['cached']} from the cache")
        return "\n".join(lines)


class Events:
    """What the CLI's progress display hears; the default says nothing."""

    def start(self, index: int, total: int, wl: Workload, *, trials: int, done: int,
              ours_ms: float | None = None) -> None: ...
    def batch(self, measured: int, best_ms: float | None) -> None: ...
    def stage(self, text: str) -> None: ...
    def end(self, row: Row) -> None: ...


@derived_object
class _BatchCallback(PyMeasureCallback):
    def __init__(self, events: Events):
        super().__init__()
        self.events = events

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        secs = [statistics.median(float(s) for s in r.run_secs) for r in runner_results
                if r.error_msg is None and r.run_secs]
        self.events.batch(len(measure_candidates), min(secs) * 1e3 if secs else None)


def work_dir(target, wl: Workload) -> Path:
    return cache_root() / "tune" / target.name / f"{wl.kind}-{wl.whash}"


@dataclass(frozen=True)
class Search:
    """How much and how strictly to tune: MetaSchedule trials per workload, the search seed, and how much
    faster (fraction) the tuned schedule must be to be kept; tests pass margin -inf to keep it whatever
    the timings say (a tuned record to apply, on any machine)."""

    trials: int
    seed: int = 0
    margin: float = MARGIN


def tune_model(model, target, *, search: Search, out_root: Path, kernels: list[str] = (),
               remote: Remote | None = None, events: Events | None = None) -> TuneResult:
    """Tune each kernel workload of `model` (or those named in `kernels`) and write its record; candidates
    are timed on `remote` (a fleet device) when given, else on this machine."""
    from edge_sdk.tune.kernels import collect, select
    from edge_sdk.tune.measure import Measurer, check_local

    if remote is None:
        check_local(target)
    ev = events or Events()
    ev.stage(f"lowering {model.name} for {target.name}")
    workloads, plain = collect(model, target)
    workloads = select(workloads, list(kernels))
    result = TuneResult(target.name, Path(out_root), untunable=plain)
    measurer = Measurer(target, remote=remote)
    try:
        for i, wl in enumerate(workloads):
            result.rows.append(_tune_one(wl, (i, len(workloads)), target, search=search, out_root=Path(out_root),
                                         measurer=measurer, events=ev))
    finally:
        cache = getattr(measurer.runner, "cache", None)
        if cache is not None:
            result.prices = {"run": cache.misses, "cached": cache.hits, "cut": measurer.runner.cut}
        measurer.close()
    return result


def _tune_one(wl: Workload, at: tuple[int, int], target, *, search: Search, out_root, measurer, events) -> Row:
    """Workload `at` = (index, total) of the session: recorded already, or searched, timed and recorded."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    (index, total), trials = at, search.trials
    rec = store.RecordSet([out_root, *store.default_roots()], target).lookup(wl.func)
    if rec is not None and rec.data["trials"] >= trials:
        events.start(index, total, wl, trials=trials, done=trials)
        row = Row(wl, "recorded", rec.data["ours_ms"], rec.data.get("tuned_ms"), rec.data["trials"], rec.path,
                  note=f"winner {rec.data['winner']}")
        events.end(row)
        return row
    mod = _normalize_mod(wl.func)
    wdir = work_dir(target, wl)
    wdir.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(wdir))
    done = len(db)
    (first,) = measurer.time([wl.scheduled], rounds=1)  # for the progress line; the verdict is timed below
    events.start(index, total, wl, trials=trials, done=min(done, trials), ours_ms=first * 1e3)
    tvm_target = target.tvm_target()
    if done < trials:
        left = trials - done
        with metaschedule_logging(), measurer.cutting():
            ms.tune_tir(mod, tvm_target, str(wdir), max_trials_global=left, num_trials_per_iter=min(left, TRIALS_PER_ITER),
                        builder=measurer.builder, runner=measurer.runner, database=db,
                        strategy=ms.search_strategy.EvolutionarySearch(population_size=POPULATION,
                                                                       genetic_num_iters=GENETIC_ITERS),
                        measure_callbacks=[*MeasureCallback.create("default"), _BatchCallback(events)],
                        num_tuning_cores=1, seed=search.seed + done)
    done = len(db)
    best = db.get_top_k(db.commit_workload(mod), 1)
    events.stage("timing ours against the best candidate")
    if not best:
        (ours,) = measurer.time([wl.scheduled])
        row = Row(wl, "ours", ours * 1e3, None, done, note="no valid candidate")
    else:
        trace = store.trace_json(best[0].trace)
        tuned_func = store.replay(wl.func, trace)
        ours, tuned = measurer.time([wl.scheduled, tuned_func])
        won = tuned < ours * (1 - search.margin)
        row = Row(wl, "tuned" if won else "ours", ours * 1e3, tuned * 1e3, done)
    import tvm

    data = {"kernel": wl.description, "kernel_name": wl.name, "kind": wl.kind, "layers": wl.layers,
            "workload_hash": wl.whash, "workload": store.encode_workload(wl.func),
            "target": store.target_identity(target), "winner": row.status,
            "trace": trace if row.status == "tuned" else None,
            "ours_ms": row.ours_ms, "tuned_ms": row.tuned_ms,
            "speedup": round(row.ours_ms / row.tuned_ms, 3) if row.tuned_ms else None,
            "trials": done, "tvm": tvm.__version__, "date": store.now(), "machine": store.machine(),
            "runner": measurer.where, "timing": measurer.timing}
    row.record = store.write_record(out_root, target.name, wl.kind, data)
    events.end(row)
    return row
