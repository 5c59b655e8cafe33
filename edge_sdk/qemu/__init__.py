"""QEMU user-mode for counting and timing aarch64 code on this machine: the plugins' sources and their build.

    build_plugins.sh   builds libinsn.so, libcache.so (QEMU's), libtiming.so (ours: plugins/timing.c) and
                       the guest clock shim into $EDGE_SDK_CACHE/qemu-plugins/<qemu version>/;
                       --guest-python also unpacks the aarch64 guest Python into $EDGE_SDK_CACHE/qemu-guest
    plugins/timing.c   libtiming.so: per-block counts and A53 cache misses for the timing model (edge_sdk/timing)

Both are package data, so an installed wheel builds the plugins the same way a checkout does.
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build_plugins.sh"
TIMING_PLUGIN = HERE / "plugins" / "timing.c"


def build_hint(*, guest_python: bool = False) -> str:
    """The command that builds what is missing (MissingDependency's hint)."""
    return f"bash {BUILD_SCRIPT}" + (" --guest-python" if guest_python else "")
