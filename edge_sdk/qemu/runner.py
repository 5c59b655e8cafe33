"""The qemu runner: aarch64 programs (our runner, LiteRT, ncnn) under qemu-aarch64 with QEMU's plugins,
counted per inference. bench (--emulate), the timing model (edge_sdk/timing) and the schedule chooser run
their aarch64 code through it; it imports neither of them (the timing model watches runs via observed_by).

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
- one fixed work directory (edge_sdk/qemu/workdir.py: as root, each run's own slot bind-mounted on it) so
  every path the guest sees is the same;
- `setarch -R` (no address randomisation), so address-hashed containers iterate alike.
The guest sees a Raspberry Pi 3 /proc/cpuinfo through the -L prefix: LiteRT crashes on qemu 7.2's
x86 cpuinfo, and with the Pi's, XNNPACK and ruy pick their A53 kernels (which run 1.2-1.6x more
instructions than the generic ones; instructions are not cycles).

Memory (`--memory`): the same runs also load QEMU's contrib/plugins/cache.c (libcache.so) set up as a
Pi 3B's caches (CacheConfig); rows gain L1D and L2 misses per inference (same K=3 minus K=1, halved),
DRAM bytes (L2 misses x 64 B line fills); bench prices them (timing/proxy.py's A53Model). What qemu 7.2's cache.c
is (read in its source): per-core L1 I, L1 D and unified L2, 64 B lines, virtual addresses in user
mode; each guest memory access looks up its first byte (translate-a64.c makes a 128-bit ldr/ld1
register two 64-bit accesses); stores allocate like loads; no prefetcher, no dirty bits (dirty
write-backs are not counted); one L1 I lookup per executed instruction, L1 I misses go to the L2
too. Eviction LRU: the A53 TRM says pseudo-random for its L1 D, but the plugin's `rand` is seeded
from /dev/urandom; LRU is deterministic, and the same guest run gives the same misses
(tests/test_emulate_memory.py). It is slower: the plugin calls back on every instruction and access.

Tools: edge_sdk/qemu/build_plugins.sh (tools/build_qemu_plugins.sh in a checkout) builds libinsn.so,
libcache.so, libtiming.so and the shim; `--guest-python` also unpacks an aarch64 CPython 3.11 from Debian
arm64 packages with the aarch64 numpy + ai-edge-litert wheels ($EDGE_SDK_CACHE/qemu-guest), which LiteRT
runs in.
"""
from __future__ import annotations

import contextvars
import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from importlib import resources
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from edge_sdk.errors import MissingDependency, RuntimeFailure, UsageError
from edge_sdk.qemu import build_hint
from edge_sdk.qemu.workdir import LOCK_LOG, run_kwargs, workdir  # noqa: F401 (LOCK_LOG, workdir: re-exported)
from edge_sdk.runtime.bundle import cache_root, ensure_bundle
from edge_sdk.targets import CacheConfig, by_emulation_cpu

SYSROOT = Path("/usr/aarch64-linux-gnu")
# What runs in the guest Python for a peer count: bench/peers' time_engine.py and the engine's module, package
# data to this runner (copied, never imported here: the runner stays below bench).
PEER_ENGINES = resources.files("edge_sdk") / "bench" / "peers"
K_LOW, K_HIGH = 1, 3

# The Pi rows' /proc/cpuinfo and caches live in the target table (edge_sdk/targets.py), keyed here by qemu cpu.
CPUINFO: dict[str, str] = by_emulation_cpu("cpuinfo")
CACHES: dict[str, CacheConfig] = by_emulation_cpu("caches")


def caches_for(cpu: str) -> CacheConfig:
    if cpu not in CACHES:
        raise UsageError(f"--memory: no cache configuration for qemu cpu '{cpu}' (known: {', '.join(CACHES)})")
    return CACHES[cpu]
CACHE_KEYS = ("l1d_accesses", "l1d_misses", "l1i_accesses", "l1i_misses", "l2_accesses", "l2_misses")


@dataclass
class Count:
    """Instructions (and, with memory, cache counters) per inference, and the raw counts they came from."""

    per_inference: float
    counts: dict[int, int]  # K -> instructions of the whole process
    output: np.ndarray | None = None  # our runner's output at K=1 (for the golden check)
    memory: dict | None = None  # per inference: CACHE_KEYS, dram_bytes; raw: {K: {key: count}}; config
    modelled: dict | None = None  # the A53 timing model's figures (timing_session with a target)

    def to_json(self) -> dict:
        return {"per_inference": self.per_inference, "counts": {str(k): v for k, v in self.counts.items()},
                "method": f"(count(K={K_HIGH}) - count(K={K_LOW})) / {K_HIGH - K_LOW}, qemu libinsn, deterministic",
                "memory": self.memory, "modelled": self.modelled}


