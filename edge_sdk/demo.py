"""`edge-sdk demo`: the README's main job.

For now: compile MobileNetV1 float32 for this machine and for a Raspberry Pi 3, run both (the pi3 build
under qemu as real aarch64 code), and print latency and agreement. Later issues add int8, bitserial,
the fleet and the dashboard.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def add_demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="compile MobileNetV1 float32 for host and pi3, run both, print latency")
    p.add_argument("--out-dir", type=Path, help="where packages go (default $EDGE_SDK_CACHE/demo)")
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--json", action="store_true")
    p.set_defaults(drive=drive_demo)


def drive_demo(args) -> int:
    from edge_sdk.cli import _print_json

    out = args.out_dir or Path(os.environ.get("EDGE_SDK_CACHE", Path.home() / ".cache/edge-sdk")) / "demo"
    rows = run_demo(out_dir=out, alpha=args.alpha, resolution=args.resolution, repeat=args.repeat)
    if args.json:
        _print_json(rows)
    return 0 if all(r["golden_ok"] for r in rows) else 7


def run_demo(*, out_dir: Path, alpha: float, resolution: int, repeat: int) -> list[dict]:
    from rich.console import Console
    from rich.table import Table

    from edge_sdk.compiler.build import compile_model
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.run import run_package
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    console = Console(stderr=True)
    model = build_zoo_model("mobilenet_v1", alpha=alpha, resolution=resolution)
    rows, outputs = [], {}
    for tname in ("host", "pi3"):
        target = get_target(tname)
        pkg = out_dir / f"mobilenet_v1_{alpha}_{resolution}_float32_{tname}.edgepkg"
        with console.status(f"compiling {model.name} float32 for {tname}") as status:
            res = compile_model(model, variant=get_variant("float32"), target=target, out=pkg,
                                progress=lambda m, s=status, t=tname: s.update(f"{t}: {m}"))
        console.log(f"compiled {res}")
        reps = repeat if tname == "host" else max(1, repeat // 5)
        with console.status(f"running {pkg.name}" + (" under qemu (slow)" if tname != "host" else "")):
            run = run_package(pkg, repeat=reps, threads=1)
        outputs[tname] = run.output
        rows.append({"target": tname, "emulated": run.emulated, "compile_s": round(sum(res.seconds.values()), 1),
                     "median_ms": round(run.median_ms, 2), "golden_ok": run.golden_ok,
                     "top1": run.top_k[0][0], "package": str(pkg)})
    diff = float(np.abs(outputs["host"] - outputs["pi3"]).max())
    t = Table(title=f"MobileNetV1 (alpha {alpha}, {resolution}x{resolution}) float32, 1 thread")
    for col in ("target", "how it ran", "compile s", "median ms", "golden", "top-1"):
        t.add_column(col)
    for r in rows:
        how = "qemu-aarch64 -cpu cortex-a53 (emulated, not Pi time)" if r["emulated"] else "native"
        t.add_row(r["target"], how, str(r["compile_s"]), str(r["median_ms"]), "ok" if r["golden_ok"] else "FAILED",
                  str(r["top1"]))
    Console().print(t)
    print(f"host vs pi3 outputs: max abs difference {diff:.2e}")
    for r in rows:
        r["host_vs_pi3_max_abs"] = diff
    return rows
