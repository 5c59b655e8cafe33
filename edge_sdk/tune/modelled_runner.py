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
  cut are priced once, not again.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerInput, RunnerResult

from edge_sdk.errors import EdgeError

ENTRY = "main"
KS = (1, 2)


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

    def get(self, key: str) -> float | None:
        secs = None
        if self.root is not None:
            try:
                secs = float(json.loads((self.root / f"{key}.json").read_text())["modelled_seconds"])
            except (OSError, ValueError, KeyError, TypeError):
                secs = None
        with self._lock:
            if secs is None:
                self.misses += 1
            else:
                self.hits += 1
        return secs

    def put(self, key: str, secs: float, *, cycles: float) -> None:
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{key}.json"
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{id(self)}")
        tmp.write_text(json.dumps({"modelled_seconds": secs, "modelled_cycles": cycles}))
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


def modelled_cycles(artifact: str, args: list, target, *, runner: Path | None = None) -> float:
    """Modelled A53 cycles of one call of `main` in the candidate library `artifact` (two qemu runs)."""
    from edge_sdk.timing.api import price
    from edge_sdk.timing.run import profile_program

    runner = runner or _runner()

    def argv(k: int) -> list[str]:
        return [str(runner), "--kernel", "./cand.so", "--func", ENTRY, "--args", json.dumps(args), "--warmup", "0",
                "--number", str(k), "--repeat", "1", "--min-repeat-ms", "0", "--threads", "1"]

    pi = profile_program(argv, ks=KS, cpu=target.qemu_cpu(), files={"cand.so": artifact},
                         guest_env={"TVM_NUM_THREADS": "1"})
    return float(price(pi, target, layers=0)["modelled_cycles"])


def modelled_seconds(artifact: str, args: list, target, *, cache: PriceCache | None = None,
                     runner: Path | None = None) -> float:
    """Modelled A53 seconds of one call of `main` in `artifact`, from `cache` when it holds the price."""
    runner = runner or _runner()
    key = price_key(artifact, args, target, runner) if cache is not None else None
    if key is not None and (secs := cache.get(key)) is not None:
        return secs
    cycles = modelled_cycles(artifact, args, target, runner=runner)
    secs = cycles / (target.clock_ghz * 1e9)
    if key is not None:
        cache.put(key, secs, cycles=cycles)
    return secs


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
        self._runner: Path | None = None

    def run(self, runner_inputs: list[RunnerInput]) -> list[_Done]:
        if self._runner is None:
            from edge_sdk.qemu.runner import runner_prefix

            self._runner = _runner()
            runner_prefix(self.target.qemu_cpu())  # made once here: its first creation is not safe from two threads
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(runner_inputs)))) as pool:
            results = list(pool.map(self._price, runner_inputs))
        return [_Done(r) for r in results]

    def _price(self, inp: RunnerInput) -> RunnerResult:
        from edge_sdk.tune.device_runner import _arg

        try:
            args = [_arg(a.as_json()) for a in inp.args_info]
            secs = modelled_seconds(inp.artifact_path, args, self.target, cache=self.cache, runner=self._runner)
        except (EdgeError, OSError, ValueError) as err:
            return RunnerResult(run_secs=None, error_msg=f"modelled A53 run under qemu failed: {err}")
        return RunnerResult(run_secs=[secs], error_msg=None)