def plugin_dir(*, memory: bool = False, timing: bool = False) -> Path:
    """The newest built plugin directory (libinsn.so + the clock shim; + libcache.so for memory,
    + libtiming.so for the A53 timing model)."""
    dirs = sorted((p.parent for p in (cache_root() / "qemu-plugins").glob("*/.built")),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    need = ("libinsn.so", "libfakeclock-aarch64.so") + (("libcache.so",) if memory else ()) + (
        ("libtiming.so",) if timing else ())
    for d in dirs:
        if all((d / n).is_file() for n in need):
            return d
    has_insn = any((d / "libinsn.so").is_file() for d in dirs)
    what = ("the A53 timing plugin libtiming.so (edge_sdk/qemu/plugins/timing.c)" if timing and has_insn else
            "QEMU's libcache.so plugin (contrib/plugins/cache.c)" if memory and has_insn else
            "QEMU's libinsn.so plugin")
    raise MissingDependency(f"counting {'cache misses' if memory else 'instructions'} needs {what}, which is not built",
                            hint=build_hint())


def parse_cache_log(text: str) -> dict[str, int]:
    """cache.c's totals from its log: the header line, then one line per core ("0  <numbers>").

    In user mode there is one core (no "sum" line); rates are printed with a '%' and skipped.
    """
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.startswith("core #, data accesses")), None)
    if head is None or "l2 misses" not in lines[head]:
        raise RuntimeFailure("qemu's cache plugin reported no totals with an L2 (is libcache.so from qemu >= 7.1?)")
    rows = [ln.split() for ln in lines[head + 1:] if ln.strip() and ln.split()[0].isdigit()]
    if not rows:
        raise RuntimeFailure("qemu's cache plugin printed a header but no per-core line")
    nums = [[int(x) for x in r[1:] if not x.endswith("%")] for r in rows]
    if any(len(n) != len(CACHE_KEYS) for n in nums):
        raise RuntimeFailure(f"qemu's cache plugin line not understood: {rows[0]!r}")
    return {k: sum(n[i] for n in nums) for i, k in enumerate(CACHE_KEYS)}


def guest_python_dir() -> Path:
    g = cache_root() / "qemu-guest"
    if not (g / ".built").is_file() or not (g / "usr/bin/python3.11").is_file():
        raise MissingDependency("running LiteRT under qemu needs the aarch64 guest Python",
                                hint=build_hint(guest_python=True))
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


def _qemu() -> str:
    q = shutil.which("qemu-aarch64")
    if q is None:
        raise MissingDependency("counting instructions needs qemu-aarch64 (dynamic, not -static)",
                                hint="apt-get install qemu-user")
    return q


def count_once(argv: list[str], *, prefix: Path, cpu: str, work: Path, guest_env: dict[str, str],
               timeout_s: float = 1800, caches: CacheConfig | None = None,
               timing: str | None = None) -> int | tuple[int, dict[str, int]]:
    """Instructions the whole guest process executes (deterministic), running argv in `work`.

    With `caches`, the same run also loads libcache.so and returns (instructions, cache totals);
    with `timing` (libtiming.so's arguments, edge_sdk/timing/qemu.py), also the A53 timing plugin.
    """
    plugins = plugin_dir(memory=caches is not None, timing=timing is not None)
    log = work / "insn.log"
    log.unlink(missing_ok=True)
    env_args = []
    for k, v in sorted({"LD_PRELOAD": str(plugins / "libfakeclock-aarch64.so"), **guest_env}.items()):
        env_args += ["-E", f"{k}={v}"]
    cmd = [_qemu(), "-cpu", cpu, "-L", str(prefix), *env_args,
           "-plugin", f"{plugins / 'libinsn.so'},inline=on", "-d", "plugin", "-D", str(log)]
    if caches is not None:
        cmd[-4:-4] = ["-plugin", f"{plugins / 'libcache.so'},{caches.plugin_args()}"]
    if timing is not None:
        cmd[-4:-4] = ["-plugin", f"{plugins / 'libtiming.so'},{timing}"]
    cmd += argv
    if shutil.which("setarch"):
        cmd = ["setarch", os.uname().machine, "-R", *cmd]
    host_env = {"PATH": "/usr/bin:/bin", "LANG": "C"}
    with open(work / "stdout.txt", "w") as out, open(work / "stderr.txt", "w") as err:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=err, env=host_env, timeout=timeout_s, check=False,
                                  **run_kwargs(work))
        except subprocess.TimeoutExpired as e:
            raise RuntimeFailure(f"{argv[0]} under qemu did not finish within {timeout_s:.0f} s") from e
    if proc.returncode != 0:
        tail = (work / "stderr.txt").read_text(errors="replace")[-3000:]
        raise RuntimeFailure(f"{Path(argv[0]).name} under qemu-aarch64 -cpu {cpu} failed with exit code "
                             f"{proc.returncode}:\n{tail}")
    text = log.read_text(errors="replace") if log.is_file() else ""
    m = re.search(r"insns: (\d+)", text)
    if not m:
        raise RuntimeFailure(f"qemu's libinsn plugin reported no count (log {log})")
    return int(m.group(1)) if caches is None else (int(m.group(1)), parse_cache_log(text))


