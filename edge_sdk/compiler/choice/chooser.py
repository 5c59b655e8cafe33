"""The compile's per-layer choice: for each distinct workload, the cheapest correct candidate by modelled price.

    chooser = Chooser(target, progress=say)         # a Pi target (one with an emulation CPU)
    lower.compile_relax(mod, target, chooser=chooser)   # each kernel's Site goes through chooser.choose
    chooser.report()                                # -> manifest "choice"; chooser.layers: per layer

choose(site):
1. the candidates' PrimFuncs are built (cheap: TE + schedule, no codegen) and grouped by structural
   hash, so two names with the same code are priced once; the cache key (cache.py) is the family,
   the workload, every candidate's code hash, the timing-model version and the SDK version;
2. cached: the winner's name is returned at once (a second compile of the same net costs only the
   builds of step 1). A cached winner that is no longer among the candidates or no longer builds is
   skipped with a warning and the choice is made again;
3. else every distinct candidate is priced alone (standalone.price: built for the Pi, run under qemu
   with the timing plugin, checked against the numpy reference on random inputs of the workload);
   a candidate that fails or differs from the reference is never kept; the cheapest correct one wins.
   When none is correct the rule's default is kept (with a warning: the default's own tests still hold).
Workloads repeat (ResNet18's 3x3 convs): each distinct (family, workload) is chosen once per compile.
"""
from __future__ import annotations

import time
import warnings

from edge_sdk.compiler.choice import DEFAULT, Site
from edge_sdk.compiler.choice import cache as choice_cache


class ChoiceWarning(UserWarning):
    """A cached or recorded choice that could not be used (it is skipped, the choice is made again)."""


def code_hashes(site: Site, names: list[str]) -> dict[str, str]:
    """{schedule: structural hash of its PrimFunc}; names that do not build get "error: ..."."""
    import tvm_ffi

    out = {}
    dummy = site.random_acts(seed=0)
    for n in names:
        try:
            func = site.build(n, "edge_choice_kernel", dummy).func
            out[n] = f"{tvm_ffi.structural_hash(func) & 0xFFFFFFFFFFFFFFFF:016x}"
        except (RuntimeError, ValueError, KeyError, AssertionError) as err:
            out[n] = f"error: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200] if str(err).strip() else ''}"
    return out


