"""Issue 15 item 3: the manifest is a schema. Every field's type is checked on open, naming the file
and the field; non-UTF-8, NaN/Infinity, deep nesting, wrong types and missing keys are exit 6, and
manifest text is shown as text (a model named `evil[/nope]` no longer crashes inspect)."""
from __future__ import annotations

import copy
import json

import pytest

from edge_sdk.cli import main as cli_main
from edge_sdk.errors import PackageError
from edge_sdk.manifest_schema import MEMBERS, check_manifest, parse_manifest


def minimal_manifest(**changes) -> dict:
    """The smallest manifest the schema accepts (without format/members: write_package adds those)."""
    m = {
        "model": {"name": "m", "source": None, "options": {}},
        "variant": "float32",
        "target": {"name": "host", "arch": "x86_64", "llvm": {"kind": "llvm"}, "cores": 2, "clock_ghz": 2.0,
                   "peak_gflops": 10.0, "mem_gbps": 5.0},
        "versions": {"edge_sdk": "0.1.0", "tvm": "0.27.0"},
        "created": "2026-01-01T00:00:00+00:00",
        "input": {"name": "input", "shape": [2, 3], "dtype": "float32", "layout": "NC", "preprocess": None,
                  "quantization": None},
        "output": {"shape": [2, 3], "dtype": "float32"},
        "labels": None,
        "params": {"count": 0, "bytes": 0},
        "layers": [{"name": "fc", "op": "dense", "epilogue": [], "inputs": [[2, 3]], "weights": [], "output": [2, 3],
                    "flops": 12, "bytes_read": 24, "bytes_written": 24, "intensity": 0.25}],
        "totals": {"flops": 12, "bytes": 48},
        "golden": {"reference": "numpy", "seed": 0, "rtol": 1e-4, "atol": 1e-5},
    }
    m.update(changes)
    return m


def full(m: dict) -> dict:
    return {**m, "format": "edgepkg/1",
            "members": {n: {"sha256": "0" * 64, "size": 1} for n in MEMBERS}}


def test_the_minimal_manifest_passes():
    assert parse_manifest(json.dumps(full(minimal_manifest())).encode(), where="p")["variant"] == "float32"


def _set(doc, path, value):
    *head, last = path
    for k in head:
        doc = doc[k]
    if value is KeyError:
        del doc[last]
    else:
        doc[last] = value


@pytest.mark.parametrize("path, value, says", [
    (("golden", "rtol"), float("inf"), "golden.rtol: expected a finite number"),
    (("golden", "atol"), 0.5, "golden.atol: expected a finite number from 0 to 0.001"),
    (("golden", "rtol"), -1e-5, "golden.rtol"),
    (("golden", "rtol"), "1e-4", "golden.rtol"),
    (("model", "name"), 7, "model.name: expected a printable name"),
    (("model",), KeyError, "model: missing"),
    (("target", "arch"), "riscv", "target.arch: expected one of aarch64, x86_64"),
    (("target", "llvm"), "x", "target.llvm: expected an object"),
    (("layers", 0, "flops"), "lots", "layers[0].flops: expected a non-negative integer"),
    (("layers", 0, "output"), [1, "2"], "layers[0].output[1]"),
    (("layers",), {}, "layers: expected a list"),
    (("versions", "tvm"), None, "versions.tvm: expected a string"),
    (("labels",), [1], "labels[0]: expected a string"),
    (("members", "model.so", "sha256"), "abc", "members.model.so.sha256: expected 64 lowercase hex digits"),
    (("members", "model.so"), KeyError, "members: lists"),
    (("input", "shape"), True, "input.shape: expected a list"),
    (("params", "count"), True, "params.count"),
])
def test_wrong_fields_name_the_file_and_field(path, value, says):
    doc = full(minimal_manifest())
    _set(doc, path, value)
    with pytest.raises(PackageError, match="^pkg.edgepkg: manifest.json ") as e:
        check_manifest(doc, where="pkg.edgepkg")
    assert says in str(e.value)
    assert e.value.exit_code == 6


@pytest.mark.parametrize("raw, says", [
    (b"\xff\xfe{}", "is not UTF-8 text"),
    ('{"format": "edgepkg/1", "x": "\u00e9"}'.encode("latin-1"), "is not UTF-8 text"),
    (b'{"format": "edgepkg/1", "golden": {"rtol": NaN}}', "NaN is not a number"),
    (b'{"format": "edgepkg/1", "golden": {"rtol": Infinity}}', "Infinity is not a number"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"format": "edgepkg/1",', "manifest.json:1: not valid JSON"),
    (b"[]", "not a JSON object"),
    (b'{"format": "edgepkg/2"}', "not an edgepkg/1 manifest"),
])
def test_unreadable_bytes_are_package_errors(raw, says):
    with pytest.raises(PackageError, match=r"^pkg\.edgepkg: manifest\.json") as e:
        parse_manifest(raw, where="pkg.edgepkg")
    assert says in str(e.value)


def test_markup_in_manifest_text_is_shown_as_text(host_package, tmp_path, capsys):
    """A model named `evil[/nope]` (valid, signed by us) crashed `inspect` with rich's MarkupError."""
    from edge_sdk.package import open_package, write_package

    pkg = open_package(host_package, tmp_path / "x")
    m = copy.deepcopy({k: v for k, v in pkg.manifest.items() if k not in ("members", "format")})
    m["model"]["name"] = "evil[/nope]"
    m["model"]["source"] = "[bold red]x[/]"
    m["layers"][0]["name"] = "[/]"
    out = write_package(tmp_path / "evil.edgepkg", manifest=m, files={n: pkg.member(n) for n in MEMBERS})
    assert cli_main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "evil[/nope]" in shown and "[bold red]x[/]" in shown