_SESSION: contextvars.ContextVar[dict | None] = contextvars.ContextVar("edge_sdk_emulate_memory", default=None)
# What watches the counted runs (edge_sdk/timing/session.py's timing_session installs one): it may add
# libtiming.so's arguments to each run (plugin_args), reads each run's profile (collect), makes one
# inference of the K runs (finish) and keeps it by the file that ran (remember). This module never imports
# the timing model; the timing model imports this one.
_OBSERVER: contextvars.ContextVar = contextvars.ContextVar("edge_sdk_qemu_observer", default=None)


@contextmanager
def observed_by(observer):
    """Within it, every counted run reports to `observer` (plugin_args, collect, finish, remember)."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


@contextmanager
def memory_session(caches: CacheConfig | None):
    """Within it, count_runner/count_litert also count cache misses (with `caches`, when they are not
    told otherwise), and every such Count is kept by the file it ran ({str(path): Count}), so a
    caller that only sees the instruction count (bench/peers/) can still find the misses."""
    token = _SESSION.set({"caches": caches, "seen": {}})
    try:
        yield _SESSION.get()["seen"]
    finally:
        _SESSION.reset(token)


def _session_caches(caches: CacheConfig | None) -> CacheConfig | None:
    return caches if caches is not None or _SESSION.get() is None else _SESSION.get()["caches"]


def _remember(path: Path, count: Count, files: dict | None = None) -> None:
    if _SESSION.get() is not None and count.memory is not None:
        _SESSION.get()["seen"][str(path)] = count
    if (obs := _OBSERVER.get()) is not None:
        obs.remember(path, count, files)


def _run_counts(argv_for, *, ks, prefix, cpu, work, guest_env, caches, after=None) -> tuple[dict, dict]:
    counts, raw, obs = {}, {}, _OBSERVER.get()
    for k in ks:
        targs = None if obs is None else obs.plugin_args(work, k, roots=(prefix, Path(argv_for(k)[0]).parents[1]),
                                                         guest_env=guest_env)
        got = count_once(argv_for(k), prefix=prefix, cpu=cpu, work=work, guest_env=guest_env, caches=caches,
                         timing=targs)
        counts[k], raw[k] = (got, None) if caches is None else got
        if targs is not None:
            obs.collect(work, k, guest_env)
        if after:
            after(k)
    if obs is not None:
        obs.finish(K_LOW, K_HIGH)
    return counts, raw


def count_runner(*, lib: Path, params: Path, input: np.ndarray, cpu: str = "cortex-a53",  # noqa: A002
                 ks: tuple[int, ...] = (K_LOW, K_HIGH), caches: CacheConfig | None = None, threads: int = 1) -> Count:
    """Our aarch64 runner (`threads` TVM threads, default 1): K timed calls after the first, per K in ks
    (+ cache misses with caches)."""
    bundle = ensure_bundle("aarch64")
    prefix = runner_prefix(cpu)
    caches = _session_caches(caches)
    output = []
    with workdir() as work:
        shutil.copy2(lib, work / "model.so")
        shutil.copy2(params, work / "params.bin")
        np.save(work / "input.npy", np.ascontiguousarray(input), allow_pickle=False)

        def argv(k):
            return [str(bundle / "bin/edge-runner"), "--lib", "./model.so", "--params", "./params.bin",
                    "--input", "./input.npy", "--output", "./output.npy", "--warmup", "0", "--repeat", str(k),
                    "--min-time-ms", "0", "--threads", str(threads)]

        def keep_output(_k):
            if not output:
                output.append(np.load(work / "output.npy", allow_pickle=False))

        counts, raw = _run_counts(argv, ks=ks, prefix=prefix, cpu=cpu, work=work, caches=caches,
                                  guest_env={"TVM_NUM_THREADS": str(threads)}, after=keep_output)
    c = Count(_per_inference(counts), counts, output[0], _memory(raw, caches))
    _remember(lib, c, files={"model.so": lib})
    return c


def count_litert(model: Path, *, cpu: str = "cortex-a53", ks: tuple[int, ...] = (K_LOW, K_HIGH),
                 caches: CacheConfig | None = None) -> Count:
    """LiteRT's aarch64 wheel (XNNPACK, 1 thread) in the guest Python: K invokes per K in ks."""
    return _count_guest("litert", model, "model.tflite", cpu=cpu, ks=ks, caches=caches, threads=1)


