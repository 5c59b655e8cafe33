"""Run an aarch64 program under qemu with libtiming.so and model it: microkernels, runners, peers.

`profile_program(argv_for, ks=(n1, n2))` runs argv_for(n) for both n, in the one fixed work
directory the qemu runner (edge_sdk/qemu/runner.py) uses, and returns the per-unit PerInference ((run n2 - run n1) / (n2 - n1)):
per loop iteration for a microkernel, per inference for a model.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edge_sdk.qemu import runner as E
from edge_sdk.timing import qemu
from edge_sdk.timing.profile import PerInference, per_inference


def profile_program(argv_for: Callable[[int], list[str]], *, ks: tuple[int, int], cpu: str = "cortex-a53",
                    threads: int = 1, guest_env: dict[str, str] | None = None,
                    files: dict[str, Path] | None = None) -> PerInference:
    """Per-unit block profile of a guest program run for ks[0] and ks[1] units (files: name -> copy into work)."""
    prefix = E.runner_prefix(cpu)
    runs = {}
    with E.workdir() as work:
        for name, src in (files or {}).items():
            (work / name).write_bytes(Path(src).read_bytes())
            (work / name).chmod(0o755)
        for k in ks:
            out = work / f"timing-{k}.txt"
            argv = argv_for(k)
            args = qemu.plugin_args(out, threads=threads, roots=(prefix, Path(argv[0]).parent))
            E.count_once(argv, prefix=prefix, cpu=cpu, work=work, guest_env=dict(guest_env or {}), timing=args)
            runs[k] = qemu.read_run(out)
    return per_inference(runs[ks[0]], runs[ks[1]], k_low=ks[0], k_high=ks[1],
                         meta={"k_low": ks[0], "k_high": ks[1], "threads": threads})
