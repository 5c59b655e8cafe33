"""The target table: every device kind we compile for, in one place.

Each row carries the TVM target, the toolchain that links for it, and what the roofline needs
(cores, clock, peak fp32 FLOP/s, memory bandwidth).
"""
from __future__ import annotations

import functools
import os
import platform
import shutil
from dataclasses import dataclass, field

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import CompileError, UsageError


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    arch: str  # "aarch64" or "x86_64": picks the runtime bundle and the schedules
    llvm: dict = field(hash=False)  # TVM target dict
    cross_cc: str | None  # None: the host compiler
    cross_package: str | None  # Debian package that provides cross_cc
    cores: int
    clock_ghz: float
    peak_gflops: float  # fp32, all cores
    mem_gbps: float  # DRAM bandwidth, GB/s
    emulate_cpu: str | None = None  # qemu -cpu model when not run natively

    @property
    def is_host(self) -> bool:
        return self.name == "host"

    def tvm_target(self):
        import tvm

        return tvm.target.Target(dict(self.llvm))

    def compiler(self):
        """The fcompile for export_library; raises if the cross compiler is missing."""
        if self.cross_cc is None:
            return None
        if shutil.which(self.cross_cc) is None:
            raise CompileError(
                f"target '{self.name}' needs the cross compiler '{self.cross_cc}', which is not installed",
                hint=f"apt-get install {self.cross_package}",
            )
        from tvm.support import cc

        return cc.cross_compiler(self.cross_cc)


def _a53(name: str, desc: str, clock: float, bw: float) -> Target:
    return Target(
        name=name,
        description=desc,
        arch="aarch64",
        llvm={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a53",
              "mattr": ["+neon"], "num-cores": 4},
        cross_cc="aarch64-linux-gnu-g++",
        cross_package="g++-aarch64-linux-gnu",
        cores=4,
        clock_ghz=clock,
        peak_gflops=4 * clock * 8,  # 128-bit NEON FMA: 4 lanes x 2 FLOP per cycle per core
        mem_gbps=bw,
        emulate_cpu="cortex-a53",
    )


def _host_cpu_facts() -> tuple[str, int, float, int]:
    """(model name, logical cores, GHz, fp32 FLOP per cycle per core) read from /proc/cpuinfo."""
    model, mhz, flags = platform.processor() or "unknown", 0.0, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    model = value
                elif key == "cpu MHz" and not mhz:
                    mhz = float(value)
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    per_cycle = 64 if "avx512f" in flags else 32 if "fma" in flags else 8
    return model, os.cpu_count() or 1, (mhz / 1000.0) or 2.0, per_cycle


@functools.cache
def host_target() -> Target:
    import tvm

    arch = platform.machine()
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    triple = "aarch64-linux-gnu" if arch == "aarch64" else "x86_64-linux-gnu"
    model, cores, ghz, per_cycle = _host_cpu_facts()
    return Target(
        name="host",
        description=f"this machine: {model}",
        arch=arch,
        llvm={"kind": "llvm", "mtriple": triple, "mcpu": cpu, "num-cores": cores},
        cross_cc=None,
        cross_package=None,
        cores=cores,
        clock_ghz=round(ghz, 2),
        peak_gflops=round(cores * ghz * per_cycle, 1),
        mem_gbps=20.0,  # typical DDR4 server channel; refined by measurement in the bench
    )


_TABLE: dict[str, Target] = {
    "pi3": _a53("pi3", "Raspberry Pi 3B/3B+: 4x Cortex-A53 @ 1.2 GHz, LPDDR2", 1.2, 3.6),
    "pi-zero2w": _a53("pi-zero2w", "Raspberry Pi Zero 2 W: 4x Cortex-A53 @ 1.0 GHz, LPDDR2", 1.0, 3.2),
    "pi4": Target(
        name="pi4",
        description="Raspberry Pi 4B: 4x Cortex-A72 @ 1.5 GHz, LPDDR4",
        arch="aarch64",
        llvm={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72",
              "mattr": ["+neon"], "num-cores": 4},
        cross_cc="aarch64-linux-gnu-g++",
        cross_package="g++-aarch64-linux-gnu",
        cores=4,
        clock_ghz=1.5,
        peak_gflops=4 * 1.5 * 16,  # two 128-bit NEON FMA pipes
        mem_gbps=12.8,
        emulate_cpu="cortex-a72",
    ),
}

TARGET_NAMES = ("host", *_TABLE)


def get_target(name: str) -> Target:
    if name == "host":
        return host_target()
    try:
        return _TABLE[name]
    except KeyError:
        raise UsageError(f"unknown target '{name}': {did_you_mean(name, TARGET_NAMES)}") from None
