"""MetaSchedule on a Pi nobody has: candidates timed by the modelled Cortex-A53 clock (issue 20 item 2).

    builder = PooledBuilder(export_for(target))      # a cross-linked .so, as for a real device
    runner = ModelledRunner(target)                  # run_secs = modelled A53 seconds of one call

Per candidate: the bundle's aarch64 edge-runner runs `--kernel cand.so --warmup 0 --number K --repeat 1`
under qemu-aarch64 with libtiming.so for K=1 and K=2 (timing.run.profile_program: the same fixed work
directory and deterministic guest as every counted run); the difference is one call's block profile,
which the A53 timing model prices in cycles at the target's clock (timing.api.price). These are modelled
Pi seconds, not a measurement: deterministic, so one repeat is enough. A candidate that fails to run
becomes that candidate's error_msg, never an exception out of run().
"""
from __future__ import annotations

import json

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


def modelled_seconds(artifact: str, args: list, target) -> float:
    """Modelled A53 seconds of one call of `main` in the candidate library `artifact`."""
    from edge_sdk.runtime.bundle import ensure_bundle
    from edge_sdk.timing.api import price
    from edge_sdk.timing.run import profile_program

    runner = ensure_bundle("aarch64") / "bin" / "edge-runner"

    def argv(k: int) -> list[str]:
        return [str(runner), "--kernel", "./cand.so", "--func", ENTRY, "--args", json.dumps(args), "--warmup", "0",
                "--number", str(k), "--repeat", "1", "--min-repeat-ms", "0", "--threads", "1"]

    pi = profile_program(argv, ks=KS, cpu=target.qemu_cpu(), files={"cand.so": artifact},
                         guest_env={"TVM_NUM_THREADS": "1"})
    return float(price(pi, target, layers=0)["modelled_cycles"]) / (target.clock_ghz * 1e9)


@derived_object
class ModelledRunner(PyRunner):
    """A MetaSchedule runner whose run_secs are modelled Cortex-A53 seconds (see the module docstring)."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def run(self, runner_inputs: list[RunnerInput]) -> list[_Done]:
        from edge_sdk.tune.device_runner import _arg

        out = []
        for inp in runner_inputs:
            try:
                args = [_arg(a.as_json()) for a in inp.args_info]
                out.append(_Done(RunnerResult(run_secs=[modelled_seconds(inp.artifact_path, args, self.target)],
                                              error_msg=None)))
            except (EdgeError, OSError, ValueError) as err:
                out.append(_Done(RunnerResult(run_secs=None,
                                              error_msg=f"modelled A53 run under qemu failed: {err}")))
        return out