class Chooser:
    """Per-layer schedule choice for a Pi target (see the module docstring)."""

    enabled = True

    def __init__(self, target, *, progress=None, use_cache: bool = True, price=None):
        from edge_sdk.compiler.choice import standalone

        self.target = target
        self.say = progress or (lambda _msg: None)
        self.use_cache = use_cache
        self.price = price or standalone.price
        self.layers: dict[str, dict] = {}  # layer name -> {"family", "schedule", "modelled_cycles", ...}
        self.decided: dict[str, dict] = {}  # site key -> decision (this compile)
        self.stats = {"workloads": 0, "priced": 0, "cached": 0, "seconds": 0.0}

    def choose(self, site: Site) -> str:
        key = site.key()
        if key not in self.decided:
            t0 = time.perf_counter()
            self.decided[key] = self._decide(site)
            self.stats["workloads"] += 1
            self.stats["seconds"] += time.perf_counter() - t0
        d = self.decided[key]
        if site.layer:
            self.layers[site.layer] = {"family": site.family, "workload": key, **{
                k: d[k] for k in ("schedule", "modelled_cycles", "default_cycles", "candidates", "cached") if k in d}}
        return d["schedule"]

    def _decide(self, site: Site) -> dict:
        names = site.candidates()
        hashes = code_hashes(site, names)
        built = {n: h for n, h in hashes.items() if not h.startswith("error")}
        if DEFAULT not in built:
            return {"schedule": DEFAULT, "candidates": {DEFAULT: hashes[DEFAULT]}}  # the rule fails: compile reports it
        ckey = choice_cache.key(site, hashes, self.target)
        if self.use_cache:
            hit = choice_cache.load(ckey)
            if hit is not None:
                if hit["schedule"] in built:
                    self.stats["cached"] += 1
                    return {**hit, "cached": True}
                warnings.warn(f"{site.family} {site.layer or site.key()}: the cached winner "
                              f"'{hit['schedule']}' no longer builds; choosing again", ChoiceWarning, stacklevel=2)
        d = self._price_all(site, built)
        if self.use_cache:
            choice_cache.store(ckey, d)
        return {**d, "cached": False}

    def _price_all(self, site: Site, built: dict[str, str]) -> dict:
        acts = site.random_acts(seed=0)
        ref = site.reference(acts)
        first_of: dict[str, str] = {}
        results: dict[str, dict] = {}
        for name, h in built.items():
            if h in first_of:
                results[name] = {**results[first_of[h]], "same_code_as": first_of[h]}
                continue
            first_of[h] = name
            p = self.price(site, name, self.target, acts, ref=ref)
            self.stats["priced"] += 1
            results[name] = p.to_json()
            self.say(f"choice {site.family} {site.layer}: {name} "
                     + (f"{p.cycles / 1e6:.2f} M modelled cycles" if p.ok else f"rejected ({p.reason})"))
        good = {n: r for n, r in results.items() if r.get("ok")}
        default_cycles = results[DEFAULT].get("cycles") if results[DEFAULT].get("ok") else None
        if not good:
            warnings.warn(f"{site.family} {site.layer}: no candidate ran and matched the reference; "
                          "keeping the default schedule", ChoiceWarning, stacklevel=3)
            return {"schedule": DEFAULT, "candidates": results}
        win = min(good, key=lambda n: (good[n]["cycles"], n != DEFAULT))
        return {"schedule": win, "modelled_cycles": good[win]["cycles"], "default_cycles": default_cycles,
                "candidates": {n: {k: v for k, v in r.items() if k != "schedule"} for n, r in results.items()}}

    def report(self) -> dict:
        from edge_sdk.timing.package_figures import model_version

        moved = [v for v in self.layers.values() if v.get("default_cycles") and v.get("modelled_cycles")]
        return {"enabled": True, "target": self.target.name, "timing_model": model_version(),
                "workloads": self.stats["workloads"], "priced": self.stats["priced"], "cached": self.stats["cached"],
                "seconds": round(self.stats["seconds"], 1),
                "changed_layers": sum(1 for v in self.layers.values() if v.get("schedule") != DEFAULT),
                "saved_cycles_est": round(sum(v["default_cycles"] - v["modelled_cycles"] for v in moved))}


ENV = "EDGE_SDK_CHOICE"  # "1" / "on": compile_model's default is the choice (else off: opt in per compile)


def wanted(choose: bool | None) -> bool:
    """compile_model's `choose` (None: $EDGE_SDK_CHOICE, off unless 1/on/yes). Off by default while a
    first-time choice costs minutes of qemu per model (no shipped records yet): every Pi compile and
    bench of the team would otherwise price every layer."""
    import os

    if choose is not None:
        return choose
    return os.environ.get(ENV, "0").strip().lower() in ("1", "on", "yes", "true")


def applies(target) -> bool:
    """The choice prices on the A53 clock: Pi targets only (aarch64, emulated as a Cortex-A53)."""
    return target.arch == "aarch64" and getattr(target, "emulate_cpu", None) == "cortex-a53"


def chooser_for(target, *, choose: bool | None, progress=None):
    """A Chooser for a Pi target when the choice is wanted and the timing plugin is built, else None
    (with a warning when it was wanted but cannot run here)."""
    if not (wanted(choose) and applies(target)):
        return None
    from edge_sdk.qemu import runner as E
    from edge_sdk.errors import MissingDependency

    try:
        E.plugin_dir(timing=True)
    except MissingDependency as err:
        warnings.warn(f"per-layer schedule choice off: {err}", ChoiceWarning, stacklevel=2)
        return None
    return Chooser(target, progress=progress)


def annotate(rows: list[dict], chooser) -> tuple[list[dict], dict]:
    """The layer rows with each chosen layer's "choice" ({family, schedule, modelled_cycles,
    default_cycles, candidates}), and the manifest's "choice" summary."""
    if chooser is None or not getattr(chooser, "enabled", False):
        return rows, {"enabled": False}
    def own(r):  # float rows by name; int8 rows "<op index>:<tensor>" by the "<op index>:" their kernel names
        name = str(r.get("name", ""))
        return chooser.layers.get(name) or chooser.layers.get(name.split(":", 1)[0] + ":" if ":" in name else "")

    return [{**r, "choice": own(r)} if own(r) else r for r in rows], chooser.report()
