"""The demo's accuracy rows: a trained classifier in float32, int8 and w1a2, evaluated on a device over SSH.

    pkgs = compile_digits("pi3", folder=cache, say=print)          # cached (compiler/cache.py)
    rows = accuracy_on_device(fleet, pkgs, images=DIR, limit=None, threads=1, db=db, say=print)
    print_accuracy_table(rows, console)

The classifier is the digits ResNet18 (alpha 0.25, 32x32, 10 classes) that tools/train_digits.py trained on
scikit-learn's handwritten digits: float32 from its float weights, int8 from TFLite's full-int8 conversion of
them (edge_sdk/models/weights/digits_int8.tflite), w1a2 from its binarized training (STE). Its preprocessing
is the training one (samples.DIGITS_PREPROCESS). The images are the 360 held-out digits (samples.py). Next
to accuracy: the modelled Pi 3 time of one inference (edge_sdk/timing/package_figures.py, the Cortex-A53 timing model the
demo's latency rows use; not a measurement) and the eval's own time per image on the device (on the
emulated Pi that is QEMU wall time, the emulator's speed, not a Pi's).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from edge_sdk.errors import EdgeError
from edge_sdk.evaluation.samples import DIGITS_LABELS, DIGITS_PREPROCESS

VARIANTS = ("float32", "int8", "w1a2")


def digits_model(variant: str):
    """The trained digits Model for one variant, with its training preprocessing and labels."""
    from edge_sdk.bench.accuracy import SPEC, WEIGHTS, weights_path

    if variant == "int8":
        from edge_sdk.models.importers import load_model_file

        model = load_model_file(WEIGHTS / "digits_int8.tflite", family="int8")
        model.name = "resnet18"  # the zoo name the other two carry (the w1a2 builder needs it): one model in the store
    else:
        from edge_sdk.models.zoo import build_zoo_model

        model = build_zoo_model("resnet18", **SPEC, weights=weights_path("float" if variant == "float32" else variant))
    model.preprocess = dataclasses.replace(model.preprocess, **DIGITS_PREPROCESS)
    model.labels = list(DIGITS_LABELS)
    return model


def compile_digits(target: str, *, folder: Path, say) -> list[Path]:
    """The three packages for `target`, compiled once and then reused."""
    from edge_sdk.compiler.cache import cached_package
    from edge_sdk.targets import get_target
    from edge_sdk.variants import get_variant

    out = []
    for v in VARIANTS:
        pkg, cached = cached_package(digits_model(v), get_variant(v), get_target(target), folder=folder)
        say(f"digits {v} for {target}: {'cached' if cached else 'compiled'} {pkg.name}")
        out.append(pkg)
    return out


def modelled_figures(package: Path, *, threads: int = 1) -> dict | None:
    """Modelled Pi figures of one inference (edge_sdk/timing/package_figures.py: the Cortex-A53 timing model, cached per
    package), what the demo's latency rows show; None when the model cannot price it (no plugins, ...)."""
    from edge_sdk.timing.package_figures import modelled_package

    try:
        return modelled_package(package, threads=threads)[0]
    except (EdgeError, ValueError):  # ValueError: timing/profile.py on a libtiming file it cannot parse (seen once)
        return None


def accuracy_on_device(fleet, packages: list[Path], *, images: Path, limit: int | None, threads: int, db: Path,
                       say, modelled: bool = True) -> list[dict]:
    """Deploy the packages to the fleet's first device, eval them there over SSH, record; the table rows."""
    from edge_sdk.evaluation.engine import Where
    from edge_sdk.evaluation.report import evaluate, record
    from edge_sdk.fleet.config import load_fleet
    from edge_sdk.fleet.deploy import LocalPackage, deploy

    device = load_fleet(fleet.fleet_yaml).select()[0]
    known_hosts = fleet.root / "known_hosts"
    deploy([device], [LocalPackage.load(p) for p in packages], known_hosts=known_hosts).raise_if_failed("deploy")
    say(f"{device.name}: deployed the digits packages; running edge-sdk eval there on held-out digits")
    results = evaluate(packages, images=images, limit=limit, where=Where("device", device=device,
                       known_hosts=known_hosts, threads=threads), progress=say)
    figs = {str(p): modelled_figures(Path(p), threads=threads) for p in packages} if modelled else {}
    run_ids = record(results, db, modelled={k: v for k, v in figs.items() if v})
    rows = []
    for r, run_id in zip(results, run_ids):
        fig = figs.get(r.package)
        rows.append({"device": r.device, "target": r.target, "variant": r.variant, "model": "digits resnet18",
                     "images": r.images, "top1": r.top1, "top5": r.top5, "top1_correct": r.top1_correct,
                     "device_ms": round(r.latency()["median"], 2), "emulated": r.emulated,
                     "modelled_ms": float(fig["modelled_ms"]) if fig else None, "run_id": run_id})
        if rows[-1]["modelled_ms"] is not None:
            say(f"{r.variant}: {rows[-1]['modelled_ms']:.2f} modelled Pi 3 ms (edge_sdk/timing)")
    return rows


def print_accuracy_table(rows: list[dict], console) -> None:
    from rich.table import Table

    if not rows:
        return
    emulated = any(r["emulated"] for r in rows)
    t = Table(title=f"digits ResNet18 (trained; alpha 0.25, 32x32): edge-sdk eval on {rows[0]['device']} over SSH, "
                    f"{rows[0]['images']} held-out digits")
    from edge_sdk.labels import QEMU_WALL

    for col in ("device", "target", "variant", "images", "top-1", "top-5", "modelled Pi 3 ms",
                f"{QEMU_WALL}, ms per image" if emulated else "measured ms per image"):
        t.add_column(col, justify="left" if col in ("device", "target", "variant") else "right")
    for r in rows:
        t.add_row(r["device"], r["target"], r["variant"], str(r["images"]), f"{r['top1']:.2%}", f"{r['top5']:.2%}",
                  "-" if r["modelled_ms"] is None else f"{r['modelled_ms']:.2f}", f"{r['device_ms']:.2f}")
    console.print(t)
    from edge_sdk.variants import get_variant

    console.print("modelled Pi 3 ms: the Cortex-A53 timing model (edge_sdk/timing) over one inference, as the "
                  "latency rows; not a measurement. device ms: the eval's time per image"
                  + (" on the emulated Pi: QEMU wall time (emulator speed, not a Pi)" if emulated else "")
                  + f". w1a2: the zoo variant's net ({get_variant('w1a2').stem} stem, as in the latency rows; "
                  "the float32 training stem is variant w1a2-float-stem)")
