"""libtiming.so under qemu: its arguments, and the per-inference profile of a K=1 and a K=3 run.

qemu/runner.py runs the guest (its count_once, watched by session.timing_session); this module only knows the
plugin: the cache geometry it simulates (the Pi 3's, as `--memory`), and, for runs with more than
one thread, where the parallel runtime is (OpenMP's GOMP_parallel for ncnn, TVM's
TVMBackendParallelLaunch for our runner): each entry starts a parallel region (an epoch), and the
runtime's own code (waiting, waking) is kept out of the threads' work, as is libc's sched_yield (what a thread
pool's spin-wait calls between polls: threads.YIELD), by its extent in the guest's libc.
"""
from __future__ import annotations

from pathlib import Path

from edge_sdk.timing import profile as P
from edge_sdk.timing.a53 import A53, DEFAULT
from edge_sdk.timing.symbols import function_extents, symbol_value
from edge_sdk.timing.threads import YIELD

# (file name pattern, parallel-region entry symbol) of the runtimes we know.
RUNTIMES = (("libgomp", "GOMP_parallel"), ("libtvm_runtime", "TVMBackendParallelLaunch"))
# Runs with more than one thread keep the guest threads within this many instructions of each other
# (libtiming.so's lockstep=), so the shared L2 sees them in near-lockstep order, as the four cores of a
# Pi run them, instead of in the order the host happens to schedule qemu's threads (which moved a
# 4-thread ncnn MobileNetV1 355 -> 261 modelled ms between two loads of this machine). 0: off.
LOCKSTEP_INSNS = 10_000


def cache_args(cores: int = 4, c: A53 = DEFAULT) -> str:
    """The Pi 3 (BCM2837) caches, as targets.CacheConfig gives them to cache.c, and a53.py's prefetch and
    write-streaming rules."""
    return (f"dcachesize={32 * 1024},dassoc=4,icachesize={32 * 1024},iassoc=2,l2cachesize={512 * 1024},"
            f"l2assoc=16,blksize=64,cores={cores},pf_trigger={c.pf_trigger},pf_window={c.pf_window},"
            f"pf_depth={c.pf_depth},pf_streams={c.pf_streams},wstream=1,ws_l1={c.ws_l1},ws_l2={c.ws_l2}")


def find_runtimes(roots: list[Path]) -> list[tuple[Path, str]]:
    """Parallel-runtime libraries under the guest's roots: (file, entry symbol)."""
    found = []
    for root in roots:
        for pattern, sym in RUNTIMES:
            for f in sorted(root.glob(f"**/{pattern}*.so*")) if root.is_dir() else []:
                if f.is_file() and not f.is_symlink():
                    found.append((f, sym))
    return found


def yield_ranges(roots: list[Path]) -> list[tuple[str, int, int]]:
    """(file name, ELF start, ELF end) of the yield functions (threads.YIELD) of the first libc under the
    guest's roots (its lib/ or lib/aarch64-linux-gnu/)."""
    for root in roots:
        for f in (root / "lib" / "libc.so.6", root / "lib" / "aarch64-linux-gnu" / "libc.so.6"):
            if f.is_file():
                found = {(lo, hi) for lo, hi, name in function_extents(str(f), f.stat().st_mtime) if YIELD.search(name)}
                return [(f.name, lo, hi) for lo, hi in sorted(found)]
    return []


def plugin_args(out: Path, *, threads: int = 1, roots: tuple[Path, ...] = ()) -> str:
    """libtiming.so's argument string: output file, caches and (threads > 1) region marks."""
    args = [f"out={out}", cache_args()]
    if threads > 1:
        args.append(f"lockstep={LOCKSTEP_INSNS}")
        for f, sym in find_runtimes(list(roots)):
            addr = symbol_value(f, sym)
            if addr is not None:
                args += [f"mark={f.name}@{addr:x}", f"skip={f.name}"]
        # a plugin built before skip=FILE@LO-HI reads it as a file name no path contains: a no-op
        args += [f"skip={name}@{lo:x}-{hi:x}" for name, lo, hi in yield_ranges(list(roots))]
    return ",".join(args)


def read_run(path: Path) -> P.Profile:
    return P.read_profile(path)


def per_inference(k1: P.Profile, k3: P.Profile, *, k_low: int, k_high: int, meta: dict | None = None):
    return P.per_inference(k1, k3, k_low=k_low, k_high=k_high, meta=meta)
