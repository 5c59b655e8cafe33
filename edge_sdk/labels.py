"""What each figure is, in words: the labels every table, JSON and page puts beside a number.

    QEMU_WALL                 an emulator's own time: never a Pi's latency, never in a speedup
    modelled_label("pi3")     'modelled Pi 3 ms': the Cortex-A53 timing model (edge_sdk/timing) at the target's clock
"""
from __future__ import annotations

QEMU_WALL = "QEMU wall time (emulator speed, not a Pi)"  # the label of an emulator's time, wherever it is shown
_BOARDS = {"pi3": "Pi 3", "pi3plus": "Pi 3B+", "pi-zero2w": "Pi Zero 2 W"}


def modelled_label(target: str) -> str:
    """'modelled Pi 3 ms': what a modelled figure is (the timing model at the target's clock)."""
    return f"modelled {_BOARDS.get(target, target)} ms"
