"""`edge-sdk run PKG [--device D --fleet F]`: run a package here (aarch64 ones under qemu) or on a device.

A run whose golden check fails exits with RuntimeFailure's code (edge_sdk/errors.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from edge_sdk.cli.common import add_device_options, known_hosts, print_json, select_devices
from edge_sdk.errors import RuntimeFailure, UsageError


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run a package with the runtime bundle (pi3 packages under qemu here)")
    p.add_argument("package", type=Path)
    p.add_argument("--input", type=Path, help="a .npy tensor or an image (default: the package's golden input)")
    p.add_argument("--save-output", type=Path, help="write the output tensor to this .npy file (a model with "
                   "several outputs: an .npz, one array per output name)")
    p.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    p.add_argument("--threads", type=int, default=1, help="runtime threads (default 1)")
    p.add_argument("--top", type=int, default=5, help="how many classes to report")
    p.add_argument("--profile", action="store_true", help="also time each layer (conv vs glue; per_layer_ms in --json)")
    p.add_argument("--no-model", action="store_true", help="a package run under qemu: skip its modelled Pi time "
                   "(the A53 timing model, modelled_ms in --json; cached per package)")
    p.add_argument("--json", action="store_true")
    add_device_options(p, device_help="run on this device of --fleet (the package must be deployed there)")
    p.set_defaults(drive=drive_run)


def drive_run(args) -> int:
    if args.device:
        if args.profile:
            raise UsageError("--profile runs a package here only (not yet with --device/--fleet)")
        return drive_remote_run(args)
    from edge_sdk.run import run_package

    if args.repeat < 1 or args.threads < 1 or args.warmup < 0:
        raise UsageError("--repeat and --threads must be >= 1, --warmup >= 0")
    res = run_package(args.package, input_path=args.input, threads=args.threads, repeat=args.repeat,
                      warmup=args.warmup, k=args.top, profile=args.profile, model=not args.no_model)
    outputs = _outputs_of(args.package)
    if args.save_output:
        _save_output(args.save_output, res.output, outputs)
    if args.json:
        doc = res.to_json()
        if outputs:
            from edge_sdk.models.outputs import split

            doc["outputs"] = [{"name": n, "shape": list(v.shape), "dtype": str(v.dtype), "values": v.reshape(-1).tolist()}
                              for n, v in split(res.output, outputs).items()]
        print_json(doc)
    else:
        print(res)
    return 0 if res.golden_ok else RuntimeFailure.exit_code


def _outputs_of(package: Path) -> list[dict] | None:
    from edge_sdk.package import read_manifest

    return read_manifest(package).get("outputs")


def _save_output(path: Path, out, outputs: list[dict] | None) -> None:
    """One output: an .npy; several: an .npz with one array per output name (the file's shapes and dtypes)."""
    import os

    import numpy as np

    from edge_sdk.models.outputs import split

    if not outputs:
        np.save(path, out)
        return
    if path.suffix != ".npz":
        raise UsageError(f"--save-output {path}: the model has {len(outputs)} outputs "
                         f"({', '.join(o['name'] for o in outputs)}): name an .npz file")
    tmp = path.with_name(path.name + ".tmp.npz")  # nothing half-written under the name asked for
    np.savez(tmp, **split(out, outputs))
    os.replace(tmp, path)


def drive_remote_run(args) -> int:
    """`edge-sdk run PKG --device D --fleet F`: run the package installed on D."""
    from edge_sdk.fleet.remote import RemoteRun, run_remote

    if not getattr(args, "fleet", None):
        raise UsageError("--device needs --fleet (the fleet file that names it)")
    if getattr(args, "save_output", None):
        raise UsageError("--save-output is not supported with --device")
    if args.repeat < 1 or args.threads < 1 or args.warmup < 0:
        raise UsageError("--repeat and --threads must be >= 1, --warmup >= 0")
    _, devices = select_devices(argparse.Namespace(fleet=args.fleet, device=args.device))
    res = run_remote(devices[0], args.package, RemoteRun(input_path=args.input, repeat=args.repeat, warmup=args.warmup,
                                                         threads=args.threads, k=args.top), known_hosts=known_hosts(args))
    if args.json:
        print_json(res)
    else:
        top = ", ".join(f"{t['label'] or t['class']}: {t['score']:.3f}" for t in res["top_k"])
        print(f"{res['model']} {res['variant']} on {res['device']} ({res['arch']}), {res['threads']} thread(s): "
              f"median {res['latency_ms']['median']:.2f} ms over {res['repeats']} runs; golden check "
              f"{'ok' if res['golden']['ok'] else 'FAILED'} (max abs err {res['golden']['max_abs_err']}); top: {top}")
    return 0 if res["golden"]["ok"] else RuntimeFailure.exit_code
