"""A53 cost proxy without a Pi: aarch64 instructions per inference, counted under qemu.

Why instructions and not emulated time: qemu's wall time says nothing about an A53, but the number
of guest instructions a model executes is a property of the code, identical run to run once the
guest is deterministic. We run our aarch64 runner and LiteRT's aarch64 wheel under

    qemu-aarch64 -cpu cortex-a53 -L PREFIX -plugin libinsn.so,inline=on -d plugin -D LOG ...

and report (count with K=3 inferences - count with K=1) / 2, so start-up and loading cancel.

What makes the guest deterministic (each item moved counts by thousands when left alone):
- a clock shim (libfakeclock-aarch64.so, LD_PRELOADed into the guest with `-E`): every clock read
  advances 1 ms and getrandom returns constant bytes, so timing loops and printed latencies repeat;
- PYTHONHASHSEED=0, PYTHONSAFEPATH=1, a minimal environment, stdout to a file;
- OPENBLAS_NUM_THREADS=1: numpy's OpenBLAS otherwise starts a thread per core at import, and
  their interleaving moves the count by millions;
- one fixed work directory (serialised with a lock) so every path the guest sees is the same;
- `setarch -R` (no address randomisation), so address-hashed containers iterate alike.
The guest sees a Raspberry Pi 3 /proc/cpuinfo through the -L prefix: LiteRT crashes on qemu 7.2's
x86 cpuinfo, and with the Pi's, XNNPACK and ruy pick their A53 kernels (which run 1.2-1.6x more
instructions than the generic ones; instructions are not cycles).

Tools: tools/build_qemu_plugins.sh builds libinsn.so and the shim; `--guest-python` also unpacks
an aarch64 CPython 3.11 from Debian arm64 packages with the aarch64 numpy + ai-edge-litert wheels
($EDGE_SDK_CACHE/qemu-guest), which LiteRT runs in.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk.errors import MissingDependency, RuntimeFailure
from edge_sdk.runtime.bundle import cache_root, ensure_bundle

SYSROOT = Path("/usr/aarch64-linux-gnu")
TIME_ENGINE = Path(__file__).resolve().parents[2] / "tools" / "peers" / "time_engine.py"
K_LOW, K_HIGH = 1, 3

_PI3_CORE = ("processor\t: {i}\nBogoMIPS\t: 38.40\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
             "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd03\n"
             "CPU revision\t: 4\n\n")
PI3_CPUINFO = ("".join(_PI3_CORE.format(i=i) for i in range(4)) + "Hardware\t: BCM2835\nRevision\t: a02082\n"
               "Serial\t\t: 0000000000000000\nModel\t\t: Raspberry Pi 3 Model B Rev 1.2\n")
CPUINFO = {"cortex-a53": PI3_CPUINFO}


@dataclass
class Count:
    """Instructions per inference, and the raw counts it came from."""

    per_inference: float
    counts: dict[int, int]  # K -> instructions of the whole process
    output: np.ndarray | None = None  # our runner's output at K=1 (for the golden check)

    def to_json(self) -> dict:
        return {"per_inference": self.per_inference, "counts": {str(k): v for k, v in self.counts.items()},
                "method": f"(count(K={K_HIGH}) - count(K={K_LOW})) / {K_HIGH - K_LOW}, qemu libinsn, deterministic"}


def plugin_dir() -> Path:
    """The newest built plugin directory (libinsn.so + the clock shim)."""
    dirs = sorted((p.parent for p in (cache_root() / "qemu-plugins").glob("*/.built")),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for d in dirs:
        if (d / "libinsn.so").is_file() and (d / "libfakeclock-aarch64.so").is_file():
            return d
    raise MissingDependency("counting instructions needs QEMU's libinsn.so plugin, which is not built",
                            hint="bash tools/build_qemu_plugins.sh")


def guest_python_dir() -> Path:
    g = cache_root() / "qemu-guest"
    if not (g / ".built").is_file() or not (g / "usr/bin/python3.11").is_file():
        raise MissingDependency("running LiteRT under qemu needs the aarch64 guest Python",
                                hint="bash tools/build_qemu_plugins.sh --guest-python")
    return g


def _write_cpuinfo(prefix: Path, cpu: str) -> None:
    want = CPUINFO.get(cpu)
    if want is None:
        raise MissingDependency(f"no /proc/cpuinfo known for qemu cpu '{cpu}' (known: {', '.join(CPUINFO)})")
    f = prefix / "proc" / "cpuinfo"
    if f.is_file() and f.read_text() == want:
        return
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_name(f"cpuinfo.tmp{os.getpid()}")
    tmp.write_text(want)
    os.replace(tmp, f)


def runner_prefix(cpu: str) -> Path:
    """An -L prefix for our runner: the cross sysroot's libraries plus the device's /proc/cpuinfo."""
    if not (SYSROOT / "lib").is_dir():
        raise MissingDependency(f"running aarch64 code needs {SYSROOT}", hint="apt-get install g++-aarch64-linux-gnu")
    prefix = cache_root() / "qemu-plugins" / f"prefix-{cpu}"
    prefix.mkdir(parents=True, exist_ok=True)
    link = prefix / "lib"
    if not link.is_symlink():
        tmp = prefix / f"lib.tmp{os.getpid()}"
        tmp.symlink_to(SYSROOT / "lib")
        os.replace(tmp, link)
    _write_cpuinfo(prefix, cpu)
    return prefix


@contextmanager
def _workdir():
    """The one fixed directory every counted run uses (paths are part of what the guest computes)."""
    root = cache_root() / "emulate"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        work = root / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _qemu() -> str:
    q = shutil.which("qemu-aarch64")
    if q is None:
        raise MissingDependency("counting instructions needs qemu-aarch64 (dynamic, not -static)",
                                hint="apt-get install qemu-user")
    return q


def count_once(argv: list[str], *, prefix: Path, cpu: str, work: Path, guest_env: dict[str, str],
               timeout_s: float = 1800) -> int:
    """Instructions the whole guest process executes (deterministic), running argv in `work`."""
    plugins = plugin_dir()
    log = work / "insn.log"
    log.unlink(missing_ok=True)
    env_args = []
    for k, v in sorted({"LD_PRELOAD": str(plugins / "libfakeclock-aarch64.so"), **guest_env}.items()):
        env_args += ["-E", f"{k}={v}"]
    cmd = [_qemu(), "-cpu", cpu, "-L", str(prefix), *env_args,
           "-plugin", f"{plugins / 'libinsn.so'},inline=on", "-d", "plugin", "-D", str(log), *argv]
    if shutil.which("setarch"):
        cmd = ["setarch", os.uname().machine, "-R", *cmd]
    host_env = {"PATH": "/usr/bin:/bin", "LANG": "C"}
    with open(work / "stdout.txt", "w") as out, open(work / "stderr.txt", "w") as err:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=err, cwd=work, env=host_env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as e:
            raise RuntimeFailure(f"{argv[0]} under qemu did not finish within {timeout_s:.0f} s") from e
    if proc.returncode != 0:
        tail = (work / "stderr.txt").read_text(errors="replace")[-3000:]
        raise RuntimeFailure(f"{Path(argv[0]).name} under qemu-aarch64 -cpu {cpu} failed with exit code "
                             f"{proc.returncode}:\n{tail}")
    m = re.search(r"insns: (\d+)", log.read_text(errors="replace") if log.is_file() else "")
    if not m:
        raise RuntimeFailure(f"qemu's libinsn plugin reported no count (log {log})")
    return int(m.group(1))


def count_runner(*, lib: Path, params: Path, input: np.ndarray, cpu: str = "cortex-a53",  # noqa: A002
                 ks: tuple[int, ...] = (K_LOW, K_HIGH)) -> Count:
    """Our aarch64 runner (1 thread): K timed calls after the first, per K in ks."""
    bundle = ensure_bundle("aarch64")
    prefix = runner_prefix(cpu)
    counts, output = {}, None
    with _workdir() as work:
        shutil.copy2(lib, work / "model.so")
        shutil.copy2(params, work / "params.bin")
        np.save(work / "input.npy", np.ascontiguousarray(input), allow_pickle=False)
        for k in ks:
            argv = [str(bundle / "bin/edge-runner"), "--lib", "./model.so", "--params", "./params.bin",
                    "--input", "./input.npy", "--output", "./output.npy", "--warmup", "0", "--repeat", str(k),
                    "--min-time-ms", "0", "--threads", "1"]
            counts[k] = count_once(argv, prefix=prefix, cpu=cpu, work=work, guest_env={"TVM_NUM_THREADS": "1"})
            if output is None:
                output = np.load(work / "output.npy", allow_pickle=False)
    return Count(_per_inference(counts), counts, output)


def count_litert(model: Path, *, cpu: str = "cortex-a53", ks: tuple[int, ...] = (K_LOW, K_HIGH)) -> Count:
    """LiteRT's aarch64 wheel (XNNPACK, 1 thread) in the guest Python: K invokes per K in ks."""
    guest = guest_python_dir()
    _write_cpuinfo(guest, cpu)
    counts = {}
    with _workdir() as work:
        shutil.copy2(model, work / "model.tflite")
        shutil.copy2(TIME_ENGINE, work / "time_engine.py")
        for k in ks:
            argv = [str(guest / "usr/bin/python3.11"), "time_engine.py", "--engine", "litert",
                    "--model", "model.tflite", "--threads", "1", "--count", str(k)]
            counts[k] = count_once(argv, prefix=guest, cpu=cpu, work=work, guest_env={
                "PYTHONPATH": str(guest / "site"), "PYTHONHASHSEED": "0", "PYTHONSAFEPATH": "1",
                "PYTHONDONTWRITEBYTECODE": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
            json.loads((work / "stdout.txt").read_text().strip().splitlines()[-1])  # it did run K inferences
    return Count(_per_inference(counts), counts)


def _per_inference(counts: dict[int, int]) -> float:
    if K_LOW not in counts or K_HIGH not in counts:
        return float("nan")
    return (counts[K_HIGH] - counts[K_LOW]) / (K_HIGH - K_LOW)
