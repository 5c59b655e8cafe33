"""The fleet-file loader: every error names file:line key.path; shorthand; selection."""
from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from edge_sdk.errors import ConfigError, UsageError
from edge_sdk.fleet.config import load_fleet, parse_fleet

SKETCH = textwrap.dedent("""\
    defaults: {user: pi, port: 22, key: ~/.ssh/id_ed25519, target: pi3}
    devices:
      kitchen-pi: {host: 192.0.2.10}
      door-pi:    {host: 192.0.2.11, target: pi-zero2w, tags: [camera]}
      gate-pi:    admin@192.0.2.12:2222
      yard-pi:
        host: 192.0.2.13
        tags: [camera, outdoor]
    groups:
      cameras: {match: {tags: [camera]}}
      pair: {devices: [kitchen-pi, door-pi]}
    deployments:
      - {group: cameras, model: mobilenet_v1, variants: [float32, int8, w1a2]}
    """)


def line_of(text: str, snippet: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if snippet in line:
            return i
    raise AssertionError(snippet)


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse_fleet(text, name="fleet.yaml")
    return str(e.value)


def test_design_sketch_loads_with_defaults_applied():
    f = parse_fleet(SKETCH, name="fleet.yaml")
    assert list(f.devices) == ["kitchen-pi", "door-pi", "gate-pi", "yard-pi"]
    kitchen, door = f.devices["kitchen-pi"], f.devices["door-pi"]
    assert (kitchen.user, kitchen.port, kitchen.target) == ("pi", 22, "pi3")
    assert kitchen.key == str(Path.home() / ".ssh/id_ed25519")
    assert (door.target, door.tags) == ("pi-zero2w", ("camera",))
    assert f.groups["cameras"].devices == ("door-pi", "yard-pi")
    assert f.groups["pair"].devices == ("kitchen-pi", "door-pi")
    assert f.deployments[0].variants == ("float32", "int8", "w1a2")
    assert kitchen.where == "fleet.yaml:3"


def test_shorthand_forms():
    f = parse_fleet(textwrap.dedent("""\
        defaults: {port: 2200}
        devices:
          a: admin@192.0.2.12:2222
          b: {host: bob@10.0.0.1}
          c: 10.0.0.2
          d: "[fe80::1]:2022"
          e: {host: "pi@[::1]", port: 23}
        """))
    d = f.devices
    assert (d["a"].user, d["a"].host, d["a"].port) == ("admin", "192.0.2.12", 2222)
    assert (d["b"].user, d["b"].host, d["b"].port) == ("bob", "10.0.0.1", 2200)
    assert (d["c"].user, d["c"].host, d["c"].port) == ("pi", "10.0.0.2", 2200)
    assert (d["d"].host, d["d"].port) == ("fe80::1", 2022)
    assert (d["e"].user, d["e"].host, d["e"].port) == ("pi", "::1", 23)
    assert d["d"].address == "pi@[fe80::1]:2022"


def test_key_paths_expand_home_and_resolve_against_the_fleet_file(tmp_path):
    (tmp_path / "fleet.yaml").write_text("defaults: {key: keys/id}\ndevices:\n  a: {host: h, key: ~/k}\n  b: h2\n")
    f = load_fleet(tmp_path / "fleet.yaml")
    assert f.devices["a"].key == str(Path.home() / "k")
    assert f.devices["b"].key == str(tmp_path / "keys/id")


@pytest.mark.parametrize("text, snippet, path, message", [
    ("devices:\n  door-pi:\n    host: h\n    port: twenty-two\n", "port:", "devices.door-pi.port",
     "expected an integer, got 'twenty-two'"),
    ("devices:\n  a: {host: h, port: 70000}\n", "port", "devices.a.port", "from 1 to 65535"),
    ("devices:\n  a: {host: h}\n  b:\n    host: h\n    prot: 22\n", "prot", "devices.b.prot", "did you mean 'port'"),
    ("defaults: {user: pi}\ndevice: {}\n", "device:", "device", "did you mean 'devices'"),
    ("devices:\n  a:\n    host: pi@h:2222\n    port: 2222\n", "port: 2222", "devices.a.port", "given twice"),
    ("devices:\n  a:\n    host: pi@h\n    user: pi\n", "user: pi", "devices.a.user", "given twice"),
    ("devices:\n  a: {host: h}\n  a: {host: h2}\n", "a: {host: h2}", "devices.a", "given twice"),
    ("devices:\n  a: {host: h, target: pi5}\n", "pi5", "devices.a.target", "did you mean 'pi4'"),
    ("devices:\n  a:\n    port: 22\n", "a:", "devices.a", "missing key 'host'"),
    ("devices:\n  a: {host: 'h; reboot'}\n", "reboot", "devices.a.host", "expected a host name"),
    ("devices:\n  'a;rm -rf ~': h\n", "rm -rf", "devices.a;rm -rf ~", "device name"),
    ("devices:\n  a: {host: h, tags: camera}\n", "tags", "devices.a.tags", "expected a list"),
    ("devices:\n  a: {host: h, host_key: 'not a key'}\n", "host_key", "devices.a.host_key", "expected a public key"),
    ("devices:\n  a: h\ngroups:\n  g:\n    devices: [a, b]\n", "[a, b]", "groups.g.devices.1", "no device 'b'"),
    ("devices:\n  a: {host: h, tags: [camera]}\ngroups:\n  g:\n    match: {tags: [camra]}\n", "camra",
     "groups.g.match.tags.0", "did you mean 'camera'"),
    ("devices:\n  a: h\ngroups:\n  g: {devices: [a], match: {tags: [x]}}\n", "g:", "groups.g", "exactly one of"),
    ("devices:\n  a: h\ngroups:\n  all: {devices: [a]}\n", "all:", "groups.all", "implicit group"),
    ("devices:\n  a: h\ndeployments:\n  - {group: cams, model: m, variants: [int8]}\n", "cams",
     "deployments.0.group", "no group 'cams'"),
    ("devices:\n  a: h\ndeployments:\n  - group: all\n    model: m\n    variants: [float32, int4]\n", "int4",
     "deployments.0.variants.1", "unknown variant 'int4'"),
    ("devices:\n  a: h\ndeployments:\n  - {group: all, variants: [int8]}\n", "- {group", "deployments.0",
     "missing key 'model'"),
])
def test_errors_name_file_line_and_key_path(text, snippet, path, message):
    msg = error_of(text)
    assert msg.startswith(f"fleet.yaml:{line_of(text, snippet)} {path}: "), msg
    assert message in msg


def test_invalid_yaml_names_the_line():
    text = "devices:\n  a: {host: h\n  b: h\n"
    assert error_of(text).startswith("fleet.yaml:3: not valid YAML")


@pytest.mark.parametrize("text, message", [
    ("", "empty"), ("- a\n- b\n", "expected a mapping"), ("defaults: {}\n", "missing key 'devices'"),
    ("devices: {}\n", "no devices"),
])
def test_whole_file_errors(text, message):
    assert message in error_of(text)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_fleet(tmp_path / "nope.yaml")


def test_select():
    f = parse_fleet(SKETCH)
    assert [d.name for d in f.select()] == list(f.devices)
    assert [d.name for d in f.select(group="all")] == list(f.devices)
    assert [d.name for d in f.select(group="cameras")] == ["door-pi", "yard-pi"]
    assert [d.name for d in f.select(device="gate-pi")] == ["gate-pi"]
    with pytest.raises(UsageError, match="did you mean 'cameras'"):
        f.select(group="camera")
    with pytest.raises(UsageError, match="did you mean 'door-pi'"):
        f.select(device="dor-pi")
    with pytest.raises(UsageError, match="not both"):
        f.select(group="cameras", device="door-pi")


def test_fleet_is_immutable():
    f = parse_fleet(SKETCH)
    with pytest.raises(TypeError):
        f.devices["x"] = f.devices["door-pi"]
    with pytest.raises(AttributeError):
        f.devices["door-pi"].port = 1


def test_mutated_files_fail_only_with_config_errors():
    """A cheap fuzz: random edits of a valid file either load or raise ConfigError, nothing else."""
    rng = random.Random(6)
    alphabet = list(":{}[]-, \n#'\"@&*!|>%`") + ["port", "host", "22", "pi3", "~", "\t", "devices"]
    outcomes = {"ok": 0, "error": 0}
    for _ in range(400):
        text = list(SKETCH)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(text))
            op = rng.random()
            if op < 0.4:
                del text[i]
            elif op < 0.8:
                text.insert(i, rng.choice(alphabet))
            else:
                text[i] = rng.choice(alphabet)
        try:
            parse_fleet("".join(text), name="fleet.yaml")
            outcomes["ok"] += 1
        except ConfigError as e:
            assert str(e).startswith("fleet.yaml"), str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 50