def count_ncnn(param: Path, threads: int = 1, *, cpu: str = "cortex-a53", ks: tuple[int, ...] = (K_LOW, K_HIGH),
               caches: CacheConfig | None = None) -> Count:
    """ncnn's aarch64 wheel on a .param as benchncnn runs it (zero weights), `threads` OpenMP threads.

    With threads > 1 the count is every thread's instructions summed, waiting threads sleeping
    (OMP_WAIT_POLICY=passive), so libgomp's spin-waits are not counted as work."""
    return _count_guest("ncnn", param, "model.param", cpu=cpu, ks=ks, caches=caches, threads=threads)


def peer_runner_files(engine: str) -> list[Path]:
    """The files the guest Python runs for `engine`: time_engine.py and the engine's module (litert.py, ...)."""
    return [Path(str(PEER_ENGINES / "time_engine.py")), Path(str(PEER_ENGINES / f"{engine}.py"))]


def _count_guest(engine: str, model: Path, name: str, *, cpu: str, ks, caches, threads: int) -> Count:
    """time_engine.py --engine ENGINE --count K in the guest Python, per K in ks."""
    guest = guest_python_dir()
    if engine == "ncnn" and not (guest / "site" / "ncnn").is_dir():
        raise MissingDependency("the aarch64 guest Python has no ncnn wheel (built before ncnn was added)",
                                hint=build_hint(guest_python=True))
    _write_cpuinfo(guest, cpu)
    caches = _session_caches(caches)
    omp = {"OMP_NUM_THREADS": str(threads)} | ({"OMP_WAIT_POLICY": "passive"} if threads > 1 else {})
    with workdir() as work:
        shutil.copy2(model, work / name)
        for f in peer_runner_files(engine):
            shutil.copy2(f, work / f.name)

        def argv(k):
            return [str(guest / "usr/bin/python3.11"), "time_engine.py", "--engine", engine,
                    "--model", name, "--threads", str(threads), "--count", str(k)]

        def check(_k):  # it did run K inferences
            json.loads((work / "stdout.txt").read_text().strip().splitlines()[-1])

        counts, raw = _run_counts(argv, ks=ks, prefix=guest, cpu=cpu, work=work, caches=caches, after=check, guest_env={
            "PYTHONPATH": str(guest / "site"), "PYTHONHASHSEED": "0", "PYTHONSAFEPATH": "1",
            "PYTHONDONTWRITEBYTECODE": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "OPENBLAS_NUM_THREADS": "1", **omp})
    c = Count(_per_inference(counts), counts, memory=_memory(raw, caches))
    _remember(model, c)
    return c


def _per_inference(counts: dict[int, int]) -> float:
    if K_LOW not in counts or K_HIGH not in counts:
        return float("nan")
    return (counts[K_HIGH] - counts[K_LOW]) / (K_HIGH - K_LOW)


def _memory(raw: dict[int, dict | None], caches: CacheConfig | None) -> dict | None:
    """Per-inference cache counters (same K=3 minus K=1, halved, as instructions), DRAM bytes, raw counts."""
    if caches is None:
        return None
    per = {key: _per_inference({k: r[key] for k, r in raw.items()}) for key in CACHE_KEYS}
    per["dram_bytes"] = per["l2_misses"] * caches.line
    return {**per, "raw": {str(k): r for k, r in raw.items()}, "caches": asdict(caches),
            "note": "misses per inference: (K=3 - K=1) / 2 under qemu's cache.c; DRAM bytes = L2 misses x line "
                    "(line fills only: dirty write-backs and prefetches are not modelled)"}
