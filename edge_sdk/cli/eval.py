"""`edge-sdk eval PKG [PKG ...] --images DIR`: top-1 / top-5 accuracy on labelled images, here or on a device.

add_eval_parser (argparse only) -> drive_eval (checks, one call) -> edge_sdk.evaluation.report.evaluate.
DIR holds one sub-folder per class (named by label or class index). Without --device a package runs on
this machine (an aarch64 package under qemu: slow, use --limit); with --device/--fleet it runs where
deploy installed it. Each result goes to the results store (the dashboard's accuracy-vs-latency chart).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from edge_sdk.cli.common import add_db_option, add_device_options, console, known_hosts, print_json, select_devices
from edge_sdk.errors import UsageError


def add_eval_parser(sub) -> None:
    p = sub.add_parser("eval", help="top-1/top-5 accuracy of packages on a folder of labelled images")
    p.add_argument("packages", type=Path, nargs="+", metavar="PKG", help=".edgepkg files (e.g. float32, int8, w1a2)")
    p.add_argument("--images", type=Path, required=True, metavar="DIR",
                   help="DIR/<class>/<image>: one sub-folder per class, named by its label or class index")
    p.add_argument("--labels", type=Path, help="class labels, one per line (default: the package's labels)")
    p.add_argument("--limit", type=int, metavar="N", help="at most N images, taken round-robin over the classes")
    p.add_argument("--threads", type=int, default=1, help="runtime threads (default 1)")
    p.add_argument("--output", metavar="NAME", help="a package with several outputs: the classifier output to rank "
                   "(default: the first)")
    p.add_argument("--json", action="store_true", help="print the results as JSON (top1 and top5 as fractions)")
    p.add_argument("--no-record", action="store_true", help="do not write the results store")
    add_db_option(p)
    add_device_options(p, device_help="run on this device of --fleet (the packages must be deployed there)")
    p.set_defaults(drive=drive_eval)


def drive_eval(args) -> int:
    from edge_sdk.evaluation.engine import Where
    from edge_sdk.evaluation.report import evaluate, format_table, record

    for pkg in args.packages:
        if not pkg.is_file():
            raise UsageError(f"{pkg}: no such package file")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit}: must be at least 1")
    if args.threads < 1:
        raise UsageError(f"--threads {args.threads}: must be at least 1")
    where = Where("local", threads=args.threads)
    if args.device:
        if not args.fleet:
            raise UsageError("--device needs --fleet (the fleet file that names it)")
        _, devices = select_devices(argparse.Namespace(fleet=args.fleet, device=args.device))
        where = Where("device", device=devices[0], known_hosts=known_hosts(args), threads=args.threads)
    out = console()
    results = evaluate(args.packages, images=args.images, labels=args.labels, limit=args.limit, where=where,
                       output=args.output, progress=lambda msg: out.print(f"  [dim]eval:[/] {msg}", highlight=False))
    if not args.no_record:
        from edge_sdk.results.store import default_db_path

        db = args.db or default_db_path()
        ids = record(results, db)
        out.print(f"  [dim]eval:[/] recorded runs {', '.join(map(str, ids))} in {db}", highlight=False)
    if args.json:
        print_json([r.to_json() for r in results])
    else:
        print(format_table(results))
    return 0
