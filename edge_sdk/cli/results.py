"""`edge-sdk results {record,list,export}`: add_results_parser -> drive_results -> the SQLite results store."""
from __future__ import annotations

import json
from pathlib import Path

from edge_sdk.cli.common import add_db_option
from edge_sdk.errors import UsageError
from edge_sdk.results.store import ResultsStore, device_facts


def add_results_parser(sub) -> None:
    p = sub.add_parser("results", help="record, list and export measured runs (the SQLite results store)")
    rsub = p.add_subparsers(dest="results_command", required=True, metavar="ACTION")

    r = rsub.add_parser("record", help="store a run JSON (from `edge-sdk run --json`) with its package")
    r.add_argument("run_json", type=Path, help="the run's JSON file")
    r.add_argument("--package", type=Path, required=True, help="the .edgepkg that was run (for its manifest)")
    r.add_argument("--device", required=True, help="where it ran (a fleet device name, or 'localhost')")
    r.add_argument("--accuracy", type=float, help="top-1 accuracy in [0, 1], when measured")
    r.add_argument("--local-facts", action="store_true",
                   help="also record this machine's CPU model, clock and temperature (only if it ran here)")
    add_db_option(r)

    lst = rsub.add_parser("list", help="print the stored runs")
    for opt in ("model", "variant", "device", "target"):
        lst.add_argument(f"--{opt}", help=f"only runs with this {opt}")
    lst.add_argument("--latest", action="store_true", help="only the newest run per model/variant/device/threads")
    lst.add_argument("--json", action="store_true")
    add_db_option(lst)

    e = rsub.add_parser("export", help="write every run to CSV and/or JSON")
    e.add_argument("--csv", type=Path, help="CSV file to write (one row per measurement)")
    e.add_argument("--json", type=Path, help="JSON file to write (runs, packages and layer tables)")
    add_db_option(e)
    p.set_defaults(drive=drive_results)


def drive_results(args) -> int:
    cmd = args.results_command
    if cmd == "record":
        if not args.run_json.is_file():
            raise UsageError(f"{args.run_json}: no such run JSON file")
        try:
            run = json.loads(args.run_json.read_text())
        except json.JSONDecodeError as e:
            raise UsageError(f"{args.run_json}:{e.lineno}: not valid JSON ({e.msg})") from e
        if args.accuracy is not None and not 0.0 <= args.accuracy <= 1.0:
            raise UsageError(f"--accuracy {args.accuracy}: expected a fraction in [0, 1]")
        from edge_sdk.package import read_manifest

        manifest = read_manifest(args.package)
        extra = device_facts() if args.local_facts else {}
        if args.accuracy is not None:
            extra["accuracy"] = args.accuracy
        with ResultsStore(args.db) as store:
            run_id = store.record_run(run, manifest, device=args.device, extra=extra)
            print(f"recorded run {run_id} in {store.path}")
        return 0
    with ResultsStore(args.db, create=args.db is None, read_only=True) as store:  # never writes a schema
        if cmd == "export":
            if not args.csv and not args.json:
                raise UsageError("results export: give --csv FILE and/or --json FILE")
            if args.csv:
                print(f"wrote {store.export_csv(args.csv)} runs to {args.csv}")
            if args.json:
                print(f"wrote {store.export_json(args.json)} runs to {args.json}")
            return 0
        rows = store.query(model=args.model, variant=args.variant, device=args.device, target=args.target,
                           latest=args.latest)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("no runs recorded yet")
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"{len(rows)} runs")
    for col in ("id", "time", "device", "model", "variant", "target", "threads", "median ms", "p10..p90 ms",
                "golden", "accuracy"):
        t.add_column(col, justify="right" if col in ("id", "threads", "median ms", "accuracy") else "left")
    for r in rows:
        spread = ("" if r["latency_p10_ms"] is None
                  else f"{r['latency_p10_ms']:.2f}..{r['latency_p90_ms']:.2f}")
        golden = {None: "-", True: "ok", False: "FAILED"}[r["golden_ok"]]
        t.add_row(str(r["run_id"]), escape(str(r["time"])), escape(r["device"]), escape(r["model"]), escape(r["variant"]),
                  escape(r["target"]) + (" (emulated)" if r["emulated"] else ""), str(r["threads"]),
                  f"{r['latency_median_ms']:.2f}", spread, golden,
                  "" if r["accuracy"] is None else f"{r['accuracy']:.3f}")
    Console().print(t)
    return 0
