"""Guest code addresses -> (file, function): the plugin's mappings plus each file's ELF symbols.

Symbols come from `nm` (binutils; the aarch64 cross binutils ship with g++-aarch64-linux-gnu): the
dynamic table, and the static one where the file is not stripped. A block's function is the
nearest symbol at or below its address in the file that maps it.
"""
from __future__ import annotations

import bisect
import functools
import shutil
import subprocess
from pathlib import Path

from edge_sdk.timing.profile import Mapping

NM = ("aarch64-linux-gnu-nm", "nm")
_CODE = ("T", "t", "W", "i")  # nm's types of code symbols


@functools.lru_cache(maxsize=64)
def _nm_code_symbols(path: str, mtime: float = 0.0) -> tuple[tuple[int, int, str], ...]:
    """(address, size, name) of every code symbol nm lists, the dynamic table first, then the static one;
    size 0 where nm gives none. Empty if nm cannot read the file. One nm run per table, shared by
    elf_symbols and function_extents."""
    tool = next((t for t in NM if shutil.which(t)), None)
    if tool is None or not Path(path).is_file():
        return ()
    out = []
    for extra in (["-D"], []):
        proc = subprocess.run([tool, "--defined-only", "-C", "-S", *extra, path], capture_output=True, text=True,
                              check=False)
        for line in proc.stdout.splitlines():
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in _CODE:  # no size: address, type, name
                out.append((int(parts[0], 16), 0, line.split(None, 2)[2].split("@")[0]))
            elif len(parts) == 4 and parts[2] in _CODE:  # address, size, type, name
                out.append((int(parts[0], 16), int(parts[1], 16), parts[3].split("@")[0]))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def elf_symbols(path: str, mtime: float = 0.0) -> tuple[list[int], list[str]]:
    """(sorted addresses, names) of the code symbols of an ELF file (empty if nm cannot read it)."""
    seen: dict[int, str] = {}
    for lo, _, name in _nm_code_symbols(path, mtime):
        seen.setdefault(lo, name)
    addrs = sorted(seen)
    return addrs, [seen[a] for a in addrs]


@functools.lru_cache(maxsize=64)
def function_extents(path: str, mtime: float = 0.0) -> tuple[tuple[int, int, str], ...]:
    """(start, end, name) of the sized code symbols of an ELF file, by start (empty if nm cannot read it).

    A stripped library keeps only its dynamic (exported) table: its hidden functions lie in the gaps
    between these extents, and an address there has no known function."""
    seen: dict[int, tuple[int, int, str]] = {}
    for lo, size, name in _nm_code_symbols(path, mtime):
        if size > 0:
            seen.setdefault(lo, (lo, lo + size, name))
    return tuple(seen[a] for a in sorted(seen))


def symbol_value(path: Path, name: str) -> int | None:
    """The ELF address of a code symbol, or None."""
    addrs, names = elf_symbols(str(path), path.stat().st_mtime if path.is_file() else 0.0)
    for a, n in zip(addrs, names, strict=True):
        if n == name:
            return a
    return None


class Symbolizer:
    """Guest address -> (file name, function) for one run's mappings."""

    def __init__(self, maps: list[Mapping], files: dict | None = None):
        """files: basename -> a local copy to read symbols from (the guest's copy may be gone)."""
        self.files = {k: str(v) for k, v in (files or {}).items()}
        self.maps = sorted(maps, key=lambda m: m.lo)
        self._lo = [m.lo for m in self.maps]
        self.base: dict[str, int] = {}
        for m in self.maps:
            if m.offset == 0:
                self.base[m.path] = min(self.base.get(m.path, m.lo), m.lo)

    def file_of(self, addr: int) -> str | None:
        i = bisect.bisect_right(self._lo, addr) - 1
        return self.maps[i].path if i >= 0 and addr < self.maps[i].hi else None

    def lookup(self, addr: int) -> tuple[str, str]:
        path = self.file_of(addr)
        if path is None:
            return "?", f"0x{addr:x}"
        rel = addr - self.base.get(path, 0)
        p = Path(self.files.get(Path(path).name, path))
        addrs, names = elf_symbols(str(p), p.stat().st_mtime if p.is_file() else 0.0)
        i = bisect.bisect_right(addrs, rel) - 1
        return Path(path).name, (names[i] if i >= 0 else f"{Path(path).name}+0x{rel:x}")
