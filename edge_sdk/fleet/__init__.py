"""Fleets of devices: the fleet file (config), SSH to a device (ssh), fan-out over devices (group),
where things live on a device (paths), host-key trust and status (trust), deploy with on-device
checks and atomic switch (deploy), remote run and rollback (remote), and an Ansible inventory +
playbook doing the same install (inventory). The CLI layer is fleet/cli.py.

    fleet = load_fleet("fleet.yaml")                     # ConfigError names file:line key.path
    devices = fleet.select(group="cameras")              # or device="door-pi", or all
    trust(devices, default_known_hosts())                # explicit: record host keys, show fingerprints
    results = for_each_device(devices, lambda d: status(d))   # per-device .ok / .failed, never stops early
    report = deploy(devices, [LocalPackage.load("m.edgepkg")])  # FleetResults of DeviceDeploy
    run_remote(devices[0], Path("m.edgepkg")); rollback(devices[0], "mobilenet_v1-float32")
"""
from edge_sdk.fleet.config import Deployment, Device, Fleet, Group, load_fleet, parse_fleet
from edge_sdk.fleet.ssh import Connection, Result, default_known_hosts, edge_sdk_home, fingerprint
from edge_sdk.fleet.group import DeviceResult, FleetResults, GroupError, for_each_device
from edge_sdk.fleet.trust import DeviceStatus, ModelState, TrustRecord, fleet_status, status, trust
from edge_sdk.fleet.deploy import DeployFailed, DeviceDeploy, LocalBundle, LocalPackage, PackageOutcome, deploy
from edge_sdk.fleet.remote import RemoteRun, rollback, run_remote

__all__ = [
    "Connection", "DeployFailed", "Deployment", "DeviceDeploy", "LocalBundle", "LocalPackage", "PackageOutcome", "RemoteRun",
    "deploy", "rollback", "run_remote", "Device", "DeviceResult", "DeviceStatus", "Fleet", "FleetResults", "Group", "GroupError",
    "ModelState", "Result", "TrustRecord", "default_known_hosts", "edge_sdk_home", "fingerprint",
    "fleet_status", "for_each_device", "load_fleet", "parse_fleet", "status", "trust",
]
