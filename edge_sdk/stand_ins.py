"""Load the scripts in device_images/ (the loopback fleet, the emulated Pi, their shared base) as modules.

They are standalone scripts (a user runs `python device_images/emulated_pi.py start`), not a package,
so the demo and the tests import them by path through this one function.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# What the scripts import from each other by their bare names (as `python device_images/x.py` finds
# them beside the script): stand_in_fleet.py holds the life cycle both fleets share.
_SHARED = ("stand_in_fleet",)


def device_image_module(script: str):
    """device_images/<script>.py as a module (loaded once per process)."""
    for shared in _SHARED:
        _load(shared, shared)
    return _load(f"edge_sdk_{script}", script)


def _load(name: str, script: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "device_images" / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
