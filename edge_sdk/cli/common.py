"""What the commands share: the console, JSON output, the model options and loading, the device options.

Only edge_sdk/cli/ imports this module; library modules never do.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from edge_sdk.errors import EdgeError, UsageError

KNOWN_HOSTS_HELP = "known_hosts file (default: edge-sdk's own)"


def console():
    """Progress and notes go to stderr, so stdout stays the result (a table or --json)."""
    from rich.console import Console

    return Console(stderr=True)


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


@contextlib.contextmanager
def interrupts_stay_interrupts():
    """Ctrl-C inside TVM's C++ (lowering, building) reaches Python as a bare RuntimeError('') that the
    compiler reports as a failed compile (exit 5, empty message): remember the signal, and turn the
    error it caused back into KeyboardInterrupt (main: "interrupted", exit 130)."""
    import signal

    seen = []

    def on_sigint(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    except EdgeError:
        if seen:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, old)


def check_output_file(path: Path) -> None:
    """An output file can be written there: not a folder, its folder exists (or can be made) and is writable."""
    import os

    if path.is_dir():
        raise UsageError(f"{path}: is a folder; -o names the file to write, e.g. {path / 'model.edgepkg'}")
    parent = path.parent if str(path.parent) else Path(".")
    existing = next((p for p in (parent, *parent.parents) if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{path}: cannot write there ({existing} is not a writable folder)")


# ---------------------------------------------------------------- model options (compile, bench, tune, ...)
def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a zoo name (mobilenet_v1, mobilenet_v2, resnet18) or a .tflite / .onnx file")
    p.add_argument("--alpha", type=float, help="zoo: width multiplier (default 1.0)")
    p.add_argument("--resolution", type=int, help="zoo: input height and width (default 224)")
    p.add_argument("--classes", type=int, default=1000, help="zoo: number of classes (default 1000)")
    p.add_argument("--weights", type=Path, help="zoo: .npz weights (default: seeded random init)")
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and the golden input")
    p.add_argument("--labels", type=Path, help="a text file with one class label per line")
    p.add_argument("--input-shape", type=_shape, metavar="N,C,H,W", help="an ONNX file with symbolic input "
                   "dims (N, H, W ...): the shape to compile for, e.g. 1,3,320,320")


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected comma-separated integers, e.g. 1,3,320,320") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': every dimension must be >= 1")
    return dims


def load_model(args, *, family: str = "float"):
    """The Model a command names: a zoo build or a model file read for the variant family ("auto", for
    bench: a full-int8 .tflite or QDQ ONNX file as the int8 variant reads it, any other file as float)."""
    from edge_sdk.models.zoo import ZOO, build_zoo_model

    looks_like_file = Path(args.model).suffix in (".tflite", ".onnx") or "/" in args.model
    if looks_like_file or args.model not in ZOO and Path(args.model).exists():
        for opt in ("alpha", "resolution", "weights"):
            if getattr(args, opt) is not None:
                raise UsageError(f"--{opt} applies to zoo models only, not to the file {args.model}")
        from edge_sdk.models.importers import load_model_file

        model = load_model_file(Path(args.model), family=family, input_shape=getattr(args, "input_shape", None))
    else:
        model = build_zoo_model(args.model, alpha=args.alpha, resolution=args.resolution, classes=args.classes,
                                weights=args.weights, seed=args.seed)
    if args.labels:
        model.labels = _read_labels(args.labels, model)
    return model


def _read_labels(path: Path, model) -> list[str]:
    if not path.is_file():
        raise UsageError(f"{path}: no such labels file")
    labels = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    n = model.mod["main"].ret_ty.shape[-1] if model.mod is not None and hasattr(model.mod["main"], "ret_ty") else None
    if n is not None and int(n) != len(labels):
        raise UsageError(f"{path}: {len(labels)} labels, but the model has {int(n)} classes")
    return labels


def add_db_option(p: argparse.ArgumentParser) -> None:
    """--db: the results store (results, dashboard)."""
    p.add_argument("--db", type=Path, help="results database (default $EDGE_SDK_DATA/results.sqlite, "
                   "EDGE_SDK_DATA defaulting to ~/.local/share/edge-sdk)")


# ---------------------------------------------------------------- device options (run, bench, tune, deploy, fleet)
def add_known_hosts_option(p: argparse.ArgumentParser, *, text: str = KNOWN_HOSTS_HELP) -> None:
    p.add_argument("--known-hosts", type=Path, help=text)


def add_device_options(p: argparse.ArgumentParser, *, device_help: str,
                       known_hosts_help: str = KNOWN_HOSTS_HELP) -> None:
    """--device D --fleet F [--known-hosts K]: a command that runs here unless it is given a device."""
    p.add_argument("--device", help=device_help)
    p.add_argument("--fleet", type=Path, help="the fleet file naming --device")
    add_known_hosts_option(p, text=known_hosts_help)


def add_fleet_options(p: argparse.ArgumentParser, *, select: bool = True, device_required: bool = False) -> None:
    """--fleet F (required) [--known-hosts K] and the devices to act on: --group G | --device D, or --device D."""
    p.add_argument("--fleet", type=Path, required=True, help="the fleet file (YAML)")
    add_known_hosts_option(p)
    if device_required:
        p.add_argument("--device", required=True, help="the device name in the fleet file")
    elif select:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--group", help="a group from the fleet file (default: every device)")
        g.add_argument("--device", help="one device")
    if select or device_required:
        p.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                       help="seconds for each step of reaching a device: TCP connect, SSH banner, key exchange, "
                            "login (default: the fleet file's defaults.connect_timeout, else 10)")


def known_hosts(args):
    from edge_sdk.fleet.ssh import default_known_hosts

    return getattr(args, "known_hosts", None) or default_known_hosts()


def select_devices(args):
    """(fleet, devices) for --fleet and --group/--device (every device when neither is given)."""
    from edge_sdk.fleet.config import load_fleet

    fleet = load_fleet(args.fleet)
    devices = fleet.select(group=getattr(args, "group", None), device=getattr(args, "device", None))
    seconds = getattr(args, "connect_timeout", None)
    if seconds is not None:
        if not 0 < seconds <= 600:
            raise UsageError(f"--connect-timeout {seconds:g}: expected seconds above 0 and at most 600")
        devices = [dataclasses.replace(d, connect_timeout=seconds) for d in devices]
    return fleet, devices
