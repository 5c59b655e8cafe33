"""The edge-sdk command line: add_X_parser (argparse only) -> drive_X (checks, one call) -> library.

`main(argv) -> int` so tests call it directly. Errors are EdgeError subclasses mapped to exit codes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edge_sdk import __version__
from edge_sdk.errors import EdgeError, UsageError


def _console():
    from rich.console import Console

    return Console(stderr=True)


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


# ---------------------------------------------------------------- model loading (shared by commands)
def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a zoo name (mobilenet_v1, mobilenet_v2, resnet18) or a .tflite / .onnx file")
    p.add_argument("--alpha", type=float, help="zoo: width multiplier (default 1.0)")
    p.add_argument("--resolution", type=int, help="zoo: input height and width (default 224)")
    p.add_argument("--classes", type=int, default=1000, help="zoo: number of classes (default 1000)")
    p.add_argument("--weights", type=Path, help="zoo: .npz weights (default: seeded random init)")
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and the golden input")
    p.add_argument("--labels", type=Path, help="a text file with one class label per line")


def load_model(args, *, family: str = "float"):
    """The Model a command names: a zoo build or a model file read for the variant family."""
    from edge_sdk.models.zoo import ZOO, build_zoo_model

    looks_like_file = Path(args.model).suffix in (".tflite", ".onnx") or "/" in args.model
    if looks_like_file or args.model not in ZOO and Path(args.model).exists():
        for opt in ("alpha", "resolution", "weights"):
            if getattr(args, opt) is not None:
                raise UsageError(f"--{opt} applies to zoo models only, not to the file {args.model}")
        from edge_sdk.models.importers import load_model_file

        model = load_model_file(Path(args.model), family=family)
    else:
        model = build_zoo_model(args.model, alpha=args.alpha, resolution=args.resolution, classes=args.classes,
                                weights=args.weights, seed=args.seed)
    if args.labels:
        if not args.labels.is_file():
            raise UsageError(f"{args.labels}: no such labels file")
        labels = [ln.strip() for ln in args.labels.read_text().splitlines() if ln.strip()]
        n = model.mod["main"].ret_ty.shape[-1] if model.mod is not None and hasattr(model.mod["main"], "ret_ty") else None
        if n is not None and int(n) != len(labels):
            raise UsageError(f"{args.labels}: {len(labels)} labels, but the model has {int(n)} classes")
        model.labels = labels
    return model


# ---------------------------------------------------------------- compile
def add_compile_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile a model into a .edgepkg for one variant and target")
    add_model_options(p)
    p.add_argument("--variant", default="float32", help="float32 (int8, w1a2, ... as they land)")
    p.add_argument("--target", default="host", help="host, pi3, pi-zero2w, pi4")
    p.add_argument("-o", "--output", type=Path, required=True, help="the .edgepkg file to write")
    p.add_argument("--calibrate", type=Path, metavar="DIR", help="int8 of a float model: calibrate activation "
                   "ranges on the images in DIR (default: seeded random frames, with a warning)")
    p.add_argument("--no-tuning", action="store_true", help="use our hand schedules only, ignoring tuning records")
    p.add_argument("--tuning-records", type=Path, action="append", default=[], metavar="DIR",
                   help="also apply the tuning records under DIR/<target>/ (searched before the user's "
                   "~/.local/share/edge-sdk/tuning and the shipped ones; float32 only; repeatable)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(drive=drive_compile)


def drive_compile(args) -> int:
    from edge_sdk.compiler.build import compile_model
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    variant, target = get_variant(args.variant), get_target(args.target)
    if args.output.suffix != ".edgepkg":
        raise UsageError(f"{args.output}: the output file must end in .edgepkg")
    if args.calibrate is not None and (variant.family != "int8" or not args.calibrate.is_dir()):
        raise UsageError(f"--calibrate {args.calibrate}: needs --variant int8 and a folder of images")
    for d in args.tuning_records:
        if args.no_tuning or variant.family != "float" or not d.is_dir():
            raise UsageError(f"--tuning-records {d}: needs an existing folder, --variant float32 and no --no-tuning")
    target.compiler()  # a missing cross compiler fails before the model is built
    console = _console()
    with console.status(f"loading {args.model}") as status:
        model = load_model(args, family=variant.family)
        if args.calibrate is not None:
            model.options["calibrate"] = str(args.calibrate)

        def progress(msg: str) -> None:
            status.update(f"{model.name} {variant.name} -> {target.name}: {msg}")
            console.print(f"  [dim]{model.name} -> {target.name}:[/] {msg}", highlight=False)

        result = compile_model(model, variant=variant, target=target, out=args.output, progress=progress,
                               seed=args.seed, use_tuning=not args.no_tuning, tuning_roots=args.tuning_records)
    if args.json:
        _print_json({"package": str(result.package), "seconds": result.seconds,
                     "size_bytes": result.package.stat().st_size})
    else:
        print(result)
    return 0


# ---------------------------------------------------------------- inspect
def add_inspect_parser(sub) -> None:
    p = sub.add_parser("inspect", help="print a package's manifest: layers, FLOPs, sizes")
    p.add_argument("package", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(drive=drive_inspect)


def drive_inspect(args) -> int:
    from edge_sdk.package import read_manifest

    m = read_manifest(args.package)
    if args.json:
        _print_json(m)
        return 0
    from rich.console import Console
    from rich.table import Table

    out = Console(width=None if sys.stdout.isatty() else 140)
    i = m["input"]
    out.print(f"[bold]{m['model']['name']}[/] {m['variant']} for {m['target']['name']} "
              f"({m['target']['llvm'].get('mcpu')}), built {m['created']} with edge-sdk {m['versions']['edge_sdk']}, "
              f"TVM {m['versions']['tvm']}")
    out.print(f"source: {m['model']['source']}")
    out.print(f"input: {i['name']} {i['shape']} {i['dtype']} {i['layout']}, preprocess {i['preprocess']}")
    out.print(f"output: {m['output']['shape']} {m['output']['dtype']}; labels: "
              f"{len(m['labels']) if m.get('labels') else 'none'}")
    t = Table(title=f"{len(m['layers'])} layers")
    for col in ("layer", "op", "output", "MFLOP", "KB read", "KB written", "FLOP/byte"):
        t.add_column(col, justify="right" if col not in ("layer", "op", "output") else "left")
    for r in m["layers"]:
        op = r["op"] + ("+" + "+".join(r["epilogue"]) if r["epilogue"] else "")
        t.add_row(r["name"], op, "x".join(map(str, r["output"])), f"{r['flops'] / 1e6:.2f}",
                  f"{r['bytes_read'] / 1024:.0f}", f"{r['bytes_written'] / 1024:.0f}", f"{r['intensity']:.2f}")
    out.print(t)
    sizes = ", ".join(f"{n} {v['size'] / 1e6:.2f} MB" for n, v in m["members"].items())
    out.print(f"total {m['totals']['flops'] / 1e9:.3f} GFLOP; {m['params']['count']} parameter tensors "
              f"({m['params']['bytes'] / 1e6:.2f} MB); members: {sizes}")
    return 0


# ---------------------------------------------------------------- run
def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run a package with the runtime bundle (pi3 packages under qemu here)")
    p.add_argument("package", type=Path)
    p.add_argument("--input", type=Path, help="a .npy tensor or an image (default: the package's golden input)")
    p.add_argument("--save-output", type=Path, help="write the output tensor to this .npy file")
    p.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    p.add_argument("--threads", type=int, default=1, help="runtime threads (default 1)")
    p.add_argument("--top", type=int, default=5, help="how many classes to report")
    p.add_argument("--profile", action="store_true", help="also time each layer (conv vs glue; per_layer_ms in --json)")
    p.add_argument("--json", action="store_true")
    from edge_sdk.fleet.cli import add_remote_run_options

    add_remote_run_options(p)  # --device, --fleet, --known-hosts: run the installed package on a device
    p.set_defaults(drive=drive_run)


def drive_run(args) -> int:
    if args.device:
        if args.profile:
            raise UsageError("--profile runs a package here only (not yet with --device/--fleet)")
        from edge_sdk.fleet.cli import drive_remote_run

        return drive_remote_run(args)
    from edge_sdk.run import run_package

    if args.repeat < 1 or args.threads < 1 or args.warmup < 0:
        raise UsageError("--repeat and --threads must be >= 1, --warmup >= 0")
    res = run_package(args.package, input_path=args.input, threads=args.threads, repeat=args.repeat,
                      warmup=args.warmup, k=args.top, profile=args.profile)
    if args.save_output:
        import numpy as np

        np.save(args.save_output, res.output)
    if args.json:
        _print_json(res.to_json())
    else:
        print(res)
    return 0 if res.golden_ok else 7


# ---------------------------------------------------------------- tables
def add_list_parser(sub) -> None:
    p = sub.add_parser("list", help="list the targets, variants and zoo models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(drive=drive_list)


def drive_list(args) -> int:
    from edge_sdk.models.zoo import ZOO
    from edge_sdk.targets import TARGET_NAMES, get_target
    from edge_sdk.variants import VARIANTS

    targets = [get_target(n) for n in TARGET_NAMES]
    data = {
        "targets": [{"name": t.name, "arch": t.arch, "description": t.description, "cores": t.cores,
                     "clock_ghz": t.clock_ghz, "peak_gflops": t.peak_gflops, "mem_gbps": t.mem_gbps} for t in targets],
        "variants": [{"name": v.name, "description": v.description, "available": v.available} for v in VARIANTS.values()],
        "models": sorted(ZOO),
    }
    if args.json:
        _print_json(data)
        return 0
    for t in data["targets"]:
        print(f"target  {t['name']:<10} {t['arch']:<8} {t['peak_gflops']:>7.1f} GFLOP/s {t['mem_gbps']:>5.1f} GB/s  {t['description']}")
    for v in data["variants"]:
        print(f"variant {v['name']:<10} {'' if v['available'] else '(not yet) '}{v['description']}")
    print("models  " + ", ".join(data["models"]))
    return 0


# ---------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-sdk", description="Compile, ship and compare image classifiers "
                                     "on Raspberry Pis (float32, int8, bitserial).")
    parser.add_argument("--version", action="version", version=f"edge-sdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_compile_parser, add_inspect_parser, add_run_parser, add_list_parser):
        add(sub)
    from edge_sdk.bench.bench import add_bench_parser
    from edge_sdk.dashboard import add_dashboard_parser
    from edge_sdk.demo import add_demo_parser
    from edge_sdk.fleet.cli import add_deploy_parser, add_fleet_parser
    from edge_sdk.results import add_results_parser
    from edge_sdk.tune.cli import add_tune_parser

    for add in (add_bench_parser, add_deploy_parser, add_fleet_parser, add_demo_parser, add_results_parser,
                add_dashboard_parser, add_tune_parser):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.drive(args)
    except EdgeError as e:
        print(f"edge-sdk: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("edge-sdk: interrupted", file=sys.stderr)
        return 130
