"""Regenerate the shipped choice records (tune/choice_records.py): `python tools/make_choice_records.py`.

For each zoo model and variant (default: mobilenet_v1, mobilenet_v2, resnet18 x float32, int8), the model
is lowered for pi3 as compile does (same seed, same PTQ, same tuning records) with the pricing chooser
(compile/choice/chooser.Chooser): every distinct layer workload's candidates are priced under qemu with
the A53 timing plugin and checked against numpy, each decision kept in the choice cache
($EDGE_SDK_CACHE/choice) as soon as it is made. So the command is resumable (an interrupted run, or a
re-run after a kernel helper added candidates, prices only the workloads whose candidates' code changed)
and prints progress per workload. Each pair's file is written atomically when its model is done.

Workloads that share a record key (ResNet18's int8 convs of one shape, each with its own zero points)
become one record: the candidate with the least modelled cycles summed over them (among those correct on
every one), with every winner code it was checked as (the record's "codes").
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

MODELS = ("mobilenet_v1", "mobilenet_v2", "resnet18")
VARIANTS = ("float32", "int8")


def _cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class _SitesDone(Exception):
    """Every kernel of the model has been emitted (and chosen): what lower_with(sites_only=True) stops at."""


def _stop(*_a, **_k):
    raise _SitesDone


def lower_with(model, variant, target, chooser, *, say, seed: int = 0, sites_only: bool = False):
    """The variant family's backend under `chooser`, with compile's tuning records (compile_model's build step).
    sites_only: stop once every kernel was emitted (the first lift_params after the kernel rewrite, float or
    int8), returning None: the records need the chooser's decisions, not the built model (whose TVM build
    cost as much CPU as the lowering again)."""
    import contextlib

    from edge_sdk.compiler import lower
    from edge_sdk.compiler.build import _backend, tuning_records
    from edge_sdk.compiler.choice import using
    from edge_sdk.compiler.int8 import backend as int8_backend

    extra = {"tuning": tuning_records(target, use=True, extra=[])} if variant.tunable else {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(using(chooser))
        if sites_only:
            for mod in (lower, int8_backend):
                old = mod.lift_params
                stack.callback(setattr, mod, "lift_params", old)
                mod.lift_params = _stop
        try:
            return _backend(variant.family)(model, variant, target, progress=say, seed=seed, **extra)
        except _SitesDone:
            say("every kernel chosen; the model itself is not built (records only)")
            return None


def current_records(path: Path) -> dict[str, tuple[dict, str]]:
    """{record key text: (raw record, the timing model it was priced under)} of an existing records file (empty
    when there is none)."""
    from edge_sdk.tune import choice_records as R

    if not path.is_file():
        return {}
    data = R.read_file(path)
    return {R.key_text(r["family"], r["workload"]): (r, r.get("timing_model") or data.get("timing_model", ""))
            for r in data["records"]}


def kept_decision(site, kept: tuple[dict, str] | None) -> dict | None:
    """The decision an existing record still stands for on this site (None: price it again): the same candidate
    list, the rule's code among the ones it was compared with, and the winner's code among the ones checked
    against numpy. Its prices are the record's, under the timing model it names."""
    from edge_sdk.compiler.choice import DEFAULT
    from edge_sdk.compiler.choice.chooser import code_hashes

    if kept is None:
        return None
    raw, timing = kept
    win = raw["schedule"]
    if set(raw.get("names") or ()) != set(site.candidates()) or win not in raw.get("candidates", {}):
        return None
    hashes = code_hashes(site, sorted({DEFAULT, win}))
    if hashes[DEFAULT] not in (raw.get("default_codes") or ()) or hashes[win] not in (raw.get("codes") or [raw["code"]]):
        return None
    cands = {n: {"ok": True, "cycles": c} for n, c in raw["candidates"].items()}
    cands |= {n: {"ok": False, "reason": "rejected when recorded"} for n in raw.get("rejected", ())}
    cands[win]["max_error"] = raw["max_error"]
    return {"schedule": win, "modelled_cycles": raw["modelled_cycles"], "default_cycles": raw.get("default_cycles"),
            "candidates": cands, "cached": False, "source": "kept", "timing_model": timing}


