"""Read, match and write tuning records: one JSON file per (target, kernel workload).

Why files of data and not a MetaSchedule database: the records ship in the repo and the wheel, are
reviewed in diffs, and say who measured what: ours vs tuned median, trials, TVM version, date,
machine. A record whose tuned schedule lost says so ("winner": "ours"), so the workload is not
tuned again, and compile keeps our schedule.

A record matches a kernel when the target (name, mtriple, mcpu) and the TVM version are the same
and the kernel's unscheduled PrimFunc (its workload, ops/common.py WORKLOAD_ATTR) is structurally
equal to the one stored in the record (the hash picks the candidate, structural_equal decides), so
a record for another workload, another CPU or another TVM simply does not match. The tuned schedule
is the MetaSchedule trace replayed on that workload: schedule primitives keep the computation, so
a replayed trace cannot change what the kernel computes, only how fast.

A file that is not a valid record is an error naming the file (never skipped in silence).
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import os
import platform
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.errors import ConfigError

FORMAT = "edge-sdk-tuning-record/1"
_REQUIRED = {"format": str, "kernel": str, "workload_hash": str, "workload": str, "target": dict,
             "winner": str, "ours_ms": (int, float), "trials": int, "tvm": str}


def repo_root() -> Path:
    """The records shipped with edge-sdk (package data), one folder per target."""
    return Path(__file__).resolve().parent / "records"


def user_root() -> Path:
    """Where `edge-sdk tune` writes by default: the user's data dir, not the installed package."""
    base = os.environ.get("XDG_DATA_HOME") or "~/.local/share"
    return Path(base).expanduser() / "edge-sdk" / "tuning"


def default_roots() -> list[Path]:
    """Search order when compile is given no --tuning-records: the user's tunes, then the shipped ones."""
    return [user_root(), repo_root()]


def workload_hash(func) -> str:
    """A kernel workload's structural hash (names of vars and buffers do not enter it), as hex."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(func) & (2**64 - 1):016x}"


def target_identity(target) -> dict:
    """What a record must share with the compile target (an edge_sdk Target)."""
    tt = target.tvm_target()
    return {"name": target.name, "mtriple": str(tt.attrs.get("mtriple", "")),
            "mcpu": str(tt.attrs.get("mcpu", ""))}


def encode_workload(func) -> str:
    import tvm

    return base64.b64encode(zlib.compress(tvm.ir.save_json(func).encode(), 9)).decode()


def decode_workload(text: str):
    import tvm

    return tvm.ir.load_json(zlib.decompress(base64.b64decode(text)).decode())


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"node": platform.node(), "cpu": cpu or platform.processor(), "cores": os.cpu_count()}


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclass
class Record:
    path: Path
    data: dict
    _workload: object = field(default=None, repr=False)

    @property
    def tuned(self) -> bool:
        return self.data["winner"] == "tuned"

    def workload(self):
        if self._workload is None:
            try:
                self._workload = decode_workload(self.data["workload"])
            except (ValueError, RuntimeError, zlib.error) as e:
                raise ConfigError(f"{self.path}: 'workload' is not a serialized PrimFunc ({e})") from e
        return self._workload

    def summary(self) -> dict:
        d = self.data
        return {"record": str(self.path), "workload": d["kernel"], "ours_ms": d["ours_ms"],
                "tuned_ms": d.get("tuned_ms"), "trials": d["trials"]}


def read_record(path: Path) -> Record:
    """One record file, checked; anything wrong is a ConfigError naming the file and key."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not a readable tuning record ({e})",
                          hint="delete the file, or re-create it with `edge-sdk tune`") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a tuning record must be a JSON object")
    for key, typ in _REQUIRED.items():
        if not isinstance(data.get(key), typ):
            raise ConfigError(f"{path}: key '{key}' missing or of the wrong type",
                              hint="delete the file, or re-create it with `edge-sdk tune`")
    if data["format"] != FORMAT:
        raise ConfigError(f"{path}: format '{data['format']}', expected '{FORMAT}'")
    if data["winner"] not in ("ours", "tuned"):
        raise ConfigError(f"{path}: 'winner' must be 'ours' or 'tuned', got '{data['winner']}'")
    if data["winner"] == "tuned" and not isinstance(data.get("trace"), list):
        raise ConfigError(f"{path}: winner 'tuned' needs the MetaSchedule 'trace' (a JSON list)")
    return Record(path, data)


def record_name(kind: str, whash: str) -> str:
    return f"{kind}-{whash}.json"


def write_record(root: Path, target_name: str, kind: str, data: dict) -> Path:
    """Write atomically (temp name, then os.replace) to root/<target>/<kind>-<hash>.json."""
    folder = root / target_name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / record_name(kind, data["workload_hash"])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"format": FORMAT, **data}, indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


class RecordSet:
    """The records for one target from an ordered list of roots (the first root's record wins)."""

    def __init__(self, roots: list[Path], target):
        self.roots = [Path(r) for r in roots]
        self.target = target
        self.ident = target_identity(target)
        self.by_hash: dict[str, list[Record]] = {}
        import tvm

        self.tvm_version = tvm.__version__
        for root in self.roots:
            folder = root / target.name
            if not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.json")):
                rec = read_record(path)
                self.by_hash.setdefault(rec.data["workload_hash"], []).append(rec)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_hash.values())

    def lookup(self, workload) -> Record | None:
        """The first record for this exact workload, target and TVM version; None if there is none."""
        import tvm_ffi

        for rec in self.by_hash.get(workload_hash(workload), []):
            if rec.data["target"] != self.ident or rec.data["tvm"] != self.tvm_version:
                continue
            if tvm_ffi.structural_equal(rec.workload(), workload):
                return rec
        return None

    def scheduled(self, workload, rec: Record):
        """The workload scheduled by the record's trace (a PrimFunc, not yet named)."""
        try:
            return replay(workload, rec.data["trace"])
        except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as e:
            raise ConfigError(f"{rec.path}: its MetaSchedule trace does not replay on the workload ({e})",
                              hint="delete the file, or compile with --no-tuning") from e


def trace_json(trace) -> list:
    """A MetaSchedule trace as plain JSON (lists, str, int, float, bool), as its JSONDatabase stores it."""
    import tvm

    def plain(o):
        if o is None or isinstance(o, bool):
            return o
        if isinstance(o, tvm.tirx.IntImm):
            return int(o.value)
        if isinstance(o, tvm.tirx.FloatImm):
            return float(o.value)
        if isinstance(o, int):
            return int(o)
        if isinstance(o, float):
            return float(o)
        if isinstance(o, str):
            return str(o)
        if hasattr(o, "__iter__"):
            return [plain(x) for x in o]
        raise TypeError(f"unexpected {type(o).__name__} in a MetaSchedule trace")

    return plain(trace.as_json())


def replay(workload, trace_json: list):
    """A MetaSchedule trace (JSON form, postprocessing included) replayed on the unscheduled
    workload: what compile runs for a tuned kernel, and what tune times against ours."""
    from tvm import s_tir
    from tvm.s_tir.schedule import Trace

    sch = s_tir.Schedule(workload)
    Trace.apply_json_to_schedule(trace_json, sch)
    return sch.mod["main"]


def records_digest(roots: list[Path] | None = None) -> str:
    """A digest of every record file under the roots: part of bench's package cache key."""
    h = hashlib.sha256()
    for root in roots if roots is not None else default_roots():
        if root.is_dir():
            for p in sorted(root.rglob("*.json")):
                h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]
