"""Shipped per-layer choice records: compile/choice's winners for the zoo models, applied by compile by default.

    records/choice/a53-<model>-<variant>.json     one file per zoo model and variant (package data)

A record says, for one layer workload of a Cortex-A53 Pi (pi3, pi3plus and pi-zero2w are the same core at
other clocks, so one choice serves them all), which candidate schedule the chooser kept, what it and the
rule's default cost in modelled A53 cycles, under which timing model (the file's, or the record's own when a
remake kept it from an earlier one: make_records --keep-current), and that the winner matched the
numpy reference when it was priced (its max |error|). It also names the winner's code (the PrimFunc's
structural hash when recorded), so compile can tell whether the kernel it builds now is the one that was
checked.

The key is what the schedule choice depends on and nothing else, so a record survives unrelated edits:
the family and the workload's shapes, strides, pads, register tile, ISA and the kind of epilogue (relu,
clip, residual, gate), without the numbers that only change values: the clip bounds, per-channel pad
fills, and for int8 the zero points and requantize clamp. A package whose int8 weights come from another
quantization (the peers' converter-written .tflite) has the same loops, loads and stores as our PTQ's, so
the choice carries over; its code differs only in constants, which is why compile re-checks such a layer
(compile/choice/chooser.RecordChooser).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from edge_sdk.errors import ConfigError

FORMAT = "edge-sdk-choice-records/1"
CORE = "cortex-a53"  # the cores records exist for: target.emulate_cpu
PREFIX = {"cortex-a53": "a53"}
DROPPED = ("in_zp", "out_zp", "zp", "scale", "scales")  # value-only workload keys (never in a record key)


def root() -> Path:
    """The shipped records (package data)."""
    return Path(__file__).resolve().parent / "records" / "choice"


def _act_kind(act) -> str:
    """["clip", 0.0, 6.0] -> "clip" (a key's own "clip" stays: keys are normalised again when loaded)."""
    if isinstance(act, str):
        return act
    return str(act[0]) if isinstance(act, (list, tuple)) and act and isinstance(act[0], str) else "clamp"


def record_key(family: str, workload: dict) -> dict:
    """The part of a chooser workload (compile/choice Site.workload) a record is keyed by (module docstring)."""
    key = {}
    for k, v in workload.items():
        if k in DROPPED or k.endswith("_zp") or "scale" in k:
            continue
        if k == "act":
            if family.startswith("int8."):
                continue  # the requantize clamp: bounds in quantized units, same code shape for every range
            v = _act_kind(v)
        elif k == "pad" and isinstance(v, list) and len(v) > 4:
            v = [*v[:4], "fills"]
        key[k] = v
    return {"family": family, "workload": key}


def key_text(family: str, workload: dict) -> str:
    return json.dumps(record_key(family, workload), sort_keys=True, default=str)


@dataclass(frozen=True)
class Record:
    family: str
    schedule: str
    modelled_cycles: float | None
    default_cycles: float | None
    codes: tuple[str, ...]  # the winner's structural hashes when recorded (one per workload sharing the key)
    max_error: float | None
    timing_model: str
    source: str  # the file it came from
    default_codes: tuple[str, ...] = ()  # the rule's code it was compared with (empty: not recorded)
    names: tuple[str, ...] = ()  # the candidates it was chosen among (empty: not recorded)

    def to_manifest(self) -> dict:
        return {"file": self.source, "timing_model": self.timing_model, "codes": list(self.codes),
                "max_error": self.max_error}


def core_of(target) -> str | None:
    return getattr(target, "emulate_cpu", None) if target.arch == "aarch64" else None


def files(core: str = CORE, folder: Path | None = None) -> list[Path]:
    folder = folder or root()
    return sorted(folder.glob(f"{PREFIX.get(core, core)}-*.json")) if folder.is_dir() else []


def read_file(path: Path) -> dict:
    """One records file, checked; a file that is not one is an error naming it (never skipped in silence)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a choice records file ({err})") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("records"), list):
        raise ConfigError(f"{path}: not a choice records file (format {FORMAT!r} with a 'records' list expected)")
    for i, r in enumerate(data["records"]):
        for k in ("family", "workload", "schedule", "code", "max_error"):
            if k not in r:
                raise ConfigError(f"{path}: record {i} has no {k!r}")
    return data


@lru_cache(maxsize=8)
def _load(core: str, folder: str, stamp: tuple) -> dict[str, Record]:
    out: dict[str, Record] = {}
    for path in files(core, Path(folder)):
        data = read_file(path)
        for r in data["records"]:
            out[key_text(r["family"], r["workload"])] = Record(
                r["family"], r["schedule"], r.get("modelled_cycles"), r.get("default_cycles"),
                tuple(r.get("codes") or [r["code"]]),
                r["max_error"], r.get("timing_model") or data.get("timing_model", ""), path.name,
                tuple(r.get("default_codes") or ()),
                tuple(r.get("names") or ()))
    return out


def _folder() -> Path:
    env = os.environ.get("EDGE_SDK_CHOICE_RECORDS")  # another records folder (the regeneration test's)
    return Path(env) if env else root()


def load(core: str) -> dict[str, Record]:
    """{key_text: Record} of every records file for the core (reloaded when a file changes)."""
    folder = _folder()
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in files(core, folder))
    return _load(core, str(folder), stamp)


def lookup(target, family: str, workload: dict) -> Record | None:
    core = core_of(target)
    return load(core).get(key_text(family, workload)) if core else None


def digest(target) -> str | None:
    """What the package cache key holds of the records a compile for `target` applies (None: none apply)."""
    core = core_of(target)
    paths = files(core, _folder()) if core else []
    if not paths:
        return None
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def write_file(path: Path, data: dict) -> None:
    """Atomic (temp file + rename), stable order, so a regenerated file diffs by what changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**data, "records": sorted(data["records"], key=lambda r: json.dumps([r["family"], r["workload"]],
                                                                                 sort_keys=True))}
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
