"""Fleets of devices: the fleet file (config), SSH to a device (ssh), host-key trust and status (trust).

    fleet = load_fleet("fleet.yaml")                     # ConfigError names file:line key.path
    devices = fleet.select(group="cameras")              # or device="door-pi", or all
    trust(devices, default_known_hosts())                # explicit: record host keys, show fingerprints
    results = for_each_device(devices, lambda d: status(d))   # per-device .ok / .failed, never stops early
"""
from edge_sdk.fleet.config import Deployment, Device, Fleet, Group, load_fleet, parse_fleet
from edge_sdk.fleet.ssh import (Connection, DeviceResult, FleetResults, Result, default_known_hosts,
                                edge_sdk_home, fingerprint, for_each_device)
from edge_sdk.fleet.trust import DeviceStatus, ModelState, TrustRecord, fleet_status, status, trust

__all__ = [
    "Connection", "Deployment", "Device", "DeviceResult", "DeviceStatus", "Fleet", "FleetResults", "Group",
    "ModelState", "Result", "TrustRecord", "default_known_hosts", "edge_sdk_home", "fingerprint",
    "fleet_status", "for_each_device", "load_fleet", "parse_fleet", "status", "trust",
]
