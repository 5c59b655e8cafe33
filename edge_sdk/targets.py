"""The target table: every device kind we compile for, and the facts about it, in one place.

Each row carries the TVM target (its LLVM row is where the kernels read their SIMD shape:
compiler/ops/common.simd_of), the toolchain that links for it, what the roofline needs (cores, clock,
peak fp32 FLOP/s, memory bandwidth), what emulating it here takes (the qemu CPU model, the
/proc/cpuinfo the guest sees, the caches bench --memory simulates) and the local stand-in device.
"""
from __future__ import annotations

import functools
import os
import platform
import shutil
from dataclasses import dataclass, field

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import UsageError


@dataclass(frozen=True)
class CacheConfig:
    """A core's caches as qemu's cache plugin simulates them (bench --emulate --memory). Defaults: a
    Raspberry Pi 3B's Cortex-A53 (BCM2837): L1 I 32 KB 2-way, L1 D 32 KB 4-way, 64 B lines (A53 TRM,
    ARM DDI 0500, 2.1.6/6.1), and the cluster's 512 KB 16-way L2 (DESIGN.md; TRM 7.1), all of it to
    the one thread we count."""

    l1d_bytes: int = 32 * 1024
    l1d_ways: int = 4
    l1i_bytes: int = 32 * 1024
    l1i_ways: int = 2
    l2_bytes: int = 512 * 1024
    l2_ways: int = 16
    line: int = 64
    evict: str = "lru"  # lru | fifo (rand is not deterministic in qemu 7.2's plugin)

    def plugin_args(self) -> str:
        return (f"dcachesize={self.l1d_bytes},dassoc={self.l1d_ways},dblksize={self.line},"
                f"icachesize={self.l1i_bytes},iassoc={self.l1i_ways},iblksize={self.line},"
                f"l2cachesize={self.l2_bytes},l2assoc={self.l2_ways},l2blksize={self.line},"
                f"evict={self.evict},limit=0")


# The /proc/cpuinfo an emulated Pi 3 guest sees (qemu/runner.py writes it into qemu's -L prefix):
# LiteRT crashes on qemu 7.2's x86 cpuinfo, and with the Pi's, XNNPACK and ruy pick their A53 kernels.
_PI3_CORE = ("processor\t: {i}\nBogoMIPS\t: 38.40\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
             "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd03\n"
             "CPU revision\t: 4\n\n")
PI3_CPUINFO = ("".join(_PI3_CORE.format(i=i) for i in range(4)) + "Hardware\t: BCM2835\nRevision\t: a02082\n"
               "Serial\t\t: 0000000000000000\nModel\t\t: Raspberry Pi 3 Model B Rev 1.2\n")


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
    cpuinfo: str | None = None  # the /proc/cpuinfo its emulated guest sees (bench --emulate)
    caches: CacheConfig | None = None  # what bench --emulate --memory simulates
    stand_in: str | None = None  # the stand-in device that runs its packages (edge_sdk/devices/<stand_in>.py; the demo)

    @property
    def is_host(self) -> bool:
        return self.name == "host"

    def qemu_cpu(self) -> str:
        """The qemu -cpu model that runs this target's code on a machine of another architecture."""
        if self.emulate_cpu is None:
            raise UsageError(f"target '{self.name}' has no emulation CPU: it runs natively only",
                             hint=f"emulated targets: {', '.join(n for n, t in _TABLE.items() if t.emulate_cpu)}")
        return self.emulate_cpu

    def tvm_target(self):
        import tvm

        return tvm.target.Target(dict(self.llvm))

    def strip_tool(self) -> str | None:
        """binutils' strip for this target's libraries (aarch64-linux-gnu-strip beside the cross g++), if installed."""
        tool = self.cross_cc.rsplit("-", 1)[0] + "-strip" if self.cross_cc else "strip"
        return shutil.which(tool)

    def compiler(self):
        """The fcompile for export_library; raises if the cross compiler is missing."""
        if self.cross_cc is None:
            return None
        from edge_sdk.system_tools import require

        require((self.cross_cc,), why=f"target '{self.name}' (its cross compiler)")  # MissingDependency, exit 9
        from tvm.support import cc

        return cc.cross_compiler(self.cross_cc)


def _a53(name: str, desc: str, clock: float, bw: float, **facts) -> Target:
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
        cpuinfo=PI3_CPUINFO,  # the Zero 2 W's RP3A0 has the Pi 3's BCM2837 cores and caches
        caches=CacheConfig(),
        **facts,
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
    # EDGE_SDK_HOST_CPU=znver3: compile the host row for an older CPU of this machine's kind (e.g. the AVX2-only
    # code a Zen 3 gets, measured on an AVX-512 machine); the kernels follow the target's features, not cpuinfo's
    forced = os.environ.get("EDGE_SDK_HOST_CPU", "").strip()
    cpu = forced or tvm.target.codegen.llvm_get_system_cpu()
    triple = "aarch64-linux-gnu" if arch == "aarch64" else "x86_64-linux-gnu"
    model, cores, ghz, per_cycle = _host_cpu_facts()
    return Target(
        name="host",
        description=f"this machine: {model}" + (f", code for -mcpu={cpu} (EDGE_SDK_HOST_CPU)" if forced else ""),
        arch=arch,
        llvm={"kind": "llvm", "mtriple": triple, "mcpu": cpu, "num-cores": cores},
        cross_cc=None,
        cross_package=None,
        cores=cores,
        clock_ghz=round(ghz, 2),
        peak_gflops=round(cores * ghz * per_cycle, 1),
        mem_gbps=20.0,  # typical DDR4 server channel; refined by measurement in the bench
        stand_in="loopback",
    )


_TABLE: dict[str, Target] = {
    "pi3": _a53("pi3", "Raspberry Pi 3B/3B+: 4x Cortex-A53 @ 1.2 GHz, LPDDR2", 1.2, 3.6, stand_in="emulated_pi"),
    # Pi 3B+ (BCM2837B0): its A53s at 1.4 GHz, LPDDR2 at 500 MHz (32 bit, 1000 MT/s: 4.0 GB/s); ncnn's
    # published benchncnn figures (../shared/anchors) are for this board
    "pi3plus": _a53("pi3plus", "Raspberry Pi 3B+: 4x Cortex-A53 @ 1.4 GHz, LPDDR2", 1.4, 4.0),
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


def stand_in_targets() -> list[Target]:
    """The targets whose packages a local stand-in device runs (the demo): the Pi rows, then this machine."""
    return [t for t in (*_TABLE.values(), host_target()) if t.stand_in]


def by_emulation_cpu(fact: str) -> dict[str, object]:
    """{qemu cpu: the first Pi row's `fact` ("cpuinfo" or "caches")} over the rows that have one."""
    out: dict[str, object] = {}
    for t in _TABLE.values():
        if t.emulate_cpu and getattr(t, fact) is not None:
            out.setdefault(t.emulate_cpu, getattr(t, fact))
    return out


def get_target(name: str) -> Target:
    if name == "host":
        return host_target()
    try:
        return _TABLE[name]
    except KeyError:
        raise UsageError(f"unknown target '{name}': {did_you_mean(name, TARGET_NAMES)}") from None
