"""ResultsStore: the local SQLite record of every run, so latency can be compared across devices and time.

Lifecycle: a run (`RunResult.to_json()`, made on this machine, under qemu, or on a Pi and pulled back)
plus the manifest of the package it ran -> `record_run` -> one row in `runs`, one in `measurements`,
and the package's layer table stored once per package sha256 (the roofline needs FLOPs and bytes
per layer) -> `query` / `export_csv` / `export_json` / the dashboard.

The schema version lives in SQLite's `user_version` pragma. An older edge-sdk refuses a newer file
with a clear error instead of misreading it; every write is one transaction. Modelled Pi time: results/modelled_columns.py.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edge_sdk.errors import ConfigError, UsageError
from edge_sdk.files import honour_umask
import edge_sdk.results.modelled_columns as modelled

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS packages (
    sha256 TEXT PRIMARY KEY, model TEXT NOT NULL, variant TEXT NOT NULL, target TEXT NOT NULL,
    arch TEXT, peak_gflops REAL, mem_gbps REAL, total_flops INTEGER, total_bytes INTEGER,
    created TEXT, versions TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS package_layers (
    package_sha256 TEXT NOT NULL REFERENCES packages(sha256) ON DELETE CASCADE,
    idx INTEGER NOT NULL, name TEXT NOT NULL, op TEXT NOT NULL, epilogue TEXT NOT NULL DEFAULT '[]',
    inputs TEXT NOT NULL DEFAULT '[]', weights TEXT NOT NULL DEFAULT '[]', output TEXT NOT NULL DEFAULT '[]',
    flops INTEGER NOT NULL, bytes_read INTEGER NOT NULL, bytes_written INTEGER NOT NULL, intensity REAL NOT NULL,
    PRIMARY KEY (package_sha256, idx)
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, device TEXT NOT NULL,
    model TEXT NOT NULL, variant TEXT NOT NULL, target TEXT NOT NULL, threads INTEGER NOT NULL,
    emulated INTEGER NOT NULL, sdk_version TEXT, tvm_version TEXT,
    cpu_model TEXT, clock_mhz REAL, temperature_c REAL,
    package_sha256 TEXT NOT NULL REFERENCES packages(sha256), source TEXT, extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs(model, variant, device, target, threads);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    latency_median_ms REAL NOT NULL, latency_min_ms REAL NOT NULL, latency_max_ms REAL NOT NULL,
    latency_p10_ms REAL, latency_p90_ms REAL, repeats INTEGER NOT NULL, load_ms REAL,
    per_layer_ms TEXT NOT NULL DEFAULT '[]', accuracy REAL, golden_ok INTEGER, golden_max_abs_err REAL,
    modelled_ms REAL, modelled_cycles REAL, model_version TEXT  -- results/modelled_columns.py
);
CREATE INDEX IF NOT EXISTS measurements_by_run ON measurements(run_id);
"""

# Keys of `extra` that have their own column; anything else is kept in runs.extra as JSON.
_EXTRA_COLUMNS = ("time", "cpu_model", "clock_mhz", "temperature_c", "accuracy", "package_sha256", "source")

RUN_COLUMNS = ("run_id", "time", "device", "model", "variant", "target", "threads", "emulated", "sdk_version",
               "tvm_version", "cpu_model", "clock_mhz", "temperature_c", "package_sha256", "source",
               "latency_median_ms", "latency_min_ms", "latency_max_ms", "latency_p10_ms", "latency_p90_ms",
               "repeats", "load_ms", "accuracy", "golden_ok", "golden_max_abs_err", "per_layer_ms", "extra", *modelled.COLUMNS)


def default_db_path() -> Path:
    """${EDGE_SDK_DATA:-~/.local/share/edge-sdk}/results.sqlite: user data, not cache (keep it)."""
    root = os.environ.get("EDGE_SDK_DATA") or Path.home() / ".local/share/edge-sdk"
    return Path(root) / "results.sqlite"


