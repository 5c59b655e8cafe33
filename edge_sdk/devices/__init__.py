"""Stand-in devices: what runs packages when no Raspberry Pi is at hand, one module per tier.

    folders.py      StandInDevices: each device a local folder, commands by subprocess (no SSH; fleet logic tests)
    loopback.py     LoopbackFleet: real OpenSSH servers on 127.0.0.x, one Unix user each (host packages)
    emulated_pi.py  EmulatedFleet: arm64 Debian userlands with their own arm64 sshd under qemu (pi3 packages)
    base.py         StandInFleet: the start/stop life cycle loopback.py and emulated_pi.py share

A target names its sshd stand-in (targets.Target.stand_in: "loopback" or "emulated_pi"); the demo starts
it through stand_in_module. `python -m edge_sdk.devices.emulated_pi start ...` (or the checkout's
device_images/emulated_pi.py) runs one by hand.
"""
from __future__ import annotations

import importlib

STAND_INS = ("loopback", "emulated_pi")  # the sshd tiers a target may name


def stand_in_module(name: str):
    """edge_sdk.devices.<name> for a target's stand_in ("loopback" or "emulated_pi")."""
    if name not in STAND_INS:
        raise ValueError(f"unknown stand-in device {name!r} (one of {', '.join(STAND_INS)})")
    return importlib.import_module(f"edge_sdk.devices.{name}")
