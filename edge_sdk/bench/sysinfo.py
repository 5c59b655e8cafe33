"""What a benchmark figure is worth without its context: the machine and software it was measured on.

Recorded with every bench run (and so with every row in the results store): CPU model, logical
cores, clock and temperature where the kernel exposes them, load average (this machine is shared:
a busy neighbour shows up here before it shows up as a mysterious slowdown), and versions.
Nothing here imports heavy modules; versions come from package metadata.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from pathlib import Path

_PACKAGES = ("edge-sdk", "apache-tvm", "apache-tvm-ffi", "numpy", "ai-edge-litert", "onnxruntime")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine()


def clock_mhz() -> float | None:
    """Current clock of cpu0: cpufreq when exposed (a Pi), else /proc/cpuinfo's 'cpu MHz' (x86)."""
    khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    if khz and khz.isdigit():
        return round(int(khz) / 1000, 1)
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz":
            try:
                return round(float(value), 1)
            except ValueError:
                return None
    return None


def temperature_c() -> float | None:
    milli = _read("/sys/class/thermal/thermal_zone0/temp")
    try:
        return round(int(milli) / 1000, 1) if milli else None
    except ValueError:
        return None


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def system_info() -> dict:
    """Everything above as one JSON-able dict; keys are omitted when unreadable, never guessed."""
    info = {"hostname": socket.gethostname(), "arch": platform.machine(), "cpu_model": cpu_model(),
            "logical_cpus": os.cpu_count(), "kernel": platform.release(), "versions": versions()}
    for key, value in (("clock_mhz", clock_mhz()), ("temperature_c", temperature_c())):
        if value is not None:
            info[key] = value
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info
