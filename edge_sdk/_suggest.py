"""'Did you mean' for table lookups."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    tail = f"; did you mean '{close[0]}'?" if close else ""
    return f"choose from {', '.join(choices)}{tail}"
