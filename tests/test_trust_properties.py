"""Issue 15: property tests (hypothesis) -- whatever a manifest or a fleet file holds, only EdgeError
subclasses escape (PackageError for a manifest or package, ConfigError for a fleet file)."""
from __future__ import annotations

import copy
import io
import json
import tarfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.errors import ConfigError, PackageError
from edge_sdk.fleet.config import parse_fleet
from edge_sdk.manifest_schema import check_manifest, parse_manifest
from test_trust_manifest import full, minimal_manifest

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
              st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


VALID = full(minimal_manifest())
PATHS = [p for p in _paths(VALID) if p]


def only_edge_errors(fn, *args, kind=PackageError, **kw):
    """fn may refuse its input only with `kind` (an EdgeError subclass: exit 6 for a package, 3 for a
    fleet file); anything else (TypeError, KeyError, RecursionError, another EdgeError) fails the property."""
    try:
        fn(*args, **kw)
    except kind:
        pass


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(json_values, st.just(KeyError))), min_size=1,
                max_size=4))
def test_mutated_manifests_raise_only_edge_errors(edits):
    doc = copy.deepcopy(VALID)
    for path, value in edits:
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            if value is KeyError:
                del node[path[-1]]
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit changed the shape above this path
    only_edge_errors(check_manifest, doc, where="p")
    only_edge_errors(parse_manifest, json.dumps(doc).encode(), where="p")


@SETTINGS
@given(st.binary(max_size=400))
def test_manifest_bytes_raise_only_edge_errors(raw):
    only_edge_errors(parse_manifest, raw, where="p")


@settings(SETTINGS, max_examples=60)
@given(st.dictionaries(st.sampled_from(["manifest.json", "signature.json", "model.so", "params.bin",
                                        "golden_input.npy", "golden_output.npy", "../x", "a/b"]),
                       st.binary(max_size=200), max_size=7))
def test_crafted_tars_raise_only_edge_errors(tmp_path_factory, members):
    from edge_sdk.package import open_package, read_manifest

    tmp = tmp_path_factory.mktemp("tar")
    pkg = tmp / "p.edgepkg"
    with tarfile.open(pkg, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    only_edge_errors(read_manifest, pkg)
    only_edge_errors(open_package, pkg, tmp / "out")


TAGS = ["!!python/name:os.system", "!!python/object/apply:os.system", "!!int", "!!float", "!!bool", "!!null",
        "!!timestamp", "!!binary", "!!set", "!!omap", "!!pairs", "!!map", "!!seq", "!!str", "!custom", "!",
        "!<tag:x,2000:y>", "!!merge"]
scalars = st.one_of(st.sampled_from(["192.0.2.1", "pi", "22", "abc", "notadate", "~", "2001-01-01", "<<", "=",
                                     "pi@h:22", "[::1]:22", "0x16", "1e9", "-", "*a", "&a x"]), st.text(max_size=6))


@st.composite
def yaml_values(draw, depth=0):
    tag = draw(st.one_of(st.just(""), st.sampled_from(TAGS))) + " "
    if depth > 3 or draw(st.booleans()):
        return tag.lstrip() + json.dumps(draw(scalars)) if draw(st.booleans()) else tag + draw(scalars)
    if draw(st.booleans()):
        return tag + "[" + ", ".join(draw(st.lists(yaml_values(depth + 1), max_size=3))) + "]"
    keys = draw(st.lists(st.sampled_from(["host", "port", "user", "tags", "host_key", "target", "devices",
                                          "match", "x"]), max_size=3, unique=True))
    return tag + "{" + ", ".join(f"{k}: {draw(yaml_values(depth + 1))}" for k in keys) + "}"


@SETTINGS
@given(st.dictionaries(st.sampled_from(["a", "b", "kitchen-pi"]), yaml_values(), min_size=1, max_size=3),
       st.one_of(st.none(), yaml_values()), st.integers(0, 3))
def test_fleet_files_with_tags_raise_only_config_errors(devices, groups, nest):
    text = "devices:\n" + "".join(f"  {k}: {v}\n" for k, v in devices.items())
    if groups is not None:
        text += f"groups: {'[' * nest}{groups}{']' * nest}\n"
    only_edge_errors(parse_fleet, text, name="fleet.yaml", kind=ConfigError)


@SETTINGS
@given(st.binary(max_size=300))
def test_fleet_bytes_raise_only_config_errors(raw):
    only_edge_errors(parse_fleet, raw.decode("utf-8", "replace"), name="fleet.yaml", kind=ConfigError)
