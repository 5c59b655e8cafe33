"""The flags of the CPU the tests run on (/proc/cpuinfo), for tests that run x86 kernels only where the host
can (compiling for another CPU needs no flags: the kernels follow the compile target's CPU)."""
from __future__ import annotations


def host_cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())
    except OSError:
        return set()
