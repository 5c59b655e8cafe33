"""Run a compiled model with the runtime bundle's edge-runner, on this machine.

Why through the bundle and not `tvm.runtime` in-process: the host check then exercises exactly
what a device runs (same runner, same libtvm_runtime), and an aarch64 build runs under
`qemu-aarch64 -cpu cortex-a53` the way a Pi 3 would run it (emulated times are not A53 times).

    result = run_compiled(lib=Path("model.so"), params=Path("params.bin"), input=x,
                          arch="aarch64", emulate_cpu="cortex-a53", how=LocalRun(repeat=10))
    result.output, result.median_ms, result.load_ms
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.errors import MissingDependency, RuntimeFailure, UsageError
from edge_sdk.runtime.bundle import ensure_bundle, read_bundle_manifest

CROSS_SYSROOT = {"aarch64": Path("/usr/aarch64-linux-gnu")}
_QEMU = {"aarch64": ("qemu-aarch64", "qemu-user")}


@dataclass
class RunnerResult:
    """What one runner invocation measured. Times are in ms; emulated times are qemu's, not a Pi's."""

    output: np.ndarray
    latencies_ms: list[float]
    median_ms: float
    load_ms: float
    first_ms: float
    threads: int
    arch: str
    emulated: bool
    command: list[str]
    bundle_version: str
    wall_ms: float  # the whole runner process, start-up (loading libtvm_runtime) included
    raw: dict = field(repr=False)
    profile: dict | None = field(default=None, repr=False)  # the runner's --profile object (runtime/profile.py)

    def __str__(self) -> str:
        where = f"{self.arch}, emulated" if self.emulated else self.arch
        return (f"median {self.median_ms:.3f} ms over {len(self.latencies_ms)} runs ({where}, "
                f"{self.threads} thread(s)); load {self.load_ms:.1f} ms, process {self.wall_ms:.0f} ms, first run {self.first_ms:.2f} ms; "
                f"output {self.output.dtype}{list(self.output.shape)}")


def host_arch() -> str:
    return platform.machine()


def runner_command(bundle: Path, *, arch: str, emulate_cpu: str | None) -> tuple[list[str], bool]:
    """The argv prefix that starts bundle's runner here, and whether it is emulated."""
    runner = str(bundle / "bin" / "edge-runner")
    if arch == host_arch():
        return [runner], False
    if arch not in _QEMU:
        raise UsageError(f"cannot run {arch} code on this {host_arch()} machine (no emulator known)")
    qemu, package = _QEMU[arch]
    if shutil.which(qemu) is None:
        raise MissingDependency(f"running {arch} code here needs '{qemu}'", hint=f"apt-get install {package}")
    sysroot = CROSS_SYSROOT[arch]
    if not (sysroot / "lib").is_dir():
        raise MissingDependency(f"running {arch} code here needs the {arch} C/C++ libraries in {sysroot}",
                                hint="apt-get install g++-aarch64-linux-gnu")
    cpu = ["-cpu", emulate_cpu] if emulate_cpu else []
    return [qemu, *cpu, "-L", str(sysroot), runner], True


@dataclass(frozen=True)
class LocalRun:
    """How run_compiled runs the runner here (fleet/remote.py's RemoteRun is the device's).

    threads: TVM_NUM_THREADS; warmup untimed runs, then `repeat` timed ones (more until min_time_ms
    have passed); timeout_s bounds the runner process; profile: `repeat` more runs with every VM
    call timed (RunnerResult.profile; per-layer times via runtime/profile.py)."""

    threads: int = 1
    warmup: int = 1
    repeat: int = 10
    min_time_ms: float = 0
    timeout_s: float = 900
    profile: bool = False


def run_compiled(*, lib: Path, params: Path, input: np.ndarray, arch: str, emulate_cpu: str | None,  # noqa: A002
                 how: LocalRun | None = None) -> RunnerResult:
    """Run model `lib` with `params` on `input` using the `arch` runtime bundle.

    Native when `arch` is this machine's, else under qemu with CPU model `emulate_cpu`.
    A failing runner raises RuntimeFailure carrying its stderr.
    """
    how = how or LocalRun()
    threads, warmup, repeat, min_time_ms, timeout_s = how.threads, how.warmup, how.repeat, how.min_time_ms, how.timeout_s
    lib, params = Path(lib), Path(params)
    for what, p in (("model library", lib), ("params file", params)):
        if not p.is_file():
            raise UsageError(f"{p}: {what} not found")
    bundle = ensure_bundle(arch)
    prefix, emulated = runner_command(bundle, arch=arch, emulate_cpu=emulate_cpu)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["TVM_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="edge-run-") as tmp:
        in_path, out_path = Path(tmp) / "input.npy", Path(tmp) / "output.npy"
        np.save(in_path, np.ascontiguousarray(input), allow_pickle=False)  # layout only, not values
        cmd = [*prefix, "--lib", str(lib.resolve()), "--params", str(params.resolve()),
               "--input", str(in_path), "--output", str(out_path), "--warmup", str(warmup),
               "--repeat", str(repeat), "--min-time-ms", str(min_time_ms), "--threads", str(threads)]
        if how.profile:
            cmd.append("--profile")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as e:
            raise RuntimeFailure(f"{lib}: edge-runner ({arch}) did not finish within {timeout_s:.0f} s") from e
        wall_ms = (time.perf_counter() - t0) * 1e3
        if proc.returncode != 0:
            raise RuntimeFailure(f"{lib}: edge-runner ({arch}{', qemu' if emulated else ''}) failed with exit code "
                                 f"{proc.returncode}:\n{proc.stderr.strip()[-4000:]}")
        lines = proc.stdout.strip().splitlines()
        try:
            raw = json.loads(lines[-1])
        except (IndexError, ValueError) as e:
            raise RuntimeFailure(f"{lib}: edge-runner printed no JSON result:\n{proc.stdout[-2000:]}") from e
        output = np.load(out_path, allow_pickle=False)
    return RunnerResult(
        output=output,
        latencies_ms=list(raw["latencies_ms"]),
        median_ms=raw["median_ms"],
        load_ms=raw["load_ms"],
        first_ms=raw["first_ms"],
        threads=raw["threads"],
        arch=arch,
        emulated=emulated,
        command=cmd,
        bundle_version=read_bundle_manifest(bundle)["version"],
        wall_ms=wall_ms,
        raw=raw,
        profile=raw.get("profile"),
    )
