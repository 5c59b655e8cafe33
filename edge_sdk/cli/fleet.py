"""`edge-sdk fleet check|status|trust|rollback|inventory --fleet F ...`: add_fleet_parser -> drive_fleet_* -> library.

Every subcommand takes --known-hosts (default ${EDGE_SDK_HOME:-~/.config/edge-sdk}/known_hosts); a
subcommand that finds a device unreachable or failing exits with DeviceError's code.
"""
from __future__ import annotations

from pathlib import Path

from edge_sdk.cli.common import add_fleet_options, known_hosts, print_json, select_devices
from edge_sdk.errors import DeviceError


def add_fleet_parser(sub) -> None:
    p = sub.add_parser("fleet", help="check the fleet file; status, trust, rollback, inventory")
    fsub = p.add_subparsers(dest="fleet_command", required=True, metavar="SUBCOMMAND")
    c = fsub.add_parser("check", help="validate the fleet file")
    add_fleet_options(c, select=False)
    c.set_defaults(drive=drive_fleet_check)
    s = fsub.add_parser("status", help="per device: reachable, runtime, packages, current per model, disk, temp")
    add_fleet_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(drive=drive_fleet_status)
    t = fsub.add_parser("trust", help="record the devices' host keys (shows each fingerprint)")
    add_fleet_options(t)
    t.add_argument("--replace", action="store_true", help="accept a key that changed (a reinstalled device)")
    t.set_defaults(drive=drive_fleet_trust)
    r = fsub.add_parser("rollback", help="make a model's previous version current again on one device")
    add_fleet_options(r, device_required=True)
    r.add_argument("--model", required=True, help="the installed model, e.g. mobilenet_v1-float32")
    r.add_argument("--json", action="store_true")
    r.set_defaults(drive=drive_fleet_rollback)
    i = fsub.add_parser("inventory", help="write an Ansible inventory + playbook installing the same artifacts")
    add_fleet_options(i)
    i.add_argument("--format", choices=["ansible"], default="ansible")
    i.add_argument("--inventory-format", choices=["ini", "yaml"], default="ini")
    i.add_argument("--package", type=Path, action="append", default=[], help="a package to install (repeatable)")
    i.add_argument("-o", "--output", type=Path, required=True, help="the folder to write")
    i.set_defaults(drive=drive_fleet_inventory)


def drive_fleet_check(args) -> int:
    from edge_sdk.fleet.config import load_fleet

    fleet = load_fleet(args.fleet)
    print(f"{args.fleet}: ok: {len(fleet.devices)} devices, {len(fleet.groups)} groups, "
          f"{len(fleet.deployments)} deployments")
    for d in fleet.devices.values():
        print(f"  {d.name:<16} {d.address:<30} {d.target:<10} {' '.join(d.tags)}")
    return 0


def drive_fleet_status(args) -> int:
    from edge_sdk.fleet.trust import DeviceStatus, fleet_status

    _, devices = select_devices(args)
    results = fleet_status(devices, known_hosts=known_hosts(args))
    statuses = [r.value if r.ok else DeviceStatus(r.device, reachable=False, error=f"{type(r.error).__name__}: "
                                                  f"{r.error}") for r in results]  # every device gets a row
    if args.json:
        print_json([s.as_dict() for s in statuses])
    else:
        for s in statuses:
            if not s.reachable:
                print(f"{s.device.name:<16} UNREACHABLE  {s.error}")
                continue
            free = f"{s.free_bytes / 1e9:.1f} GB free" if s.free_bytes is not None else "free ?"
            temp = f"{s.temperature_c} C" if s.temperature_c is not None else "temp ?"
            clock = f"{s.clock_mhz:.0f} MHz" if s.clock_mhz is not None else "clock ?"
            print(f"{s.device.name:<16} {s.arch}  runtime {s.runtime_current or 'none'}  {free}  {temp}  {clock}")
            for model, st in s.models.items():
                print(f"  {model:<30} current {st.package_sha256 or st.current}")
            print(f"  {len(s.packages)} package file(s) stored")
    return 0 if all(s.reachable for s in statuses) and results.all_ok else DeviceError.exit_code


def drive_fleet_trust(args) -> int:
    from edge_sdk.fleet.trust import trust

    _, devices = select_devices(args)
    kh = known_hosts(args)
    results = trust(devices, kh, replace=args.replace)
    for r in results:
        print(str(r.value) if r.ok else f"{r.device.name:<16} FAILED: {r.error}")
    print(f"known_hosts: {kh}")
    return 0 if results.all_ok else DeviceError.exit_code


def drive_fleet_rollback(args) -> int:
    from edge_sdk.fleet.remote import rollback

    _, devices = select_devices(args)
    res = rollback(devices[0], args.model, known_hosts=known_hosts(args))
    if args.json:
        print_json(res)
    else:
        print(f"{res['device']}: {res['model']} current is now {res['current'][:12]} "
              f"(golden check ok, max abs err {res['golden']['max_abs_err']}); previous {str(res['previous'])[:12]}")
    return 0


def drive_fleet_inventory(args) -> int:
    from edge_sdk.fleet.deploy import LocalPackage
    from edge_sdk.fleet.inventory import write_ansible

    fleet, devices = select_devices(args)
    packages = [LocalPackage.load(p) for p in args.package]
    written = write_ansible(fleet, devices, packages, args.output, known_hosts=known_hosts(args),
                            inventory_format=args.inventory_format)
    for path in written:
        print(path)
    print(f"run: ansible-playbook -i {written[0]} {written[1]}")
    return 0