def keyed_chooser(target, *, progress, cached_only: bool = False, price_until: float | None = None,
                  keep: dict[str, tuple[dict, str]] | None = None):
    """A pricing Chooser that prices one workload per record key: a later workload with the same key (another
    int8 conv of that shape with its own zero points) takes the first one's prices and winner once that
    winner, built for it, has run under plain qemu and matched its numpy reference; else it is priced too.
    cached_only: nothing is priced; a workload whose decision or every candidate's price is not in the
    choice cache gets no record (compile keeps the rule there), counted in stats["not_priced"]; price_until
    (time.time() seconds): from then on as cached_only (a budget for the pricing, not for the lowering).
    keep (current_records of the file being remade): a workload whose record still stands (kept_decision) keeps
    it, priced by nothing; counted in stats["kept"]."""
    import warnings

    from edge_sdk.compiler.choice import standalone
    from edge_sdk.compiler.choice.chooser import ChoiceWarning, Chooser, NotPriced, checked_under_qemu, code_hashes
    from edge_sdk.tune.choice_records import key_text

    class Keyed(Chooser):
        def __init__(self):
            super().__init__(target, progress=progress)
            self.price_missing = not cached_only
            self.first: dict[str, str] = {}  # record key text -> the site key priced for it

        def _price_one(self, site, name, code, acts, ref):
            if price_until is not None and self.price_missing and time.time() > price_until:
                self.price_missing = False
                self.say("pricing budget spent: the other workloads come from the choice cache or keep the rule")
            return super()._price_one(site, name, code, acts, ref)

        def _decide(self, site):
            try:
                return self._decide_keyed(site)
            except NotPriced as miss:
                self.stats["not_priced"] = self.stats.get("not_priced", 0) + 1
                self.say(f"choice {site.family} {site.layer}: {miss}; no record (the rule)")
                return {"schedule": "default", "candidates": {}, "cached": False}

        def _decide_keyed(self, site):
            kt = key_text(site.family, site.workload)
            if keep and (kept := kept_decision(site, keep.get(kt))) is not None:
                self.stats["kept"] = self.stats.get("kept", 0) + 1
                self.say(f"choice {site.family} {site.layer}: its record stands (same candidates, rule and winner "
                         f"code): kept ({kept['schedule']})")
                return kept
            lead = self.decided.get(self.first.setdefault(kt, site.key()))
            win = (lead or {}).get("schedule")
            if lead is None or not lead.get("candidates", {}).get(win, {}).get("ok"):
                return super()._decide(site)
            h = code_hashes(site, [win])[win]
            hit = checked_under_qemu(site, win, h, target, check=standalone.check_plain, stats=self.stats,
                                     say=lambda: self.say(f"choice {site.family} {site.layer}: {win} as for the "
                                                          "same key, checking it under qemu"))
            if not hit["ok"]:
                warnings.warn(f"{site.family} {site.layer}: {win} (the winner of the same key) did not match "
                              f"numpy here ({hit['reason']}); pricing this workload", ChoiceWarning, stacklevel=2)
                return super()._decide(site)
            cands = {**lead["candidates"], win: {**lead["candidates"][win], "max_error": hit["max_error"]}}
            return {**lead, "candidates": cands, "cached": False, "source": "same key"}

    return Keyed()


def _group(chooser) -> dict[str, list[str]]:
    """{record key text: [site keys]} of the chooser's decided workloads."""
    from edge_sdk.tune.choice_records import key_text

    groups: dict[str, list[str]] = {}
    for k, site in chooser.sites.items():
        groups.setdefault(key_text(site.family, site.workload), []).append(k)
    return groups


def _merge(chooser, keys: list[str]) -> dict | None:
    """One record for workloads sharing a key: the least total modelled cycles among the candidates that
    matched numpy on every one (None when there is none)."""
    from edge_sdk.compiler.choice import DEFAULT
    from edge_sdk.compiler.choice.chooser import code_hashes
    from edge_sdk.tune.choice_records import record_key

    decs = [chooser.decided[k] for k in keys]
    names = set.intersection(*({n for n, c in d.get("candidates", {}).items() if c.get("ok")} for d in decs))
    if not names:
        return None
    total = {n: sum(d["candidates"][n]["cycles"] for d in decs) for n in names}
    win = min(total, key=lambda n: (total[n], n != DEFAULT))
    site = chooser.sites[keys[0]]
    codes = sorted({code_hashes(chooser.sites[k], [win])[win] for k in keys})
    default_codes = sorted({code_hashes(chooser.sites[k], [DEFAULT])[DEFAULT] for k in keys})
    layers = sorted(name for name, lay in chooser.layers.items() if lay["workload"] in keys)
    n = len(decs)
    timing = {d.get("timing_model") for d in decs}
    kept = {"timing_model": timing.pop()} if len(timing) == 1 and None not in timing else {}  # all kept, one model
    return {**record_key(site.family, site.workload), **kept, "schedule": win,
            "modelled_cycles": round(total[win] / n), "default_cycles": round(total[DEFAULT] / n) if DEFAULT in total else None,
            "code": codes[0], "codes": codes, "default_codes": default_codes, "names": site.candidates(), "max_error": max(d["candidates"][win].get("max_error", 0.0) for d in decs),
            "workloads": n, "layers": layers,
            "candidates": {c: round(total[c] / n) for c in sorted(total)},
            "rejected": sorted({c for d in decs for c, v in d.get("candidates", {}).items() if not v.get("ok")})}


