"""MetaSchedule on a Pi nobody has: candidates timed by the modelled Cortex-A53 clock (issue 20 item 2).

    builder = PooledBuilder(export_for(target))      # a cross-linked .so, as for a real device
    runner = ModelledRunner(target)                  # run_secs = modelled A53 seconds of one call

Per candidate: the bundle's aarch64 edge-runner runs `--kernel cand.so --warmup 0 --number K --repeat 1`
under qemu-aarch64 with libtiming.so for K=1 and K=2 (timing.run.profile_program: the same fixed work
directory and deterministic guest as every counted run); the difference is one call's block profile,
which the A53 timing model prices in cycles at the target's clock (timing.api.price). These are modelled
Pi seconds, not a measurement: deterministic, so one repeat is enough. A candidate that fails to run
becomes that candidate's error_msg, never an exception out of run().

What makes a tune of a whole model affordable (about 1,000 candidates for MobileNetV1 at 32 trials):
- the candidates of a batch run `workers` at a time (default: one per core, the qemu work-directory slots
  that let counted runs proceed at once), while the builder already links `workers` at a time;
- a price is a pure function of the library's bytes, the call's arguments, the runner, the timing model
  and the target, so it is kept on disk under that key (PriceCache): a candidate that compiles to a library
  already priced (MetaSchedule proposes such duplicates), our schedule timed at a workload's start and again
  for the verdict, the best candidate re-built from its trace for the verdict, and a tune resumed after a
  cut are priced once, not again;
- while searching, a candidate is compared with ours after its first run (K=1: start-up, the first call and one
  more): the two runs' difference, over their two calls, plus ours' one call estimates the candidate's call
  (same arguments, so the same buffers touched cold: the first calls differ from the warm ones alike), and a
  candidate estimated above CUT x ours is not run again (its run_secs is that estimate, never cached as a price). Most MetaSchedule candidates of our
  kernels cost 1.4-8x ours (MobileNetV1's stem and a 196x512->512 GEMM, first 8 trials each), so the second run
  (start-up and three calls of the five) is mostly saved. A candidate can only win the workload's verdict,
  which prices ours and the best exactly (no cut), and the cut keeps every candidate within CUT x ours exact.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerInput, RunnerResult

from edge_sdk.errors import EdgeError

ENTRY = "main"
KS = (1, 2)
CUT = 2.0  # while searching: a candidate whose first run estimates it above CUT x ours is not run again


@dataclass(frozen=True)
class Price:
    """Modelled A53 cycles of one call (`call`) and of the whole K=KS[0] run (`first_run`: start-up, the first call
    and KS[0] calls); `estimated`: `call` is the first-run estimate of a candidate cut against ours."""

    call: float
    first_run: float
    estimated: bool = False


@derived_object
class _Done(PyRunnerFuture):
    def __init__(self, result: RunnerResult):
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return self._result


def default_workers() -> int:
    """Counted qemu runs at once: the work-directory slots (EDGE_SDK_QEMU_SLOTS, else the host's cores).
    Without root the runs take turns on one locked directory anyway, so extra workers only wait."""
    from edge_sdk.qemu.workdir import SLOTS_ENV

    return max(1, int(os.environ.get(SLOTS_ENV) or os.cpu_count() or 1))


class PriceCache:
    """Modelled seconds of one call by price key, one small JSON file each under `root` (atomic writes).
    Without a root (None) it keeps nothing and every lookup misses."""

    def __init__(self, root: Path | None):
        self.root = Path(root) if root is not None else None
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()  # the runner's workers count here at once

    def get(self, key: str) -> Price | None:
        price = None
        if self.root is not None:
            try:
                d = json.loads((self.root / f"{key}.json").read_text())
                price = Price(float(d["modelled_cycles"]), float(d["first_run_cycles"]))
            except (OSError, ValueError, KeyError, TypeError):
                price = None
        with self._lock:
            if price is None:
                self.misses += 1
            else:
                self.hits += 1
        return price

    def put(self, key: str, price: Price) -> None:
        if self.root is None or price.estimated:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{key}.json"
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{threading.get_ident()}")
        tmp.write_text(json.dumps({"modelled_cycles": price.call, "first_run_cycles": price.first_run}))
        os.replace(tmp, path)


def price_key(artifact: str, args: list, target, runner: Path) -> str:
    """What a modelled price depends on: the library's bytes, the arguments, the runner bundle, the K runs,
    the timing model's version and the target (clock, memory, qemu cpu)."""
    from edge_sdk.timing.package_figures import model_version

    h = hashlib.sha256(Path(artifact).read_bytes())
    h.update(json.dumps({"args": args, "entry": ENTRY, "ks": KS, "runner": runner.parent.parent.name,
                         "timing": model_version(), "target": target.name, "cpu": target.qemu_cpu()},
                        sort_keys=True).encode())
    return h.hexdigest()[:32]


def _runner() -> Path:
    from edge_sdk.runtime.bundle import ensure_bundle

    return ensure_bundle("aarch64") / "bin" / "edge-runner"


def price_runs(artifact: str, args: list, target, *, runner: Path | None = None, ours: Price | None = None,
               cut: float = CUT) -> Price:
    """Run the candidate library `artifact` under qemu with libtiming.so for K=KS[0], then (unless cut against
    `ours`, see the module docstring) K=KS[1], in one counted-run work directory, and price them."""
    from edge_sdk.qemu import runner as E
    from edge_sdk.timing import qemu
    from edge_sdk.timing.api import price
    from edge_sdk.timing.profile import Profile, per_inference

    runner = runner or _runner()
    cpu = target.qemu_cpu()
    prefix = E.runner_prefix(cpu)

    def argv(k: int) -> list[str]:
        return [str(runner), "--kernel", "./cand.so", "--func", ENTRY, "--args", json.dumps(args), "--warmup", "0",
                "--number", str(k), "--repeat", "1", "--min-repeat-ms", "0", "--threads", "1"]

    def cycles(pi) -> float:
        return float(price(pi, target, layers=0)["modelled_cycles"])

    runs = {}
    with E.workdir() as work:
        (work / "cand.so").write_bytes(Path(artifact).read_bytes())
        (work / "cand.so").chmod(0o755)
        for k in KS:
            out = work / f"timing-{k}.txt"
            E.count_once(argv(k), prefix=prefix, cpu=cpu, work=work, guest_env={"TVM_NUM_THREADS": "1"},
                         timing=qemu.plugin_args(out, threads=1, roots=(prefix, runner.parent)))
            runs[k] = qemu.read_run(out)
            if k == KS[0]:
                empty = Profile([], {}, {}, [], {})
                first = cycles(per_inference(empty, runs[k], k_low=0, k_high=1, meta={"threads": 1}))
                if ours is not None:
                    # first = S + F + K.W and ours.first_run = S + F' + K.W' (start-up S, first calls F, F' with
                    # the same cold buffers: F - W ~ F' - W'), so W ~ W' + (first - ours.first_run) / (K + 1)
                    estimate = ours.call + (first - ours.first_run) / (KS[0] + 1)
                    if estimate > cut * ours.call:
                        return Price(estimate, first, estimated=True)
    pi = per_inference(runs[KS[0]], runs[KS[1]], k_low=KS[0], k_high=KS[1],
                       meta={"k_low": KS[0], "k_high": KS[1], "threads": 1})
    return Price(cycles(pi), first)


def modelled_price(artifact: str, args: list, target, *, cache: PriceCache | None = None,
                   runner: Path | None = None, ours: Price | None = None) -> Price:
    """The Price of one call of `main` in `artifact`, from `cache` when it holds it (an exact price is also the
    answer when cutting against `ours`)."""
    runner = runner or _runner()
    key = price_key(artifact, args, target, runner) if cache is not None else None
    if key is not None and (hit := cache.get(key)) is not None:
        return hit
    got = price_runs(artifact, args, target, runner=runner, ours=ours)
    if key is not None:
        cache.put(key, got)
    return got


def modelled_seconds(artifact: str, args: list, target, *, cache: PriceCache | None = None,
                     runner: Path | None = None) -> float:
    """Modelled A53 seconds of one call of `main` in `artifact` (exact: two runs, or the cache)."""
    return modelled_price(artifact, args, target, cache=cache, runner=runner).call / (target.clock_ghz * 1e9)


def price_root(target) -> Path:
    from edge_sdk.runtime.bundle import cache_root

    return cache_root() / "tune" / target.name / "modelled-prices"


@derived_object
class ModelledRunner(PyRunner):
    """A MetaSchedule runner whose run_secs are modelled Cortex-A53 seconds (see the module docstring):
    `workers` candidates priced at once, prices kept in `cache` (default: under the tune cache)."""

    def __init__(self, target, *, workers: int | None = None, cache: PriceCache | None = None):
        super().__init__()
        self.target = target
        self.workers = workers or default_workers()
        self.cache = cache if cache is not None else PriceCache(price_root(target))
        self.ours: Price | None = None  # set while searching (Measurer.cutting): candidates are cut against it
        self.last: list[Price | None] = []  # the prices of the last run() (None: that candidate failed)
        self.cut = 0  # candidates cut so far
        self._runner: Path | None = None

    def run(self, runner_inputs: list[RunnerInput]) -> list[_Done]:
        if self._runner is None:
            from edge_sdk.qemu.runner import runner_prefix

            self._runner = _runner()
            runner_prefix(self.target.qemu_cpu())  # made once here: its first creation is not safe from two threads
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(runner_inputs)))) as pool:
            priced = list(pool.map(self._price, runner_inputs))
        self.last = [p for p, _ in priced]
        self.cut += sum(1 for p in self.last if p is not None and p.estimated)
        return [_Done(r) for _, r in priced]

    def _price(self, inp: RunnerInput) -> tuple[Price | None, RunnerResult]:
        from edge_sdk.tune.device_runner import _arg

        try:
            args = [_arg(a.as_json()) for a in inp.args_info]
            p = modelled_price(inp.artifact_path, args, self.target, cache=self.cache, runner=self._runner,
                               ours=self.ours)
        except (EdgeError, OSError, ValueError) as err:
            return None, RunnerResult(run_secs=None, error_msg=f"modelled A53 run under qemu failed: {err}")
        return p, RunnerResult(run_secs=[p.call / (self.target.clock_ghz * 1e9)], error_msg=None)
