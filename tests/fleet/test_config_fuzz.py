"""Fuzz the fleet-file loader with hypothesis: whatever the text, it loads or raises ConfigError
naming the file and a line (only an empty file has no line to name). Never another exception."""
from __future__ import annotations

import re

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edge_sdk.errors import ConfigError
from edge_sdk.fleet.config import parse_fleet

VALID = """\
defaults: {user: pi, port: 22, key: /keys/id_ed25519, target: pi3}
devices:
  kitchen-pi: {host: 192.0.2.10}
  door-pi:    {host: 192.0.2.11, target: pi-zero2w, tags: [camera]}
  gate-pi:    admin@192.0.2.12:2222
groups:
  cameras: {match: {tags: [camera]}}
  pair: {devices: [kitchen-pi, door-pi]}
deployments:
  - {group: cameras, model: mobilenet_v1, variants: [float32, int8, w1a2]}
"""
WORDS = ["defaults", "devices", "groups", "deployments", "host", "port", "user", "key", "target", "tags",
         "host_key", "match", "group", "model", "variants", "all", "pi3", "int8", "kitchen-pi", "door-pi",
         "camera", "22", "-1", "0x16", "1e9", "~", "null", "true", "pi@h:22", "[::1]:22", "SHA256:x",
         "ssh-ed25519 AAAA", "$(reboot)", "a;b", "\u00e9", "\x85", "\u2028"]
_LINE = re.compile(r"^fleet\.yaml:\d+[ :]")
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(SETTINGS, max_examples=80)  # nested documents cost ~50 ms each to draw and dump


def check(text: str) -> None:
    try:
        parse_fleet(text, name="fleet.yaml")
    except ConfigError as e:
        msg = str(e)
        assert _LINE.match(msg) or msg.startswith("fleet.yaml: the fleet file is empty"), msg


scalars = st.one_of(st.sampled_from(WORDS), st.integers(-70000, 70000), st.booleans(), st.none(),
                    st.floats(allow_nan=True), st.text(max_size=12))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(WORDS), st.text(max_size=8)), inner, max_size=5)), max_leaves=30)


@FEWER
@given(documents, st.booleans())
def test_random_yaml_documents(doc, flow):
    check(yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True))


@FEWER
@given(st.fixed_dictionaries({"devices": st.dictionaries(st.sampled_from(WORDS), documents, min_size=1, max_size=3)},
                             optional={"defaults": documents, "groups": documents, "deployments": documents}))
def test_random_documents_of_the_right_shape(doc):
    check(yaml.safe_dump(doc, allow_unicode=True))


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, len(VALID)), st.integers(0, 3),
                          st.one_of(st.sampled_from(WORDS + list(":{}[]-,#'\"@&*!|>%`\t\n ")), st.text(max_size=3))),
                min_size=1, max_size=6))
def test_mutations_of_a_valid_file(edits):
    text = VALID
    for pos, op, s in edits:
        pos = min(pos, len(text))
        if op == 0:
            text = text[:pos] + text[pos + 1:]
        elif op == 1:
            text = text[:pos] + s + text[pos:]
        elif op == 2:
            text = text[:pos] + s + text[pos + len(s):]
        else:  # duplicate a line: keys given twice
            lines = text.splitlines(keepends=True) or [""]
            i = pos % len(lines)
            text = "".join(lines[:i + 1] + lines[i:])
    check(text)


@SETTINGS
@given(st.text(max_size=200))
@example("devices:\n  a: h\x07\n")  # found by this test: a character YAML refuses had no line in the error
def test_arbitrary_text(text):
    check(text)


def test_valid_file_loads():
    assert list(parse_fleet(VALID).devices) == ["kitchen-pi", "door-pi", "gate-pi"]
