"""Fleet commands for the edge-sdk CLI: add_*_parser (argparse only) -> drive_* (checks, one call) -> library.

    edge-sdk deploy PKG... --fleet F [--group G | --device D] [--parallel N] [--json]
    edge-sdk fleet check|status|trust|rollback|inventory --fleet F ...
    edge-sdk run PKG --device D --fleet F [--json]      (edge_sdk.cli's run calls drive_remote_run)

Every command takes --known-hosts (default ${EDGE_SDK_HOME:-~/.config/edge-sdk}/known_hosts).
deploy exits 0 only when every device succeeded; otherwise the device error code (8) after
printing the per-device table, so a script can tell "all done" from "some devices need a look".
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edge_sdk.errors import DeviceError, UsageError

_DEVICE_ERROR = DeviceError.exit_code


def _fleet_options(p: argparse.ArgumentParser, *, select: bool = True, device_required: bool = False) -> None:
    p.add_argument("--fleet", type=Path, required=True, help="the fleet file (YAML)")
    p.add_argument("--known-hosts", type=Path, help="known_hosts file (default: edge-sdk's own)")
    if device_required:
        p.add_argument("--device", required=True, help="the device name in the fleet file")
    elif select:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--group", help="a group from the fleet file (default: every device)")
        g.add_argument("--device", help="one device")


def add_remote_run_options(p: argparse.ArgumentParser) -> None:
    """For `edge-sdk run`: --device/--fleet make it run on the device instead of here."""
    p.add_argument("--device", help="run on this device of --fleet (the package must be deployed there)")
    p.add_argument("--fleet", type=Path, help="the fleet file naming --device")
    p.add_argument("--known-hosts", type=Path, help="known_hosts file (default: edge-sdk's own)")


def _console():
    from rich.console import Console

    return Console(stderr=True)


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _known_hosts(args):
    from edge_sdk.fleet.ssh import default_known_hosts

    return getattr(args, "known_hosts", None) or default_known_hosts()


def _select(args):
    from edge_sdk.fleet.config import load_fleet

    fleet = load_fleet(args.fleet)
    return fleet, fleet.select(group=getattr(args, "group", None), device=getattr(args, "device", None))


# ---------------------------------------------------------------- deploy
def add_deploy_parser(sub) -> None:
    p = sub.add_parser("deploy", help="install packages (and the runtime) on devices, checked, switched atomically")
    p.add_argument("packages", nargs="+", type=Path, metavar="PKG", help=".edgepkg files")
    _fleet_options(p)
    p.add_argument("--parallel", type=int, default=4, help="devices handled at once (default 4)")
    p.add_argument("--json", action="store_true", help="print the per-device report as JSON")
    p.set_defaults(drive=drive_deploy)


def drive_deploy(args) -> int:
    from edge_sdk.fleet.deploy import LocalPackage, deploy

    if args.parallel < 1:
        raise UsageError("--parallel must be >= 1")
    for pkg in args.packages:
        if pkg.suffix != ".edgepkg" or not pkg.is_file():
            raise UsageError(f"{pkg}: not an .edgepkg file")
    _, devices = _select(args)
    packages = [LocalPackage.load(p) for p in args.packages]
    names = [p.name for p in packages]
    if len(set(names)) != len(names):
        raise UsageError(f"two packages install the same model: {', '.join(sorted(n for n in names if names.count(n) > 1))}")
    results = _with_progress(lambda progress: deploy(devices, packages, known_hosts=_known_hosts(args),
                                                     max_workers=args.parallel, progress=progress), devices)
    reports = [(r, r.value if r.ok else getattr(r.error, "report", None)) for r in results]
    if args.json:
        _print_json([_report_json(r, rep) for r, rep in reports])
    else:
        _print_table(reports)
    return 0 if results.all_ok else _DEVICE_ERROR


def _with_progress(run, devices):
    from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn

    console = _console()
    columns = (SpinnerColumn(), TextColumn("{task.fields[device]:<14}"), BarColumn(bar_width=24),
               DownloadColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=not console.is_terminal,
                  disable=not console.is_terminal) as bars:
        tasks = {d.name: bars.add_task("waiting", device=d.name, total=None) for d in devices}

        def progress(device: str, text: str, done: int, total: int) -> None:
            bars.update(tasks[device], description=text, completed=done, total=total or None)

        return run(progress)


def _report_json(r, rep) -> dict:
    out = {"device": r.device.name, "address": r.device.address, "ok": r.ok, "seconds": round(r.seconds, 3),
           "error": None if r.ok else str(r.error)}
    if rep is not None:
        out.update(runtime=rep.runtime, runtime_bytes_sent=rep.runtime_bytes_sent,
                   package_bytes_sent=rep.package_bytes_sent,
                   packages=[{"package": p.package, "model": p.name, "sha256": p.sha256, "action": p.action,
                              "bytes_sent": p.bytes_sent, "golden": p.golden, "note": p.note or None,
                              "error": p.error} for p in rep.packages])
    return out


def _print_table(reports) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(width=None if sys.stdout.isatty() else 160)
    t = Table(title="deploy")
    for col in ("device", "result", "runtime", "packages", "sent", "time", "error"):
        t.add_column(col, overflow="fold")
    for r, rep in reports:
        pk = ", ".join(f"{p.name}: {p.action}" for p in rep.packages) if rep else ""
        sent = f"{rep.bytes_sent / 1e6:.2f} MB" if rep else ""
        err = "" if r.ok else str(r.error).split("\n")[0][:300]
        t.add_row(r.device.name, "[green]ok[/]" if r.ok else "[red]FAILED[/]", rep.runtime if rep else "", pk,
                  sent, f"{r.seconds:.1f} s", err)
    out.print(t)
    failed = sum(1 for r, _ in reports if not r.ok)
    out.print(f"{len(reports) - failed} of {len(reports)} devices ok" + (f"; {failed} failed" if failed else ""))


# ---------------------------------------------------------------- fleet ...
def add_fleet_parser(sub) -> None:
    p = sub.add_parser("fleet", help="check the fleet file; status, trust, rollback, inventory")
    fsub = p.add_subparsers(dest="fleet_command", required=True, metavar="SUBCOMMAND")
    c = fsub.add_parser("check", help="validate the fleet file")
    _fleet_options(c, select=False)
    c.set_defaults(drive=drive_fleet_check)
    s = fsub.add_parser("status", help="per device: reachable, runtime, packages, current per model, disk, temp")
    _fleet_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(drive=drive_fleet_status)
    t = fsub.add_parser("trust", help="record the devices' host keys (shows each fingerprint)")
    _fleet_options(t)
    t.add_argument("--replace", action="store_true", help="accept a key that changed (a reinstalled device)")
    t.set_defaults(drive=drive_fleet_trust)
    r = fsub.add_parser("rollback", help="make a model's previous version current again on one device")
    _fleet_options(r, device_required=True)
    r.add_argument("--model", required=True, help="the installed model, e.g. mobilenet_v1-float32")
    r.add_argument("--json", action="store_true")
    r.set_defaults(drive=drive_fleet_rollback)
    i = fsub.add_parser("inventory", help="write an Ansible inventory + playbook installing the same artifacts")
    _fleet_options(i)
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
    from edge_sdk.fleet.trust import fleet_status

    _, devices = _select(args)
    results = fleet_status(devices, known_hosts=_known_hosts(args))
    statuses = [r.value for r in results if r.ok]
    if args.json:
        _print_json([s.as_dict() for s in statuses])
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
    return 0 if all(s.reachable for s in statuses) and results.all_ok else _DEVICE_ERROR


def drive_fleet_trust(args) -> int:
    from edge_sdk.fleet.trust import trust

    _, devices = _select(args)
    kh = _known_hosts(args)
    results = trust(devices, kh, replace=args.replace)
    for r in results:
        print(str(r.value) if r.ok else f"{r.device.name:<16} FAILED: {r.error}")
    print(f"known_hosts: {kh}")
    return 0 if results.all_ok else _DEVICE_ERROR


def drive_fleet_rollback(args) -> int:
    from edge_sdk.fleet.remote import rollback

    _, devices = _select(args)
    res = rollback(devices[0], args.model, known_hosts=_known_hosts(args))
    if args.json:
        _print_json(res)
    else:
        print(f"{res['device']}: {res['model']} current is now {res['current'][:12]} "
              f"(golden check ok, max abs err {res['golden']['max_abs_err']}); previous {str(res['previous'])[:12]}")
    return 0


def drive_fleet_inventory(args) -> int:
    from edge_sdk.fleet.deploy import LocalPackage
    from edge_sdk.fleet.inventory import write_ansible

    fleet, devices = _select(args)
    packages = [LocalPackage.load(p) for p in args.package]
    written = write_ansible(fleet, devices, packages, args.output, known_hosts=_known_hosts(args),
                            inventory_format=args.inventory_format)
    for path in written:
        print(path)
    print(f"run: ansible-playbook -i {written[0]} {written[1]}")
    return 0


# ---------------------------------------------------------------- run on a device
def drive_remote_run(args) -> int:
    """`edge-sdk run PKG --device D --fleet F`: run the package installed on D."""
    from edge_sdk.fleet.remote import run_remote

    if not getattr(args, "fleet", None):
        raise UsageError("--device needs --fleet (the fleet file that names it)")
    if getattr(args, "save_output", None):
        raise UsageError("--save-output is not supported with --device")
    if args.repeat < 1 or args.threads < 1 or args.warmup < 0:
        raise UsageError("--repeat and --threads must be >= 1, --warmup >= 0")
    _, devices = _select(argparse.Namespace(fleet=args.fleet, device=args.device))
    res = run_remote(devices[0], args.package, input_path=args.input, repeat=args.repeat, warmup=args.warmup,
                     threads=args.threads, k=args.top, known_hosts=_known_hosts(args))
    if args.json:
        _print_json(res)
    else:
        top = ", ".join(f"{t['label'] or t['class']}: {t['score']:.3f}" for t in res["top_k"])
        print(f"{res['model']} {res['variant']} on {res['device']} ({res['arch']}), {res['threads']} thread(s): "
              f"median {res['latency_ms']['median']:.2f} ms over {res['repeats']} runs; golden check "
              f"{'ok' if res['golden']['ok'] else 'FAILED'} (max abs err {res['golden']['max_abs_err']}); top: {top}")
    return 0 if res["golden"]["ok"] else 7
