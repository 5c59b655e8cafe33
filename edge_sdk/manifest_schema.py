"""The .edgepkg manifest as a schema: parse its bytes and check every field a reader uses, on open.

    manifest = parse_manifest(raw_bytes, where="m.edgepkg")   # dict, or PackageError (exit 6)

A manifest is data from whoever made the package: before anything reads it, the bytes must be
strict UTF-8 JSON (no NaN/Infinity, bounded nesting), and every field inspect, run, deploy, bench
and the results store read must have its type: "m.edgepkg: manifest.json golden.rtol: expected a
finite number from 0 to 0.001, got inf". Golden tolerances are finite and small, so a crafted
`rtol = Infinity` cannot make a wrong model pass its golden check. Fields the SDK does not read
(tuning notes, model options, kernel lists) may hold any JSON; unknown top-level keys are allowed,
so a newer edge-sdk's extra facts do not make an older one refuse a package.
"""
from __future__ import annotations

import json
import math
import re

from edge_sdk.errors import PackageError

FORMAT = "edgepkg/1"
MANIFEST = "manifest.json"
MEMBERS = ("model.so", "params.bin", "golden_input.npy", "golden_output.npy")
MAX_GOLDEN_TOL = 1e-3  # the loosest tolerance edge-sdk itself writes is 1e-4 (float and bitserial heads)
# atol is relative to the golden output's range (max - min, recorded as golden.range): an output in the
# hundreds gets atol = range_tol * range, so its cap is MAX_GOLDEN_TOL * max(1, range), not 1e-3 absolute.
MAX_GOLDEN_RANGE = 1e30
MAX_BYTES = 64 << 20  # a manifest of a big model is a few hundred KB
_SHA = re.compile(r"^[0-9a-f]{64}$")
_ARCHES = ("aarch64", "x86_64")


class _Bad(Exception):
    def __init__(self, path: str, message: str):
        super().__init__(path, message)
        self.path, self.message = path, message


# A spec: a type name, a tuple of them (any of), a dict (a mapping with these required keys and,
# marked by a trailing "?", optional ones), or a one-element list (a list of that spec).
_NUM = "number"
_LAYER = {"name": "str", "op": "str", "epilogue?": ["str"], "inputs?": "any", "weights?": "any",
          "output": ["int"], "flops": "int", "bytes_read": "int", "bytes_written": "int", "intensity": _NUM,
          "kernels?": "any"}
SCHEMA = {
    "format": "str",
    "model": {"name": "name", "source": ("str", "null"), "options?": "object"},
    "variant": "name",
    "target": {"name": "name", "arch": "arch", "llvm": "object", "cores?": "int", "clock_ghz?": (_NUM, "null"),
               "peak_gflops?": (_NUM, "null"), "mem_gbps?": (_NUM, "null")},
    "versions": {"edge_sdk": "str", "tvm": "str"},
    "created": "str",
    "input": {"name": "str", "shape": ["int"], "dtype": "str", "layout": "str", "preprocess?": "any",
              "quantization?": ("object", "null")},
    "output": {"shape": ["int"], "dtype": "str"},
    "outputs?": ([{"name": "str", "shape": ["int"], "dtype": "str", "offset": "int", "size": "int",
                   "range?": "range", "atol?": "atol"}], "null"),
    "labels?": (["str"], "null"),
    "params": {"count": "int", "bytes": "int"},
    "layers": [_LAYER],
    "totals": {"flops": "int", "bytes": "int"},
    "golden": {"reference?": "str", "seed?": ("int", "null"), "rtol": "tolerance", "atol": "atol",
               "range?": "range", "range_tol?": "tolerance"},
    "members": "members",
}


