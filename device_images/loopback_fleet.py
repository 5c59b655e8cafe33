#!/usr/bin/env python3
"""`python device_images/loopback_fleet.py ...`: the checkout's entry point to edge_sdk.devices.loopback
(an installed package runs the same as `python -m edge_sdk.devices.loopback ...`). Standard library only,
so the system python3 runs it too."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's edge_sdk

from edge_sdk.devices.loopback import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
