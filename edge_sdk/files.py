"""Small file-system helpers shared by the writers of packages, exports and stores."""
from __future__ import annotations

import os


def umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and put back (a moment's window; nothing else creates files then)
    os.umask(mask)
    return mask


def honour_umask(path, base: int = 0o666) -> None:
    """Give a file made by mkstemp (always 0600) the mode open() would have given it: base & ~umask."""
    os.chmod(path, base & ~umask())