def parse_manifest(raw: bytes, *, where: str) -> dict:
    """Bytes of manifest.json -> the checked manifest; PackageError names `where`, the member and field."""
    if len(raw) > MAX_BYTES:
        raise PackageError(f"{where}: {MANIFEST} is {len(raw)} bytes, more than a manifest can be ({MAX_BYTES})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PackageError(f"{where}: {MANIFEST} is not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise PackageError(f"{where}: {MANIFEST}:{e.lineno}: not valid JSON ({e.msg})") from None
    except ValueError as e:  # NaN / Infinity
        raise PackageError(f"{where}: {MANIFEST}: {e}") from None
    except RecursionError:
        raise PackageError(f"{where}: {MANIFEST}: nested too deeply to be a manifest") from None
    return check_manifest(doc, where=where)


def check_manifest(doc, *, where: str) -> dict:
    if not isinstance(doc, dict):
        raise PackageError(f"{where}: {MANIFEST} is not a JSON object")
    if doc.get("format") != FORMAT:
        raise PackageError(f"{where}: {MANIFEST} is not an {FORMAT} manifest (format {doc.get('format')!r})")
    try:
        _check(doc, SCHEMA, "")
        _check_atol(doc["golden"])
    except _Bad as e:
        raise PackageError(f"{where}: {MANIFEST} {e.path or '(top)'}: {e.message}") from None
    return doc


def max_atol(golden: dict) -> float:
    """The loosest atol a package may carry: MAX_GOLDEN_TOL of its golden output's range (at least 1)."""
    return MAX_GOLDEN_TOL * max(1.0, float(golden.get("range", 0.0)))


def _check_atol(golden: dict) -> None:
    _want(golden["atol"] <= max_atol(golden), "golden.atol",
          f"a finite number from 0 to {max_atol(golden):g} ({MAX_GOLDEN_TOL:g} x max(1, golden.range))", golden["atol"])


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a manifest may hold")


def _check(value, spec, path: str) -> None:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise _Bad(path, f"expected an object, got {_show(value)}")
        for key, sub in spec.items():
            name, optional = key.rstrip("?"), key.endswith("?")
            here = f"{path}.{name}" if path else name
            if name not in value:
                if not optional:
                    raise _Bad(here, "missing")
                continue
            _check(value[name], sub, here)
    elif isinstance(spec, list):
        if not isinstance(value, list):
            raise _Bad(path, f"expected a list, got {_show(value)}")
        for i, item in enumerate(value):
            _check(item, spec[0], f"{path}[{i}]")
    elif isinstance(spec, tuple):
        errors: list[_Bad] = []
        for alt in spec:
            try:
                _check(value, alt, path)
                return
            except _Bad as e:
                errors.append(e)
        deeper = [e for e in errors if e.path != path]  # the alternative of the right kind, wrong inside
        if deeper:
            raise deeper[0]
        raise _Bad(path, " or ".join(dict.fromkeys(e.message for e in errors)))
    else:
        _SCALARS[spec](value, path)


def _want(ok: bool, path: str, what: str, value) -> None:
    if not ok:
        raise _Bad(path, f"expected {what}, got {_show(value)}")


def _members(value, path: str) -> None:
    _want(isinstance(value, dict), path, "an object of members", value)
    if sorted(value) != sorted(MEMBERS):
        raise _Bad(path, f"lists {sorted(value)}, expected exactly {list(MEMBERS)}")
    for name in MEMBERS:
        _check(value[name], {"sha256": "sha256", "size": "int"}, f"{path}.{name}")


_SCALARS = {
    "any": lambda v, p: None,
    "null": lambda v, p: _want(v is None, p, "null", v),
    "str": lambda v, p: _want(isinstance(v, str), p, "a string", v),
    "name": lambda v, p: _want(isinstance(v, str) and 0 < len(v) <= 200 and v.isprintable(), p,
                               "a printable name (1 to 200 characters)", v),
    "int": lambda v, p: _want(isinstance(v, int) and not isinstance(v, bool) and v >= 0, p,
                              "a non-negative integer", v),
    _NUM: lambda v, p: _want(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), p,
                             "a finite number", v),
    "object": lambda v, p: _want(isinstance(v, dict), p, "an object", v),
    "arch": lambda v, p: _want(v in _ARCHES, p, f"one of {', '.join(_ARCHES)}", v),
    "sha256": lambda v, p: _want(isinstance(v, str) and bool(_SHA.match(v)), p, "64 lowercase hex digits", v),
    "tolerance": lambda v, p: _want(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                    and 0 <= v <= MAX_GOLDEN_TOL, p,
                                    f"a finite number from 0 to {MAX_GOLDEN_TOL:g}", v),
    "atol": lambda v, p: _want(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               and v >= 0, p, "a finite number >= 0", v),
    "range": lambda v, p: _want(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                and 0 <= v <= MAX_GOLDEN_RANGE, p, f"a finite number from 0 to {MAX_GOLDEN_RANGE:g}", v),
    "members": _members,
}


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
