"""`edge-sdk dashboard [--export OUT.html]`: add_dashboard_parser -> drive_dashboard -> serve() or export_html()."""
from __future__ import annotations

import sys
from pathlib import Path

from edge_sdk.cli.common import add_db_option
from edge_sdk.dashboard.page import export_html
from edge_sdk.dashboard.server import serve
from edge_sdk.errors import UsageError


def add_dashboard_parser(sub) -> None:
    p = sub.add_parser("dashboard", help="serve the latency dashboard locally, or export it as one HTML file")
    add_db_option(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765; 0 picks a free one)")
    p.add_argument("--export", type=Path, metavar="OUT.html",
                   help="write one self-contained HTML file (works offline) instead of serving")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    p.set_defaults(drive=drive_dashboard)


def drive_dashboard(args) -> int:
    from edge_sdk.results.store import ResultsStore, default_db_path

    if args.db is not None and not args.db.is_file():
        raise UsageError(f"{args.db}: no such results database")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: expected 0..65535")
    db = args.db or default_db_path()
    with ResultsStore(db, read_only=True) as store:  # checks the schema before anything is served or written
        if args.export:
            if args.export.suffix.lower() not in (".html", ".htm"):
                raise UsageError(f"{args.export}: the export must be an .html file")
            out = export_html(store, args.export)
            runs = len(store.query(latest=True))
            print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KB, {runs} runs); open it in any browser, offline")
            return 0
    log = (lambda msg: print(msg, file=sys.stderr)) if args.verbose else None
    serve(db=db, host=args.host, port=args.port, log=log)
    return 0