def device_facts() -> dict:
    """cpu_model, clock_mhz and temperature_c of the machine this runs on, each only when readable.

    Call it where the run happens (on the device) and pass the result as record_run's `extra`.
    """
    facts: dict = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                facts["cpu_model"] = value.strip()
                break
    except OSError:
        pass
    for key, path, scale in (("clock_mhz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", 1e-3),
                             ("temperature_c", "/sys/class/thermal/thermal_zone0/temp", 1e-3)):
        try:
            facts[key] = round(int(Path(path).read_text().strip()) * scale, 1)
        except (OSError, ValueError):
            pass
    return facts


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _need(obj: dict, key: str, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise UsageError(f"{where}: missing key '{key}'")
    return obj[key]


def package_identity(run_json: dict, manifest: dict, extra: dict) -> str:
    """The package's sha256: given by the caller, else the file's, else the canonical manifest's.

    The manifest carries every member's sha256, so hashing it identifies the package contents even
    when the .edgepkg file itself is not on this machine (a run pulled back from a device).
    """
    sha = extra.get("package_sha256") or run_json.get("package_sha256")
    if sha:
        return str(sha)
    path = run_json.get("package")
    if path and Path(path).is_file():
        from edge_sdk.package import sha256_file

        return sha256_file(Path(path))
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


_SPLIT = ("conv_ms", "glue_ms")  # a profiled run's measured split of a layer's time (runtime/profile.py)


def normalize_per_layer(value) -> list[dict]:
    """Per-layer times as [{"name", "ms", "op"?, "conv_ms"?, "glue_ms"?}, ...] in run order; accepts that
    list or {name: ms}.

    The measured conv/glue split lives in the same JSON column as the times (no schema change: a v1
    file written before it still reads, its layers simply carry no split). A split is kept only
    when both halves are there, so a reader never sees half of one.
    """
    if not value:
        return []
    if isinstance(value, dict):
        return [{"name": str(k), "ms": float(v)} for k, v in value.items()]
    out = []
    for i, row in enumerate(value):
        if not isinstance(row, dict) or "name" not in row or "ms" not in row:
            raise UsageError(f"per_layer_ms[{i}]: expected {{'name': ..., 'ms': ...}}, got {row!r}")
        kept = {k: row[k] for k in ("name", "ms", "op") if k in row} | {"ms": float(row["ms"])}
        if all(row.get(k) is not None for k in _SPLIT):
            try:
                kept |= {k: float(row[k]) for k in _SPLIT}
            except (TypeError, ValueError):
                raise UsageError(f"per_layer_ms[{i}]: conv_ms/glue_ms must be numbers, got {row!r}") from None
        out.append(kept)
    return out


class ResultsStore:
    """One SQLite file of runs. Use as a context manager, or call close()."""

    def __init__(self, path: Path | str | None = None, *, create: bool = True, read_only: bool = False):
        """`read_only`: never write, not even the schema into an empty file (which then reads as no runs);
        a missing file reads as no runs too, unless `create` is False (then it is a UsageError)."""
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only, self._empty = read_only, False
        if not self.path.exists():
            if not create:
                raise UsageError(f"{self.path}: no such results database")
            if read_only:
                self._db, self._empty = None, True
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if read_only:
                self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30,
                                           isolation_level=None)
            else:
                self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA foreign_keys = ON")
            self._check_schema()
        except sqlite3.Error as e:
            raise ConfigError(f"{self.path}: not a readable results database ({e})") from e

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _check_schema(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(f"{self.path}: results schema version {version} is newer than this edge-sdk "
                              f"understands ({SCHEMA_VERSION})", hint="upgrade edge-sdk, or point --db at another file")
        if version == SCHEMA_VERSION:
            return modelled.add_columns(self)  # a read-write file from before the modelled columns
        tables = [r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if tables:
            raise ConfigError(f"{self.path}: an SQLite file that is not an edge-sdk results database "
                              f"(tables: {', '.join(sorted(tables))})")
        if self.read_only:
            self._empty = True
            return
        try:  # one script, one transaction (executescript would commit an outer one first)
            self._db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ writing
    def record_run(self, run_json: dict, manifest: dict, *, device: str, extra: dict | None = None) -> int:
        """Store one run and (once per package) its layer table; returns the run id.

        `extra` carries what the run JSON does not: time, cpu_model, clock_mhz, temperature_c (read on
        the device), accuracy, package_sha256, source ("bench", "classify"); other keys are kept as JSON.
        """
        extra = dict(extra or {})
        if not device:
            raise UsageError("record_run: a device name is required")
        if self.read_only:
            raise UsageError(f"{self.path}: opened read-only; cannot record a run")
        lat = _need(run_json, "latency_ms", "run JSON")
        for key in ("model", "variant", "target"):
            got, want = _need(run_json, key, "run JSON"), _manifest_field(manifest, key)
            if got != want:
                raise UsageError(f"run JSON {key} '{got}' does not match the package manifest's '{want}'")
        sha = package_identity(run_json, manifest, extra)
        versions = run_json.get("versions") or manifest.get("versions") or {}
        golden = run_json.get("golden") or {}
        accuracy = extra.get("accuracy", run_json.get("accuracy"))
        per_layer = normalize_per_layer(run_json.get("per_layer_ms"))
        figures = modelled.fields(run_json, extra)
        leftovers = {k: v for k, v in extra.items() if k not in _EXTRA_COLUMNS + modelled.COLUMNS}
        with self._transaction() as db:
            self._store_package(db, sha, manifest)
            cur = db.execute(
                "INSERT INTO runs (time, device, model, variant, target, threads, emulated, sdk_version, "
                "tvm_version, cpu_model, clock_mhz, temperature_c, package_sha256, source, extra) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (extra.get("time") or run_json.get("time") or _now(), device, run_json["model"],
                 run_json["variant"], run_json["target"], int(run_json.get("threads", 1)),
                 int(bool(run_json.get("emulated", False))), versions.get("edge_sdk"), versions.get("tvm"),
                 extra.get("cpu_model"), extra.get("clock_mhz"), extra.get("temperature_c"), sha,
                 extra.get("source"), json.dumps(leftovers, sort_keys=True, default=str)))
            run_id = int(cur.lastrowid)
            db.execute(
                "INSERT INTO measurements (run_id, latency_median_ms, latency_min_ms, latency_max_ms, "
                "latency_p10_ms, latency_p90_ms, repeats, load_ms, per_layer_ms, accuracy, golden_ok, "
                "golden_max_abs_err, modelled_ms, modelled_cycles, model_version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, float(_need(lat, "median", "run JSON latency_ms")), float(_need(lat, "min", "run JSON latency_ms")),
                 float(_need(lat, "max", "run JSON latency_ms")), lat.get("p10"), lat.get("p90"),
                 int(run_json.get("repeats", 0)), run_json.get("load_ms"), json.dumps(per_layer),
                 None if accuracy is None else float(accuracy),
                 None if "ok" not in golden else int(bool(golden["ok"])), golden.get("max_abs_err"), *figures))
        return run_id

    @staticmethod
    def _store_package(db: sqlite3.Connection, sha: str, manifest: dict) -> None:
        if db.execute("SELECT 1 FROM packages WHERE sha256 = ?", (sha,)).fetchone():
            return
        t = manifest.get("target") or {}
        totals = manifest.get("totals") or {}
        db.execute("INSERT INTO packages VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                   (sha, _manifest_field(manifest, "model"), manifest.get("variant"), t.get("name"), t.get("arch"),
                    t.get("peak_gflops"), t.get("mem_gbps"), totals.get("flops"), totals.get("bytes"),
                    manifest.get("created"), json.dumps(manifest.get("versions") or {}, sort_keys=True)))
        for i, r in enumerate(manifest.get("layers") or []):
            where = f"manifest layers[{i}]"
            flops, rd, wr = (int(_need(r, k, where)) for k in ("flops", "bytes_read", "bytes_written"))
            db.execute("INSERT INTO package_layers VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                       (sha, i, _need(r, "name", where), _need(r, "op", where), json.dumps(r.get("epilogue", [])),
                        json.dumps(r.get("inputs", [])), json.dumps(r.get("weights", [])),
                        json.dumps(r.get("output", [])), flops, rd, wr,
                        float(r.get("intensity", flops / max(1, rd + wr)))))

    # ------------------------------------------------------------------ reading
    def query(self, *, model: str | None = None, variant: str | None = None, device: str | None = None,
              target: str | None = None, latest: bool = False) -> list[dict]:
        """Runs joined with their measurements, oldest first; `latest` keeps only the newest run per
        (model, variant, device, target, threads), which is what a comparison wants."""
        where, args = [], []
        for col, val in (("model", model), ("variant", variant), ("device", device), ("target", target)):
            if val is not None:
                where.append(f"r.{col} = ?")
                args.append(val)
        if latest:
            where.append("r.id = (SELECT MAX(r2.id) FROM runs r2 WHERE r2.model = r.model AND r2.variant = r.variant "
                         "AND r2.device = r.device AND r2.target = r.target AND r2.threads = r.threads)")
        sql = ("SELECT r.id AS run_id, r.*, m.* FROM runs r JOIN measurements m ON m.run_id = r.id"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.id, m.id")
        if self._empty:
            return []
        out = []
        for row in self._rows(sql, args):
            d = {k: row[k] if k in row.keys() else None for k in RUN_COLUMNS}  # noqa: SIM118 - Row `in` looks at values
            where = f"run {d['run_id']}"
            d["emulated"] = bool(d["emulated"])
            d["golden_ok"] = None if d["golden_ok"] is None else bool(d["golden_ok"])
            d["per_layer_ms"] = self._json(d["per_layer_ms"], where, "per_layer_ms", list)
            d["extra"] = self._json(d["extra"], where, "extra", dict)
            for key in ("latency_median_ms", "latency_min_ms", "latency_max_ms"):
                if not isinstance(d[key], (int, float)) or not 0 < d[key] < float("inf"):
                    raise ConfigError(f"{self.path}: {where}: {key} is {d[key]!r}, not a positive time",
                                      hint="the file was edited by hand or damaged; remove that run")
            modelled.check(d, self.path, where)
            out.append(d)
        return out

    def packages(self, shas: list[str] | None = None) -> dict[str, dict]:
        """sha256 -> package facts with its layer table (the roofline's input)."""
        if self._empty:
            return {}
        out = {}
        for p in self._rows("SELECT * FROM packages ORDER BY sha256"):
            if shas is not None and p["sha256"] not in shas:
                continue
            d = dict(p)
            where = f"package {str(d['sha256'])[:12]}"
            d["versions"] = self._json(d["versions"], where, "versions", dict)
            d["layers"] = [
                {**{k: r[k] for k in ("name", "op", "flops", "bytes_read", "bytes_written", "intensity")},
                 **{k: self._json(r[k], f"{where} layer {r['idx']}", k, list)
                    for k in ("epilogue", "inputs", "weights", "output")}}
                for r in self._rows("SELECT * FROM package_layers WHERE package_sha256 = ? ORDER BY idx",
                                    (p["sha256"],))]
            out[p["sha256"]] = d
        return out

    def _rows(self, sql: str, args=()) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise ConfigError(f"{self.path}: not a readable results database ({e})") from e

    def _json(self, text, where: str, column: str, kind: type):
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            value = None
        if not isinstance(value, kind):
            raise ConfigError(f"{self.path}: {where}: column {column} is not a JSON {kind.__name__} ({str(text)[:40]!r})",
                              hint="the file was edited by hand or damaged; remove that row")
        return value

    # ------------------------------------------------------------------ export
    def export_csv(self, path: Path | str) -> int:
        """One row per measurement; per-layer times and extra as JSON strings. Returns the row count."""
        rows = self.query()
        with atomic_write(Path(path), newline="") as f:
            w = csv.DictWriter(f, fieldnames=RUN_COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({**r, "per_layer_ms": json.dumps(r["per_layer_ms"]),
                            "extra": json.dumps(r["extra"], sort_keys=True)})
        return len(rows)

    def export_json(self, path: Path | str) -> int:
        """Everything: runs with measurements, and packages with their layer tables. Returns the run count."""
        rows = self.query()
        doc = {"schema_version": SCHEMA_VERSION, "exported": _now(), "runs": rows, "packages": self.packages()}
        with atomic_write(Path(path)) as f:
            json.dump(doc, f, indent=1, default=str)
        return len(rows)


def _manifest_field(manifest: dict, key: str):
    if key == "model":
        return (_need(manifest, "model", "manifest") or {}).get("name")
    if key == "target":
        return (_need(manifest, "target", "manifest") or {}).get("name")
    return _need(manifest, key, "manifest")


@contextmanager
def atomic_write(path: Path, newline: str | None = None):
    """Write to a temp file beside `path`, then os.replace: a failure leaves nothing half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        honour_umask(tmp)
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
