"""Issue 15 item 4: YAML tags and deep nesting in a fleet file are exit 3 with file:line, never a
traceback, with libyaml's C parser and with the pure-Python one alike."""
from __future__ import annotations

import re

import pytest
import yaml

from edge_sdk.cli import main as cli_main
from edge_sdk.errors import ConfigError
from edge_sdk.fleet import yaml_nodes
from edge_sdk.fleet.config import parse_fleet

PARSERS = [pytest.param(yaml.SafeLoader, id="pure-python")]
if getattr(yaml, "__with_libyaml__", False):
    from yaml.cyaml import CParser
    PARSERS.append(pytest.param(CParser, id="libyaml"))


@pytest.fixture(params=PARSERS)
def parser(request, monkeypatch):
    monkeypatch.setattr(yaml_nodes, "_Parser", request.param)
    return request.param


def port_is(value: str) -> str:
    return f"devices:\n  a: {{host: 192.0.2.1, port: {value}}}\n"


@pytest.mark.parametrize("value, says", [
    ("!!python/name:os.system x", "tag '!!python/name:os.system' is not allowed"),
    ("!!python/object/apply:os.system [id]", "tag '!!python/object/apply:os.system' is not allowed"),
    ("!!timestamp notadate", "tag '!!timestamp' is not allowed"),
    ("!custom x", "tag '!custom' is not allowed"),
    ("!<tag:example.com,2000:x> y", "tag 'tag:example.com,2000:x' is not allowed"),
    ("!!set {a}", "tag '!!set' is not allowed"),
    ("!!binary aGk=", "tag '!!binary' is not allowed"),
    ("!!int abc", "'abc' is not a valid '!!int'"),
    ("!!float zz", "'zz' is not a valid '!!float'"),
    ("!!bool maybe", "'maybe' is not a valid '!!bool'"),
])
def test_tags_are_config_errors_with_file_and_line(parser, value, says):
    with pytest.raises(ConfigError, match=r"^fleet\.yaml:2[ :]") as e:
        parse_fleet(port_is(value), name="fleet.yaml")
    assert says in str(e.value)


def test_core_tags_still_load(parser):
    fleet = parse_fleet(port_is("!!int 0x16"), name="fleet.yaml")
    assert fleet.devices["a"].port == 22
    fleet = parse_fleet("devices:\n  a: &h {host: 192.0.2.1}\n  b: *h\n", name="fleet.yaml")
    assert fleet.devices["b"].host == "192.0.2.1"


@pytest.mark.parametrize("text", [
    "devices: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "devices: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
    "- " * 100_000 + "x\n",
    "devices:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)),
])
def test_deep_nesting_is_a_config_error_with_a_line(parser, text):
    with pytest.raises(ConfigError, match=r"^fleet\.yaml:\d+: .*(nest|not valid YAML)"):
        parse_fleet(text, name="fleet.yaml")


def test_cli_exit_3_without_traceback(tmp_path, capsys):
    f = tmp_path / "fleet.yaml"
    for text in (port_is("!!python/name:os.system x"), port_is("!!int abc"), "a: " + "[" * 100_000):
        f.write_text(text)
        assert cli_main(["fleet", "check", "--fleet", str(f)]) == 3
        err = capsys.readouterr().err
        assert "Traceback" not in err and re.search(r"fleet\.yaml:\d+", err), err


def test_both_parsers_give_the_same_fleet(monkeypatch):
    text = "".join(["defaults: {user: pi, port: 22, target: pi3}\ndevices:\n"] +
                   [f"  d{i}: {{host: 192.0.2.{i}, tags: [t{i % 3}]}}\n" for i in range(1, 200)] +
                   ["groups:\n  g: {match: {tags: [t1]}}\n"])
    fleets = []
    for p in PARSERS:
        monkeypatch.setattr(yaml_nodes, "_Parser", p.values[0])
        fleets.append(parse_fleet(text, name="fleet.yaml"))
    assert all(f.devices == fleets[0].devices and f.groups == fleets[0].groups for f in fleets)


@pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False), reason="PyYAML built without libyaml")
def test_libyaml_is_used_when_present():
    assert yaml_nodes.uses_libyaml()
