"""The compile's per-layer choice: for each distinct workload, the cheapest correct candidate by modelled price.

Three modes (mode(): compile --choice / --no-choice / neither, or $EDGE_SDK_CHOICE):
    records (the default)  RecordChooser: the shipped choice records (tune/choice_records.py), nothing priced
    priced (--choice)      Chooser: every candidate priced under qemu (below), for workloads records lack
    off (--no-choice)      no chooser: every kernel's rule

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


class NotPriced(Exception):
    """A candidate with no price in the choice cache, from a Chooser told not to price (price_missing=False)."""


LAYER_KEYS = ("schedule", "modelled_cycles", "default_cycles", "candidates", "cached", "record", "record_skipped")


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


def _choose_once(chooser, site: Site, source_of) -> str:
    """A chooser's decision for the site's workload, made once per compile (chooser._decide), and the
    layer's row of it (chooser.layers) with where the schedule came from (source_of(decision))."""
    key = site.key()
    if key not in chooser.decided:
        t0 = time.perf_counter()
        chooser.decided[key] = chooser._decide(site)
        chooser.stats["workloads"] += 1
        chooser.stats["seconds"] += time.perf_counter() - t0
    d = chooser.decided[key]
    if site.layer:
        chooser.layers[site.layer] = {"family": site.family, "workload": key,
                                      **{k: d[k] for k in LAYER_KEYS if k in d}, "source": source_of(d)}
    return d["schedule"]


class Chooser:
    """Per-layer schedule choice for a Pi target (see the module docstring)."""

    enabled = True

    def __init__(self, target, *, progress=None, use_cache: bool = True, price=None, records=None):
        from edge_sdk.compiler.choice import standalone

        self.target = target
        self.records = records  # a RecordChooser: its records first, pricing for the workloads they lack
        self.say = progress or (lambda _msg: None)
        self.use_cache = use_cache
        self.price_missing = True  # False: a candidate not priced before raises NotPriced (tune/make_records)
        self.price = price or standalone.price
        self.layers: dict[str, dict] = {}  # layer name -> {"family", "schedule", "modelled_cycles", ...}
        self.decided: dict[str, dict] = {}  # site key -> decision (this compile)
        self.sites: dict[str, Site] = {}  # site key -> its first Site (tune/make_records reads the decisions)
        self.stats = {"workloads": 0, "priced": 0, "cached": 0, "from_records": 0, "seconds": 0.0}

    def choose(self, site: Site) -> str:
        self.sites.setdefault(site.key(), site)
        return _choose_once(self, site, lambda d: d.get("source") or ("cached" if d.get("cached") else "priced"))

    def _decide(self, site: Site) -> dict:
        if self.records is not None and (d := self.records.from_record(site))["source"] == "record":
            self.stats["from_records"] += 1
            return d
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
            results[name] = self._price_one(site, name, h, acts, ref)
        good = {n: r for n, r in results.items() if r.get("ok")}
        default_cycles = results[DEFAULT].get("cycles") if results[DEFAULT].get("ok") else None
        if not good:
            warnings.warn(f"{site.family} {site.layer}: no candidate ran and matched the reference; "
                          "keeping the default schedule", ChoiceWarning, stacklevel=3)
            return {"schedule": DEFAULT, "candidates": results}
        win = min(good, key=lambda n: (good[n]["cycles"], n != DEFAULT))
        return {"schedule": win, "modelled_cycles": good[win]["cycles"], "default_cycles": default_cycles,
                "candidates": {n: {k: v for k, v in r.items() if k != "schedule"} for n, r in results.items()}}

    def _price_one(self, site: Site, name: str, code: str, acts, ref) -> dict:
        """One candidate's price (Priced.to_json), cached by its own code hash: when a kernel helper changes
        one candidate (or adds one), a re-run prices only that one; the others' prices are read back."""
        pkey = choice_cache.key(site, {"price": code}, self.target) if self.use_cache else None
        hit = choice_cache.load(pkey) if pkey else None
        if hit is not None and isinstance(hit.get("price"), dict):
            self.stats["price_cached"] = self.stats.get("price_cached", 0) + 1
            return {**hit["price"], "schedule": name}
        if not self.price_missing:
            raise NotPriced(f"{name} (code {code}) has no price in the choice cache")
        p = self.price(site, name, self.target, acts, ref=ref)
        self.stats["priced"] += 1
        self.say(f"choice {site.family} {site.layer}: {name} "
                 + (f"{p.cycles / 1e6:.2f} M modelled cycles" if p.ok else f"rejected ({p.reason})"))
        if pkey and (p.ok or "differs" in p.reason):  # a verdict of this code, not a missing tool
            choice_cache.store(pkey, {"schedule": name, "price": p.to_json()})
        return p.to_json()

    def report(self) -> dict:
        from edge_sdk.timing.package_figures import model_version

        if self.records is not None:
            warn_stale(self.records.stats)
        moved = [v for v in self.layers.values() if v.get("default_cycles") and v.get("modelled_cycles")]
        return {"enabled": True, "mode": "priced", "target": self.target.name, "timing_model": model_version(),
                **{k: self.stats[k] for k in ("workloads", "priced", "cached", "from_records")},
                "seconds": round(self.stats["seconds"], 1),
                "changed_layers": sum(1 for v in self.layers.values() if v.get("schedule") != DEFAULT),
                "saved_cycles_est": round(sum(v["default_cycles"] - v["modelled_cycles"] for v in moved))}


