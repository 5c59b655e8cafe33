"""`edge-sdk demo`: add_demo_parser -> drive_demo -> demo.run_demo (compile, emulated Pi, classify app, dashboard).

Exits with RuntimeFailure's code when a golden check failed or a device classified no frames.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

from edge_sdk.cli.common import print_json
from edge_sdk.errors import RuntimeFailure, UsageError
from edge_sdk.variants import names


def add_demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="compile, deploy to an emulated Pi 3, classify frames on it, dashboard")
    p.add_argument("--model", default="mobilenet_v1", help="zoo model (default mobilenet_v1)")
    p.add_argument("--alpha", type=float, default=1.0, help="width multiplier (default 1.0)")
    p.add_argument("--resolution", type=int, default=224, help="input size (default 224)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--bitserial", default="w1a2", help=f"the bitserial variant to compile: "
                   f"{', '.join(names(family='bitserial'))} (default w1a2)")
    p.add_argument("--no-ablation", action="store_true", help="skip <bitserial>-unfused on the emulated Pi (the "
                   "fused-glue ablation the dashboard's per-layer chart draws beside the fused variant)")
    p.add_argument("--frames", type=int, default=10, help="sample frames the app classifies (default 10)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--accuracy-images", type=int, metavar="N", help="held-out digits the trained classifier "
                   "(float32, int8, w1a2) is evaluated on, on the emulated Pi (default: all 360; 0: skip)")
    p.add_argument("--no-host", action="store_true", help="skip the host packages and the loopback device")
    p.add_argument("--pi-suite", choices=("bookworm", "trixie"), help="the emulated Pi's Debian suite, as Raspberry "
                   "Pi OS 64-bit 12 (Python 3.11) or 13 (Python 3.13) (default: $EDGE_SDK_PI_SUITE or bookworm)")
    p.add_argument("--db", type=Path, help="results database (default: the user's results store)")
    p.add_argument("--dashboard", type=Path, help="HTML file to write (default: next to the database)")
    p.add_argument("--out-dir", type=Path, help="package cache (default $EDGE_SDK_CACHE/demo)")
    p.add_argument("--json", action="store_true", help="also print the table rows as JSON")
    p.set_defaults(drive=drive_demo)


def drive_demo(args) -> int:
    from edge_sdk.demo import DemoOptions, run_demo
    from edge_sdk.results.store import default_db_path

    if args.frames < 1 or args.threads < 1 or (args.accuracy_images is not None and args.accuracy_images < 0):
        raise UsageError("--frames and --threads must be at least 1, --accuracy-images at least 0")
    db = args.db or default_db_path()
    cache = Path(os.environ.get("EDGE_SDK_CACHE") or Path.home() / ".cache/edge-sdk")
    old = signal.signal(signal.SIGTERM, _sigterm)  # so `finally` stops the devices on kill too
    try:
        report = run_demo(DemoOptions(model=args.model, alpha=args.alpha, resolution=args.resolution,
                                      classes=args.classes, bitserial=args.bitserial, ablation=not args.no_ablation,
                                      frames=args.frames,
                                      threads=args.threads, host=not args.no_host, db=db,
                                      dashboard=args.dashboard or db.with_name("dashboard.html"),
                                      out_dir=args.out_dir or cache / "demo", accuracy_images=args.accuracy_images,
                                      pi_suite=args.pi_suite))
    finally:
        signal.signal(signal.SIGTERM, old)
    if args.json:
        print_json({"latency": report.rows, "accuracy": report.accuracy})
    return 0 if report.ok else RuntimeFailure.exit_code


def _sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