def make_pair(model, variant_name: str, out_dir: Path, *, say=print, target_name: str = "pi3",
              cached_only: bool = False, price_until: float | None = None, keep_current: bool = False) -> Path:
    """Price (or take from the choice cache) every layer of one model/variant and write its records file;
    keep_current: the file's records that still stand are kept as they are (only stale or missing ones priced)."""
    from edge_sdk import __version__
    from edge_sdk.targets import TARGET_NAMES, get_target
    from edge_sdk.timing.package_figures import model_version
    from edge_sdk.tune import choice_records as R
    from edge_sdk.variants import get_variant

    target, variant = get_target(target_name), get_variant(variant_name)
    core = R.core_of(target)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    path = out_dir / f"{R.PREFIX.get(core, core)}-{model.name}-{variant.name}.json"
    keep = current_records(path) if keep_current else None
    chooser = keyed_chooser(target, progress=say, cached_only=cached_only, price_until=price_until, keep=keep)
    lower_with(model, variant, target, chooser, say=say, sites_only=True)
    records = [r for keys in _group(chooser).values() if (r := _merge(chooser, keys)) is not None]
    data = {"format": R.FORMAT, "core": core, "priced_on": target.name, "model": model.name,
            "model_source": model.source, "variant": variant.name, "edge_sdk": __version__,
            "timing_model": model_version(), "made": R.now(),
            "targets": [t for t in TARGET_NAMES if R.core_of(get_target(t)) == core],
            "cost": {**{k: chooser.stats.get(k, 0) for k in ("workloads", "priced", "cached", "price_cached", "checked",
                                                              "not_priced", "kept")},
                     "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(_cpu_seconds() - c0, 1)},
            "records": records}
    R.write_file(path, data)
    moved = sum(1 for r in records if r["schedule"] != "default")
    say(f"wrote {path}: {len(records)} records ({moved} off the rule) from {chooser.stats['workloads']} workloads, "
        f"{chooser.stats['priced']} candidates priced, {chooser.stats['cached']} decisions and "
        f"{chooser.stats.get('price_cached', 0)} prices cached, {chooser.stats.get('kept', 0)} records kept, "
        f"{chooser.stats.get('not_priced', 0)} without a record "
        "(not priced), "
        f"{data['cost']['cpu_s']:.0f} s CPU, {data['cost']['wall_s']:.0f} s wall")
    return path


def main(argv: list[str] | None = None) -> int:
    from edge_sdk.errors import EdgeError
    from edge_sdk.models.zoo import build_zoo_model
    from edge_sdk.tune.choice_records import root

    p = argparse.ArgumentParser(prog="make_choice_records", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variants")
    p.add_argument("--resolution", type=int, help="zoo input size (default the zoo's, 224)")
    p.add_argument("--alpha", type=float, help="zoo width multiplier (default 1.0)")
    p.add_argument("--out", type=Path, default=root(), help="records folder (default the shipped one)")
    p.add_argument("--cached-only", action="store_true",
                   help="price nothing: workloads the choice cache cannot decide get no record (the rule)")
    p.add_argument("--keep-current", action="store_true",
                   help="keep each record that still stands (same candidates, rule and winner code); price the rest")
    p.add_argument("--budget", type=float, metavar="MINUTES",
                   help="price for at most MINUTES of wall time from the start, then as --cached-only")
    args = p.parse_args(argv)
    pairs = [(m, v) for m in args.models.split(",") for v in args.variants.split(",")]
    until = time.time() + 60 * args.budget if args.budget is not None else None
    failed = []
    for i, (m, v) in enumerate(pairs):
        def say(msg, i=i, m=m, v=v):
            print(f"[{i + 1}/{len(pairs)} {m} {v}] {msg}", flush=True)

        try:
            model = build_zoo_model(m, alpha=args.alpha, resolution=args.resolution, seed=0)
            make_pair(model, v, args.out, say=say, cached_only=args.cached_only, price_until=until,
                      keep_current=args.keep_current)
        except (EdgeError, RuntimeError, ValueError, OSError) as err:
            say(f"failed: {type(err).__name__}: {str(err).strip()[-500:]}")
            failed.append(f"{m}/{v}")
    if failed:
        print(f"not written: {', '.join(failed)} (re-run: decisions made so far are in the choice cache)", file=sys.stderr)
    return 1 if failed else 0