def checked_under_qemu(site: Site, schedule: str, code: str, target, *, check, stats: dict, say) -> dict:
    """{"ok", "max_error", "reason"} of `schedule` (code hash `code`) built alone and run once under plain
    qemu against the numpy reference (standalone.check_plain), cached in the choice cache; say() before a run."""
    ckey = choice_cache.key(site, {"plain_check": code, schedule: code}, target)
    hit = choice_cache.load(ckey)
    if hit is None:
        say()
        p = check(site, schedule, target)
        stats["checked"] = stats.get("checked", 0) + 1
        hit = {"schedule": schedule, "ok": p.ok, "max_error": p.max_error, "reason": p.reason}
        if p.ok or "reference" in p.reason:  # a missing tool here is not remembered as a verdict
            choice_cache.store(ckey, hit)
    return hit


STALE = "was chosen against other kernels"


def warn_stale(stats: dict) -> None:
    if stats.get("stale"):
        warnings.warn(f"{stats['stale']} choice records were made against other kernels (the rule's code or the "
                      "candidates changed since) and were skipped; re-make them: tools/make_choice_records.py",
                      ChoiceWarning, stacklevel=3)


class RecordChooser:
    """compile's default on a Pi target: the shipped choice records (tune/choice_records.py), no pricing.

    A layer whose workload has a record runs the recorded winner; one without keeps the rule's default.
    A recorded winner is used only when it is still a candidate and still builds, and only as code that
    was checked against numpy: when the winner's code is the one recorded (same structural hash), the
    numpy check made when it was priced holds for it; when it differs (other int8 constants, or the kernel
    was edited since), the layer is built alone and run once under plain qemu against its numpy reference
    (cached like a choice). A record that fails any of these is skipped with a ChoiceWarning (rule's
    schedule), never a failure."""

    enabled = True

    def __init__(self, target, *, progress=None, check=None):
        from edge_sdk.compiler.choice import standalone

        self.target = target
        self.say = progress or (lambda _msg: None)
        self.check = check or standalone.check_plain
        self.layers: dict[str, dict] = {}
        self.decided: dict[str, dict] = {}
        self.used: set[str] = set()  # the records files that served a layer
        self.stats = {"workloads": 0, "from_records": 0, "rule": 0, "skipped": 0, "stale": 0, "checked": 0,
                      "seconds": 0.0}

    def choose(self, site: Site) -> str:
        return _choose_once(self, site, lambda d: d["source"])

    def _decide(self, site: Site) -> dict:
        d = self.from_record(site)
        self.stats["from_records" if d["source"] == "record" else "rule"] += 1
        return d

    def from_record(self, site: Site) -> dict:
        """The record's decision (source "record"), or the rule's (source "rule": no record, or one skipped)."""
        from edge_sdk.tune import choice_records

        rec = choice_records.lookup(self.target, site.family, site.workload)
        if rec is None:
            return {"schedule": DEFAULT, "source": "rule"}
        verified, why = self._verify(site, rec)
        if why.startswith(STALE):  # one warning for them all at the end (report): the records predate the kernels
            self.stats["stale"] += 1
            return {"schedule": DEFAULT, "source": "rule", "record_skipped": f"{rec.schedule}: {why}"}
        if why:
            warnings.warn(f"{site.family} {site.layer or site.key()}: the recorded winner '{rec.schedule}' "
                          f"({rec.source}) {why}; keeping the rule's schedule", ChoiceWarning, stacklevel=4)
            self.stats["skipped"] += 1
            return {"schedule": DEFAULT, "source": "rule", "record_skipped": f"{rec.schedule}: {why}"}
        self.used.add(rec.source)
        return {"schedule": rec.schedule, "source": "record", "modelled_cycles": rec.modelled_cycles,
                "default_cycles": rec.default_cycles, "record": {**rec.to_manifest(), "verified": verified}}

    def _verify(self, site: Site, rec) -> tuple[str, str]:
        """(how the recorded winner is known to compute the right thing, "") or ("", why it is skipped)."""
        if rec.schedule == DEFAULT:
            return "the rule's own schedule", ""
        names = site.candidates()
        if rec.schedule not in names:
            return "", "is no longer a candidate"
        hashes = code_hashes(site, [rec.schedule, DEFAULT])
        h = hashes[rec.schedule]
        if h.startswith("error"):
            return "", f"no longer builds ({h.removeprefix('error: ')})"
        if (rec.names and set(rec.names) != set(names)) or (rec.default_codes and hashes[DEFAULT] not in rec.default_codes):
            return "", f"{STALE} (the rule's code or the candidate list changed since)"
        if h in rec.codes:
            return f"same code as recorded: matched numpy when priced (max |err| {rec.max_error:.3g})", ""
        hit = checked_under_qemu(site, rec.schedule, h, self.target, check=self.check, stats=self.stats,
                                 say=lambda: self.say(f"record {site.family} {site.layer}: {rec.schedule}'s code "
                                                      "differs from the recorded one; checking it once under qemu"))
        if not hit["ok"]:
            return "", f"was not confirmed under qemu ({hit['reason']})"
        return (f"code differs from the recorded (other constants or an edited kernel): ran under qemu and "
                f"matched numpy (max |err| {hit['max_error']:.3g})"), ""

    def report(self) -> dict:
        from edge_sdk.tune import choice_records

        moved = [v for v in self.layers.values() if v.get("default_cycles") and v.get("modelled_cycles")]
        warn_stale(self.stats)
        models = sorted({v["record"]["timing_model"] for v in self.layers.values() if v.get("record")})
        return {"enabled": True, "mode": "records", "target": self.target.name, "timing_model": ", ".join(models),
                "records": sorted(self.used), "records_digest": choice_records.digest(self.target),
                **{k: self.stats[k] for k in ("workloads", "from_records", "rule", "skipped", "stale", "checked")},
                "priced": 0, "cached": 0, "seconds": round(self.stats["seconds"], 1),
                "changed_layers": sum(1 for v in self.layers.values() if v.get("schedule") != DEFAULT),
                "saved_cycles_est": round(sum(v["default_cycles"] - v["modelled_cycles"] for v in moved))}


