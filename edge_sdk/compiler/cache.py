"""Compile or reuse: the one package cache (bench, bench --device and the demo use it).

A cached .edgepkg is named by a hash of everything compile_model's output depends on:

- the model: name, source, options (width, resolution, calibration folder, ...), the model file's sha256;
- the variant and target rows (all their fields: bit widths, glue, LLVM target, cross compiler, ...);
- the golden input's seed, edge-sdk's and TVM's versions;
- the sources that shape a package: compiler/, models/, quant/, runtime/ (the LiteRT golden reference),
  tuning/ (record replay), package.py, targets.py, variants.py -- so a teammate's faster kernel is
  rebuilt, not served stale;
- for the variants compile applies tuning records to (variants.py: tunable): every record file under the
  roots compile searches (--tuning-records DIRs, then the user's and the shipped ones), so a package
  built before `edge-sdk tune` is not served after it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from edge_sdk import __version__

_PKG = Path(__file__).resolve().parents[1]  # edge_sdk/
_SOURCE_DIRS = ("compiler", "graph", "models", "quant", "runtime")  # graph/: the op registry both read
_SOURCE_FILES = ("__init__.py", "package.py", "targets.py", "variants.py", "tune/store.py")  # records: tuning_digest


@functools.cache
def sources_digest() -> str:
    """The sources compile_model's output depends on (read once per process)."""
    h = hashlib.sha256()
    files = [p for d in _SOURCE_DIRS for p in (_PKG / d).rglob("*") if p.suffix in (".py", ".cc", ".h")]
    for p in sorted(files + [_PKG / n for n in _SOURCE_FILES]):
        h.update(p.relative_to(_PKG).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def applies_tuning(variant) -> bool:
    """Whether compile_model applies tuning records to this variant (the table's tunable variants)."""
    return variant.tunable


def tuning_digest(variant, *, use_tuning: bool = True, tuning_roots: Sequence[Path] = ()) -> str | None:
    """The record files compile would search for this variant; None when it applies none."""
    if not (use_tuning and applies_tuning(variant)):
        return None
    from edge_sdk.tune.store import default_roots, records_digest

    return records_digest([*map(Path, tuning_roots), *default_roots()])


def _model_identity(model) -> dict:
    src = Path(model.source) if model.source and not model.source.startswith("zoo:") else None
    return {"model": model.name, "source": model.source, "options": model.options,
            "file_sha256": hashlib.sha256(src.read_bytes()).hexdigest() if src and src.is_file() else None,
            "preprocess": model.preprocess.to_json(), "labels": model.labels}  # both go into the manifest


def choice_digest(variant, target, *, choose: bool | None = None) -> str | None:
    """What of compile's per-layer choice (compile/choice) decides the package: the timing model it prices
    by (priced), or the shipped records it applies (records, the default); None when neither applies."""
    from edge_sdk.compiler.build import CHOOSES
    from edge_sdk.compiler.choice.chooser import applies, mode

    m = mode(choose)
    if variant.family not in CHOOSES or not applies(target) or m == "off":
        return None
    if m == "records":
        from edge_sdk.tune import choice_records

        d = choice_records.digest(target)
        return None if d is None else f"records:{d}"
    from edge_sdk.timing.package_figures import model_version

    return model_version()


def package_key(model, variant, target, *, seed: int = 0, use_tuning: bool = True,
                tuning_roots: Sequence[Path] = (), choose: bool | None = None) -> str:
    """What decides a package's contents; its hash names the cached .edgepkg."""
    import tvm

    ident = {**_model_identity(model), "variant": dataclasses.asdict(variant), "target": dataclasses.asdict(target),
             "seed": seed, "edge_sdk": __version__, "tvm": tvm.__version__, "sources": sources_digest(),
             "tuning": tuning_digest(variant, use_tuning=use_tuning, tuning_roots=tuning_roots)}
    choice = choice_digest(variant, target, choose=choose)
    if choice is not None:  # keys of packages built without the choice stay what they were
        ident["choice"] = choice
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]


def package_path(model, variant, target, *, folder: Path, seed: int = 0, choose: bool | None = None) -> Path:
    """Where the cached package for (model, variant, target, seed) lives in `folder`; it may not exist yet."""
    key = package_key(model, variant, target, seed=seed, choose=choose)
    return folder / f"{model.name}-{variant.name}-{target.name}-{key}.edgepkg"


def cached_package(model, variant, target, *, folder: Path, seed: int = 0,
                   progress: Callable[[str], None] | None = None, choose: bool | None = None) -> tuple[Path, bool]:
    """(package, reused): the cached package, compiled first when there is none. Written atomically:
    a failed or interrupted compile leaves no file behind."""
    from edge_sdk.compiler.build import compile_model

    out = package_path(model, variant, target, folder=folder, seed=seed, choose=choose)
    if out.is_file():
        return out, True
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.edgepkg")
    say = progress or (lambda _m: None)
    try:
        compile_model(model, variant=variant, target=target, out=tmp, seed=seed, choose=choose,
                      progress=lambda m: say(f"{variant.name}: {m}"))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out, False
