"""Evaluate several packages on one image folder, record the results, print the table.

    results = evaluate(packages, images=DIR, labels=None, limit=None, where=Where("host"))
    record(results, db)           # one run per package in the results store, source "eval", accuracy = top-1
    print(format_table(results))
"""
from __future__ import annotations

from pathlib import Path

from edge_sdk.errors import UsageError
from edge_sdk.evaluation.dataset import read_labels, scan
from edge_sdk.evaluation.engine import EvalResult, Where, classes_of, evaluate_package


def evaluate(packages: list[Path], *, images: Path, labels: Path | None = None, limit: int | None = None,
             where: Where, progress=None, output: str | None = None) -> list[EvalResult]:
    """Each package's accuracy on the same images (class folders resolved per package: labels may differ);
    `output`: the output to rank of packages with several (default: the first)."""
    from edge_sdk.package import read_manifest

    say = progress or (lambda _msg: None)
    given = read_labels(labels) if labels else None
    out = []
    for pkg in packages:
        m = read_manifest(Path(pkg))
        classes = classes_of(m, output)
        names = given or m.get("labels")
        if names is not None and len(names) != classes:
            src = labels if given else f"{pkg} manifest"
            raise UsageError(f"{src}: {len(names)} labels, but the model has {classes} classes")
        folder = scan(images, labels=names, classes=classes, limit=limit)
        say(f"{Path(pkg).name}: {folder}; running on {where.kind}")
        out.append(evaluate_package(Path(pkg), folder, where=where, output=output))
        say(str(out[-1]))
    return out


def record(results: list[EvalResult], db: Path, *, modelled: dict[str, dict] | None = None) -> list[int]:
    """One results-store run per result (the dashboard's accuracy-vs-latency chart reads them). `modelled`:
    package path -> its modelled Pi figures (edge_sdk/timing/package_figures.py), stored with an emulated run."""
    from edge_sdk.results.store import ResultsStore

    ids = []
    with ResultsStore(db) as store:
        for r in results:
            run_json = {"package": r.package, "model": r.model, "variant": r.variant, "target": r.target,
                        "threads": r.threads, "emulated": r.emulated, "repeats": len(r.latencies_ms),
                        "latency_ms": r.latency(), "versions": r.manifest.get("versions")}
            fig = (modelled or {}).get(r.package) if r.emulated else None
            if fig:
                run_json |= {k: fig[k] for k in ("modelled_ms", "modelled_cycles", "model_version") if k in fig}
            extra = {"source": "eval", "accuracy": r.top1, "top5": r.top5, "top5_k": r.k, "images": r.images,
                     "dataset": r.dataset, "where": r.where, "package_sha256": r.sha256,
                     "latency_kind": "emulated" if r.emulated else "measured"}
            ids.append(store.record_run(run_json, r.manifest, device=r.device, extra=extra))
    return ids


def format_table(results: list[EvalResult]) -> str:
    """A plain-text table: one row per package, then the per-class counts."""
    head = f"{'model':<16} {'variant':<10} {'target':<7} {'where':<28} {'images':>6} {'top-1':>8} {'top-5':>8} {'median ms':>14}"
    lines = [head, "-" * len(head)]
    for r in results:
        ms = f"{r.latency()['median']:.2f}" + (" (qemu)" if r.emulated else "")
        lines.append(f"{r.model:<16} {r.variant:<10} {r.target:<7} {r.where:<28} {r.images:>6} {r.top1:>8.2%} "
                     f"{r.top5:>8.2%} {ms:>14}")
    for r in results:
        cells = ", ".join(f"{c['label']} {c['top1_correct']}/{c['images']}" for c in r.per_class)
        lines.append(f"{r.variant} per class (top-1 correct/images): {cells}")
    if any(r.emulated for r in results):
        lines.append("(qemu) latency is the emulator's wall time per image, not a Pi's")
    return "\n".join(lines)
