"""The timing model inside the qemu runner's counted runs (edge_sdk/qemu/runner.py): `with timing_session(target=...)`.

Within the session every counted run (count_runner, count_ncnn, count_litert) also loads
libtiming.so; after its K=1 and K=3 runs the per-inference profile is kept by the file it ran
({str(path): PerInference}, what the `with` gives), and with a target the Count gets the model's
figures at that target (Count.modelled: modelled_cycles, modelled_ms, ...). The session installs the
hooks below as the runner's observer (runner.observed_by); the runner never imports the timing model.
"""
from __future__ import annotations

import contextvars
import types
from contextlib import contextmanager
from pathlib import Path

from edge_sdk.qemu.runner import observed_by
from edge_sdk.timing import qemu

_STATE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("edge_sdk_timing_session", default=None)


@contextmanager
def timing_session(*, target=None, layers: int = 12):
    """Counted runs also profile for the timing model; `target` (a targets.Target) also prices them."""
    token = _STATE.set({"target": target, "layers": layers, "seen": {}, "runs": {}, "last": None})
    try:
        with observed_by(_HOOKS):
            yield _STATE.get()["seen"]
    finally:
        _STATE.reset(token)


def _threads(guest_env: dict) -> int:
    return int(guest_env.get("OMP_NUM_THREADS", guest_env.get("TVM_NUM_THREADS", "1")))


def plugin_args(work: Path, k: int, *, roots: tuple, guest_env: dict) -> str | None:
    """libtiming.so's arguments for the run with K inferences, or None outside a session."""
    state = _STATE.get()
    if state is None:
        return None
    return qemu.plugin_args(work / f"timing-{k}.txt", threads=_threads(guest_env), roots=roots)


def collect(work: Path, k: int, guest_env: dict) -> None:
    """Read the run's profile (inside a session)."""
    state = _STATE.get()
    if state is not None:
        state["runs"][k] = qemu.read_run(work / f"timing-{k}.txt")
        state["threads"] = _threads(guest_env)


def finish(k_low: int, k_high: int) -> None:
    """One inference's profile from the K=k_low and K=k_high runs."""
    state = _STATE.get()
    if state is None or not {k_low, k_high} <= set(state["runs"]):
        return
    runs, n = state.pop("runs"), state["threads"]
    state["runs"] = {}
    state["last"] = qemu.per_inference(runs[k_low], runs[k_high], k_low=k_low, k_high=k_high,
                                       meta={"k_low": k_low, "k_high": k_high, "threads": n})


def remember(path: Path, count, files: dict | None = None) -> None:
    """Keep the last profile by `path`; with a target, price it into count.modelled."""
    state = _STATE.get()
    if state is None or state.get("last") is None:
        return
    pi = state["seen"][str(path)] = state.pop("last")
    state["last"] = None
    t = state["target"]
    if t is not None:
        from edge_sdk.timing.model import model_profile

        count.modelled = model_profile(pi, threads_n=pi.meta["threads"], clock_ghz=t.clock_ghz, mem_gbps=t.mem_gbps,
                                       layers=state["layers"], symbol_files=files) | {"target": t.name}


_HOOKS = types.SimpleNamespace(plugin_args=plugin_args, collect=collect, finish=finish, remember=remember)
