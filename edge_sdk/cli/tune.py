"""`edge-sdk tune MODEL --variant float32 --target T [--trials N] [--device D --fleet F] [--out DIR]`.

add_tune_parser (argparse only) -> drive_tune (checks, one call) -> session.tune_model (library).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from edge_sdk.cli.common import add_device_options, add_model_options, console, load_model, print_json
from edge_sdk.errors import UsageError
from edge_sdk.targets import TARGET_NAMES
from edge_sdk.variants import BASELINE, TUNABLE_VARIANTS


def add_tune_parser(sub) -> None:
    p = sub.add_parser("tune", help="search MetaSchedule schedules for a model's kernels; keep those that beat ours",
                       description="For each distinct kernel of the model: time our schedule, run MetaSchedule "
                       "on the kernel's unscheduled workload, and record the winner. compile applies the "
                       "records by default. Resumable: recorded kernels are skipped, an interrupted search "
                       "continues from its database under $EDGE_SDK_CACHE/tune.")
    add_model_options(p)
    p.add_argument("--variant", default=BASELINE, help=f"a tunable variant: {', '.join(TUNABLE_VARIANTS)} "
                   f"(default {BASELINE}; the int8 and bitserial kernels have no tunable workload yet)")
    p.add_argument("--target", default="host", help=f"{', '.join(TARGET_NAMES)}: host, a Pi target with "
                   "--device/--fleet, or a Cortex-A53 Pi (pi3, pi3plus, pi-zero2w) without a device: candidates "
                   "then run under qemu and are timed by the modelled A53 clock")
    p.add_argument("--trials", type=int, default=32, help="MetaSchedule trials per kernel workload (default 32)")
    p.add_argument("--kernel", action="append", default=[], metavar="NAME",
                   help="tune only this kernel (edge_dw_3) or kind (dw, conv, gemm, pool); repeatable")
    p.add_argument("--out", type=Path, metavar="DIR", help="records root to write DIR/<target>/ "
                   "(default ~/.local/share/edge-sdk/tuning; the repo's is edge_sdk/tune/records)")
    p.add_argument("--list", action="store_true", help="list the model's kernel workloads and their records, tune nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_device_options(p, device_help="time candidates on this device of --fleet (over SSH, with its runtime)")
    p.set_defaults(drive=drive_tune)


def drive_tune(args: argparse.Namespace) -> int:
    from edge_sdk.targets import get_target
    from edge_sdk.tune.store import user_root
    from edge_sdk.variants import get_variant

    variant, target = get_variant(args.variant), get_target(args.target)
    if variant.name not in TUNABLE_VARIANTS:
        raise UsageError(f"--variant {variant.name}: tuning supports {', '.join(TUNABLE_VARIANTS)} only "
                         f"(the {variant.family} kernels have no tunable workload yet)")
    if args.trials < 1:
        raise UsageError(f"--trials {args.trials}: must be >= 1")
    if bool(args.device) != bool(args.fleet):
        raise UsageError("--device and --fleet go together")
    if args.device and not Path(args.fleet).is_file():
        raise UsageError(f"--fleet {args.fleet}: no such file")
    out = args.out or user_root()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder")
    err = console()
    with err.status(f"loading {args.model}"):
        model = load_model(args, family=variant.family)
    if args.list:
        return _list(model, target, out, args)
    from edge_sdk.tune.measure import Remote
    from edge_sdk.tune.session import Search, tune_model

    remote = Remote(args.device, args.fleet, args.known_hosts) if args.device else None
    with _Progress(err) as events:
        result = tune_model(model, target, search=Search(args.trials, seed=args.seed), out_root=out,
                            kernels=args.kernel, remote=remote, events=events)
    if args.json:
        print_json({"target": result.target, "out": str(result.out), "kernels": [r.to_json() for r in result.rows],
                     "untunable": result.untunable, "prices": result.prices})
    else:
        print(result)
    return 0


def _list(model, target, out, args) -> int:
    from edge_sdk.tune.kernels import collect, select
    from edge_sdk.tune.store import RecordSet, default_roots

    workloads, plain = collect(model, target)
    workloads = select(workloads, args.kernel)
    records = RecordSet([out, *default_roots()], target)
    rows = []
    for w in workloads:
        rec = records.lookup(w.func)
        rows.append({"kernel": w.name, "workload": w.description, "hash": w.whash, "layers": w.layers,
                     "record": str(rec.path) if rec else None, "winner": rec.data["winner"] if rec else None})
    if args.json:
        print_json({"kernels": rows, "untunable": plain})
        return 0
    for r in rows:
        print(f"{r['kernel']:<14} {r['workload']:<56} {r['winner'] or 'not tuned':<9} {r['record'] or ''}")
    if plain:
        print(f"not tunable: {', '.join(plain)}")
    return 0


class _Progress:
    """A rich progress bar: one line per workload (i/n, trials done, ours vs best tuned ms)."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from edge_sdk.tune.session import Events

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console)
        progress, outer = self.progress, self

        class _Events(Events):
            def start(self, index, total, wl, *, trials, done, ours_ms=None):
                outer.best, outer.ours = None, ours_ms
                outer.task = progress.add_task(f"{index + 1}/{total} {wl.name}", total=trials, completed=done,
                                               info=wl.description if ours_ms is None else
                                               f"{wl.description}: ours {ours_ms:.4f} ms")

            def batch(self, measured, best_ms):
                if best_ms is not None and (outer.best is None or best_ms < outer.best):
                    outer.best = best_ms
                progress.advance(outer.task, measured)
                ours = f"ours {outer.ours:.4f} ms, " if outer.ours is not None else ""
                progress.update(outer.task, info=ours + (f"best tuned {outer.best:.4f} ms" if outer.best
                                                         else "no valid candidate yet"))

            def stage(self, text):
                if getattr(outer, "task", None) is not None:
                    progress.update(outer.task, info=text)

            def end(self, row):
                o = f"{row.ours_ms:.4f}" if row.ours_ms is not None else "-"
                t = f"{row.tuned_ms:.4f}" if row.tuned_ms is not None else "-"
                progress.update(outer.task, completed=progress.tasks[-1].total,
                                info=f"ours {o} ms, tuned {t} ms -> {row.status}")
                outer.task = None

        self.events = _Events()
        self.task = None
        self.best = None
        self.ours = None

    def __enter__(self):
        self.progress.__enter__()
        return self.events

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)