ENV = "EDGE_SDK_CHOICE"  # compile's default mode when not told: records (unset), 1/on: priced, 0/off: off
MODES = {"priced": ("1", "on", "yes", "true", "priced", "price"), "off": ("0", "off", "no", "false", "none"),
         "records": ("", "records", "default")}


def mode(choose: bool | None) -> str:
    """compile_model's `choose` as a mode: True "priced" (every candidate priced under qemu, cached),
    False "off" (every kernel's rule), None $EDGE_SDK_CHOICE, by default "records" (the shipped records,
    nothing priced at compile time)."""
    import os

    from edge_sdk.errors import ConfigError

    if choose is not None:
        return "priced" if choose else "off"
    value = os.environ.get(ENV, "").strip().lower()
    for m, spellings in MODES.items():
        if value in spellings:
            return m
    raise ConfigError(f"${ENV}={value!r}: expected records (the default), 1/on (price every layer) or 0/off")


def wanted(choose: bool | None) -> bool:
    """Whether compile prices every layer (mode "priced")."""
    return mode(choose) == "priced"


def applies(target) -> bool:
    """The choice prices on the A53 clock: Pi targets only (aarch64, emulated as a Cortex-A53)."""
    return target.arch == "aarch64" and getattr(target, "emulate_cpu", None) == "cortex-a53"


def chooser_for(target, *, choose: bool | None, progress=None):
    """The compile's chooser on a Pi target: a Chooser (priced; needs the timing plugin, else a warning
    and None), a RecordChooser (records, when any ship for the core), or None (off, or not a Pi)."""
    m = mode(choose)
    if m == "off" or not applies(target):
        return None
    if m == "records":
        from edge_sdk.tune import choice_records

        return RecordChooser(target, progress=progress) if choice_records.digest(target) else None
    from edge_sdk.qemu import runner as E
    from edge_sdk.errors import MissingDependency

    try:
        E.plugin_dir(timing=True)
    except MissingDependency as err:
        warnings.warn(f"per-layer schedule choice off: {err}", ChoiceWarning, stacklevel=2)
        return None
    from edge_sdk.tune import choice_records

    return Chooser(target, progress=progress,
                   records=RecordChooser(target, progress=progress) if choice_records.digest(target) else None)


def annotate(rows: list[dict], chooser) -> tuple[list[dict], dict]:
    """The layer rows with each chosen layer's "choice" ({family, schedule, modelled_cycles,
    default_cycles, candidates}), and the manifest's "choice" summary."""
    if chooser is None or not getattr(chooser, "enabled", False):
        return rows, {"enabled": False}
    def own(r):  # float rows by name; int8 rows "<op index>:<tensor>" by the "<op index>:" their kernel names
        name = str(r.get("name", ""))
        return chooser.layers.get(name) or chooser.layers.get(name.split(":", 1)[0] + ":" if ":" in name else "")

    return [{**r, "choice": own(r)} if own(r) else r for r in rows], chooser.report()
