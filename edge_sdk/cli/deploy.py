"""`edge-sdk deploy PKG... --fleet F [--group G | --device D] [--parallel N] [--json]`.

Exits 0 only when every device succeeded; otherwise the device error code (DeviceError's) after
printing the per-device table, so a script can tell "all done" from "some devices need a look".
"""
from __future__ import annotations

import sys
from pathlib import Path

from edge_sdk.cli.common import add_fleet_options, console, known_hosts, print_json, select_devices
from edge_sdk.errors import DeviceError, UsageError


def add_deploy_parser(sub) -> None:
    p = sub.add_parser("deploy", help="install packages (and the runtime) on devices, checked, switched atomically")
    p.add_argument("packages", nargs="+", type=Path, metavar="PKG", help=".edgepkg files")
    add_fleet_options(p)
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
    _, devices = select_devices(args)
    packages = [LocalPackage.load(p) for p in args.packages]
    names = [p.name for p in packages]
    if len(set(names)) != len(names):
        raise UsageError(f"two packages install the same model: {', '.join(sorted(n for n in names if names.count(n) > 1))}")
    results = _with_progress(lambda progress: deploy(devices, packages, known_hosts=known_hosts(args),
                                                     max_workers=args.parallel, progress=progress), devices)
    reports = [(r, r.value if r.ok else getattr(r.error, "report", None)) for r in results]
    if args.json:
        print_json([_report_json(r, rep) for r, rep in reports])
    else:
        _print_table(reports)
    return 0 if results.all_ok else DeviceError.exit_code


def _with_progress(run, devices):
    from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn

    err = console()
    columns = (SpinnerColumn(), TextColumn("{task.fields[device]:<14}"), BarColumn(bar_width=24),
               DownloadColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=err, transient=not err.is_terminal, disable=not err.is_terminal) as bars:
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
