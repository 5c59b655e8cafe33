"""The system programs pip cannot bring, which Debian package has each, and one check with a clear error.

    require(("qemu-aarch64",), why="running a pi3 package here")    # MissingDependency (exit 9) if absent

`pip install edge-sdk` brings the Python side (TVM, LiteRT, ...); what runs beside it comes from apt
(tools/setup.sh installs it all in a checkout; the README lists it for a pip install). The error names
every missing program with its package and one `apt-get install` line.
"""
from __future__ import annotations

import shutil
from collections.abc import Iterable

from edge_sdk.errors import MissingDependency

# program -> (its Debian 12 package, what needs it)
TOOLS: dict[str, tuple[str, str]] = {
    "g++": ("g++", "the host runtime bundle and host packages"),
    "aarch64-linux-gnu-g++": ("g++-aarch64-linux-gnu", "compiling for a Pi target and the aarch64 runtime bundle"),
    "qemu-aarch64": ("qemu-user", "running and counting aarch64 code here (run / bench --emulate / eval of Pi packages)"),
    "llvm-mc-14": ("llvm-14", "the A53 timing model (modelled Pi ms) disassembling the executed blocks"),
    "/usr/sbin/sshd": ("openssh-server", "the loopback and emulated stand-in devices (demo)"),
    "ssh-keygen": ("openssh-client", "the stand-in devices' host and client keys (demo)"),
    "qemu-aarch64-static": ("qemu-user-static", "the emulated Pi's arm64 userland (demo)"),
    "update-binfmts": ("binfmt-support", "the emulated Pi: binfmt_misc runs its aarch64 programs through qemu"),
    "debootstrap": ("debootstrap", "the emulated Pi's root filesystem (built once)"),
    "ip": ("iproute2", "the emulated Pi's network namespace"),
}
DEMO = ("g++", "aarch64-linux-gnu-g++", "qemu-aarch64", "/usr/sbin/sshd", "ssh-keygen", "qemu-aarch64-static",
        "update-binfmts", "debootstrap", "ip")  # what `edge-sdk demo` starts or compiles with


def found(tool: str) -> bool:
    return shutil.which(tool) is not None


def missing(tools: Iterable[str]) -> list[str]:
    return [t for t in tools if not found(t)]


def require(tools: Iterable[str], *, why: str) -> None:
    """Raise MissingDependency (exit 9) naming each missing program, its package, and the install line."""
    absent = missing(tools)
    if not absent:
        return
    packages = list(dict.fromkeys(TOOLS[t][0] if t in TOOLS else t for t in absent))
    named = ", ".join(f"'{t}' ({TOOLS[t][0]})" if t in TOOLS else f"'{t}'" for t in absent)
    raise MissingDependency(f"{why} needs {named}, not installed (system packages pip cannot bring)",
                            hint=f"apt-get install {' '.join(packages)}  (a checkout's tools/setup.sh installs all)")
