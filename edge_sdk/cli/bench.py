"""`edge-sdk bench MODEL --variants ... [--peers] [--emulate T] [--device D --fleet F]`:
add_bench_parser -> drive_bench -> bench.run_bench (here) or bench.device.run_bench_device (on a device).

Exits 1 when a row's output was wrong or a row failed, 0 otherwise.
"""
from __future__ import annotations

import time
from pathlib import Path

from edge_sdk.cli.common import add_device_options, add_model_options, console, load_model, print_json
from edge_sdk.errors import UsageError
from edge_sdk.targets import TARGET_NAMES
from edge_sdk.variants import BASELINE, names


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="time our variants (and the peer engines) side by side on one model")
    add_model_options(p)
    p.add_argument("--variants", default=BASELINE, help=f"comma-separated, of {', '.join(names())} "
                   f"(default {BASELINE})")
    p.add_argument("--target", default="host", help=f"{', '.join(TARGET_NAMES)}: host (default) or a Pi target "
                   "(run under qemu here)")
    p.add_argument("--threads", default="1", help="comma-separated thread counts, e.g. 1,4 (default 1); with "
                   "--emulate each row is modelled at its thread count")
    p.add_argument("--peers", action="store_true", help="also time LiteRT, ONNX Runtime, LCE (tools/setup_peers.sh) "
                   "and ncnn")
    p.add_argument("--ncnn-models", type=Path, metavar="DIR", help="with --peers: benchncnn's network definitions "
                   "by name (mobilenet.param, mobilenet_int8.param, mobilenet_v2.param, resnet18.param, ...) for the "
                   "full-size zoo models (default: the copies shipped in edge_sdk/bench/ncnn_models)")
    p.add_argument("--emulate", metavar="TARGET", help="instead of timing here: the modelled Pi ms of one inference "
                   "(the A53 timing model over the code qemu runs: modelled_ms, modelled_cycles) with its aarch64 "
                   f"instructions and misses, for {', '.join(n for n in TARGET_NAMES if n != 'host')} "
                   "(tools/build_qemu_plugins.sh, llvm-mc-14)")
    p.add_argument("--memory", action="store_true", help="with --emulate: also qemu's cache.c misses priced by the "
                   "instruction-count proxy (timing.proxy.A53Model) and its roofline verdict per row (slower)")
    p.add_argument("--choice", choices=("on", "off", "both", "default"), default="default",
                   help="Pi targets: compile with the per-layer schedule choice by modelled A53 price (on), without "
                   "it (off, as compile --no-choice), or both, a row each, side by side (default: compile's default, "
                   "$EDGE_SDK_CHOICE)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    p.add_argument("--repeat", type=int, default=5, help="at least this many timed runs (default 5)")
    p.add_argument("--min-time-ms", type=float, default=1000.0, help="time each row at least this long (default 1000)")
    p.add_argument("--rounds", type=int, default=3, help="split the timing into this many passes over all rows, "
                   "so machine load hits every row alike (default 3)")
    add_device_options(p, device_help="measure on this device of --fleet: compile for its target, deploy, run there",
                       known_hosts_help="known_hosts file for --device (default: edge-sdk's own)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--db", type=Path, help="results store to write (default: the user's results.sqlite)")
    p.add_argument("--no-store", action="store_true", help="do not write the results store")
    p.set_defaults(drive=drive_bench)


def _check(args) -> None:
    if args.warmup < 0 or args.repeat < 1 or args.min_time_ms < 0 or args.rounds < 1:
        raise UsageError("--warmup must be >= 0, --repeat >= 1, --min-time-ms >= 0, --rounds >= 1")
    if args.no_store and args.db:
        raise UsageError("--db and --no-store contradict each other")
    if bool(args.device) != bool(args.fleet):
        raise UsageError("--device and --fleet go together: name a device of a fleet file")
    if args.ncnn_models is not None and not (args.peers and args.ncnn_models.is_dir()):
        raise UsageError(f"--ncnn-models {args.ncnn_models}: " + ("not a directory" if args.peers else "needs --peers"))
    if args.device and (args.peers or args.emulate or args.memory or args.target != "host"):
        raise UsageError("--device runs on the device's own target: drop --peers, --emulate, --memory and --target")


def _check_file_variants(model, variants: list[str]) -> None:
    """A file a backend reads itself (full-integer .tflite, QDQ ONNX, LCE: no float graph) has no float rows."""
    from edge_sdk.variants import VARIANTS

    floats = [v for v in variants if VARIANTS[v].family == "float"]
    if model.mod is None and floats:
        raise UsageError(f"{model.source}: a quantized model file (no float graph): the {', '.join(floats)} "
                         "variant(s) need the float model; bench this file with --variants int8 (LCE: w1a1)")


def drive_bench(args) -> int:
    from edge_sdk.bench.bench import FAILED, WRONG, parse_threads, parse_variants, run_bench
    from edge_sdk.bench.report import record, render

    variants, threads = parse_variants(args.variants), parse_threads(args.threads)
    _check(args)
    t0 = time.perf_counter()
    with console().status(f"loading {args.model}") as status:
        model = load_model(args, family="auto")  # a full-int8 .tflite or QDQ ONNX file as it is
        _check_file_variants(model, variants)

        def progress(msg: str) -> None:
            status.update(f"bench {model.name}: {msg}")

        if args.device:
            from edge_sdk.bench.device import run_bench_device

            result = run_bench_device(model, variants=variants, device=args.device, fleet=args.fleet,
                                      threads=threads, warmup=args.warmup, repeat=args.repeat, seed=args.seed,
                                      known_hosts=args.known_hosts, progress=progress)
        else:
            result = run_bench(model, variants=variants, target=args.target, threads=threads, peers=args.peers,
                               emulate=args.emulate, memory=args.memory, warmup=args.warmup, repeat=args.repeat,
                               min_time_ms=args.min_time_ms, rounds=args.rounds, seed=args.seed, progress=progress,
                               ncnn_models=args.ncnn_models, choice=args.choice)
    result.options["seconds"] = round(time.perf_counter() - t0, 1)
    result.store = {"written": 0, "note": "--no-store"} if args.no_store else record(result, db=args.db)
    if args.json:
        print_json(result.to_json())
    else:
        render(result)
    return 1 if any(r.status in (WRONG, FAILED) for r in result.rows) else 0
