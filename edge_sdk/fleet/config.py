"""The fleet file: which devices exist, how to reach them, and what runs where.

    defaults: {user: pi, port: 22, key: ~/.ssh/id_ed25519, target: pi3, connect_timeout: 10}
    devices:
      kitchen-pi: {host: 192.0.2.10}
      door-pi:    pi@192.0.2.11:2222             # user@host:port shorthand
      lab-pi:     {host: 192.0.2.12, target: pi-zero2w, tags: [camera], host_key: "ssh-ed25519 AAAA..."}
    groups:
      cameras: {match: {tags: [camera]}}          # every device carrying all these tags
      pair:    {devices: [kitchen-pi, door-pi]}
    deployments:
      - {group: cameras, model: mobilenet_v1, variants: [float32, int8, w1a2]}

The file is walked as a YAML node tree (not plain dicts) so that every error can name the file,
the line and the key path: "fleet.yaml:14 devices.door-pi.port: expected an integer, got
'twenty-two'". Unknown keys and values given twice are errors, never silently dropped. The group
name "all" is implicit (every device) and cannot be redefined. Key file paths expand `~` and are
relative to the fleet file's folder. connect_timeout (seconds, default 10; a device may set its
own) bounds each step of reaching a device: the TCP connect, the SSH banner, the key exchange and
authentication (`--connect-timeout` overrides it for one command).
"""
from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import yaml

from edge_sdk._suggest import did_you_mean
from edge_sdk.errors import ConfigError, UsageError
from edge_sdk.fleet.yaml_nodes import compose, scalar_value
from edge_sdk.targets import TARGET_NAMES
from edge_sdk.variants import VARIANTS

ALL = "all"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_HOST = re.compile(r"^[A-Za-z0-9_.:%-]{1,253}$")
_FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_BUILTIN_DEFAULTS = {"user": "pi", "port": 22, "key": None, "target": "pi3", "connect_timeout": DEFAULT_CONNECT_TIMEOUT_S}


@dataclass(frozen=True)
class Device:
    name: str
    host: str
    port: int
    user: str
    key: str | None  # private key file (absolute); None: ssh-agent and ~/.ssh/id_* as ssh would
    target: str
    tags: tuple[str, ...] = ()
    host_key: str | None = None  # pinned: "ssh-ed25519 AAAA..." or "SHA256:<43 chars>"
    where: str = ""  # "fleet.yaml:12", for messages about this device
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S  # seconds for each step of connecting (ssh_connect.py)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.name} ({self.address})"


@dataclass(frozen=True)
class Group:
    name: str
    devices: tuple[str, ...]  # resolved device names, in fleet-file order
    match_tags: tuple[str, ...] = ()  # non-empty when the group was defined by tags


@dataclass(frozen=True)
class Deployment:
    group: str
    model: str
    variants: tuple[str, ...]


@dataclass(frozen=True)
class Fleet:
    path: str
    defaults: Mapping[str, object]  # read-only views: a Fleet is a value
    devices: Mapping[str, Device]
    groups: Mapping[str, Group]
    deployments: tuple[Deployment, ...]

    def select(self, group: str | None = None, device: str | None = None) -> list[Device]:
        """The devices a command acts on: one device, one group, or (neither given) all of them."""
        if group is not None and device is not None:
            raise UsageError("give a group or a device, not both")
        if device is not None:
            if device not in self.devices:
                raise UsageError(f"{self.path}: no device '{device}': {did_you_mean(device, self.devices)}")
            return [self.devices[device]]
        if group is None or group == ALL:
            return list(self.devices.values())
        if group not in self.groups:
            raise UsageError(f"{self.path}: no group '{group}': {did_you_mean(group, [ALL, *self.groups])}")
        return [self.devices[n] for n in self.groups[group].devices]


def load_fleet(path: str | os.PathLike) -> Fleet:
    """Read and validate a fleet file; every problem is a ConfigError naming file:line key.path."""
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{name}: cannot read the fleet file: {e}") from None
    return parse_fleet(text, name=name, base_dir=Path(name).resolve().parent)


def parse_fleet(text: str, *, name: str = "fleet.yaml", base_dir: Path | None = None) -> Fleet:
    return _Reader(name, base_dir or Path.cwd()).fleet(compose(text, name))


class _Reader:
    """Walks the YAML node tree; `path` is the key path used in messages."""

    def __init__(self, name: str, base_dir: Path):
        self.name, self.base_dir = name, base_dir
        self._key_of: dict[int, yaml.Node] = {}  # id(value node) -> its key node

    def line(self, node) -> int:
        """A block collection starts on its first child's line; point at the key that names it."""
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            node = self._key_of.get(id(node), node)
        return node.start_mark.line + 1

    def error(self, node, path: tuple, message: str) -> ConfigError:
        line = f":{self.line(node)}" if node is not None else ""
        where = f" {'.'.join(map(str, path))}" if path else ""
        return ConfigError(f"{self.name}{line}{where}: {message}")

    # -- node helpers ------------------------------------------------------------------------
    def mapping(self, node, path, allowed: tuple[str, ...]) -> dict[str, yaml.Node]:
        """Mapping node -> {key: value node}; unknown and repeated keys are errors."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, path, f"expected a mapping, got {_kind(node)}")
        out: dict[str, yaml.Node] = {}
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode) or knode.tag != "tag:yaml.org,2002:str":
                raise self.error(knode, path, f"keys must be plain names, got {_kind(knode)}")
            key = knode.value
            if allowed and key not in allowed:
                raise self.error(knode, (*path, key), f"unknown key: {did_you_mean(key, allowed)}")
            if key in out:
                raise self.error(knode, (*path, key), "given twice")
            out[key] = vnode
            self._key_of[id(vnode)] = knode
        return out

    def scalar(self, node, path):
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, path, f"expected a single value, got {_kind(node)}")
        try:
            return scalar_value(node)
        except ValueError as e:
            raise self.error(node, path, str(e)) from None

    def string(self, node, path, pattern: re.Pattern | None = None, what: str = "a string") -> str:
        value = self.scalar(node, path)
        if not isinstance(value, str) or not value:
            raise self.error(node, path, f"expected {what}, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise self.error(node, path, f"expected {what}, got {value!r}")
        return value

    def integer(self, node, path, lo: int, hi: int) -> int:
        value = self.scalar(node, path)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(node, path, f"expected an integer, got {node.value!r}")
        if not lo <= value <= hi:
            raise self.error(node, path, f"expected an integer from {lo} to {hi}, got {value}")
        return value

    def names(self, node, path, check: Callable | None = None) -> tuple[str, ...]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, path, f"expected a list, got {_kind(node)}")
        out: list[str] = []
        for i, item in enumerate(node.value):
            value = self.string(item, (*path, i), _NAME, "a name (letters, digits, '.', '_', '-')")
            if value in out:
                raise self.error(item, (*path, i), f"'{value}' is listed twice")
            if check is not None:
                check(item, (*path, i), value)
            out.append(value)
        return tuple(out)

    # -- sections ------------------------------------------------------------------------------
    def fleet(self, root) -> Fleet:
        if root is None:
            raise ConfigError(f"{self.name}: the fleet file is empty; it needs at least 'devices'")
        top = self.mapping(root, (), ("defaults", "devices", "groups", "deployments"))
        if "devices" not in top:
            raise self.error(root, (), "missing key 'devices'")
        defaults = dict(_BUILTIN_DEFAULTS)
        if "defaults" in top:
            node = top["defaults"]
            for key, vnode in self.mapping(node, ("defaults",), tuple(_BUILTIN_DEFAULTS)).items():
                defaults[key] = self.field(key, vnode, ("defaults", key))
        devices = self.devices(top["devices"], defaults)
        groups = self.groups(top.get("groups"), devices)
        deployments = self.deployments(top.get("deployments"), groups)
        return Fleet(self.name, MappingProxyType(defaults), MappingProxyType(devices),
                     MappingProxyType(groups), deployments)

    def field(self, key: str, node, path):
        if key == "port":
            return self.integer(node, path, 1, 65535)
        if key == "connect_timeout":
            value = self.scalar(node, path)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600:
                raise self.error(node, path, f"expected seconds, a number above 0 and at most 600, got {node.value!r}")
            return float(value)
        if key == "user":
            return self.string(node, path, _USER, "a user name")
        if key == "key":
            raw = self.string(node, path, None, "a key file path")
            return os.fspath(self.base_dir / os.path.expanduser(raw))
        if key == "target":
            value = self.string(node, path, None, "a target name")
            if value not in TARGET_NAMES:
                raise self.error(node, path, f"unknown target '{value}': {did_you_mean(value, TARGET_NAMES)}")
            return value
        if key == "tags":
            return self.names(node, path)
        if key == "host_key":
            return self.host_key(node, path)
        raise AssertionError(key)

    def host_key(self, node, path) -> str:
        value = " ".join(self.string(node, path, None, "a host key").split())
        if _FINGERPRINT.match(value):
            return value
        parts = value.split(" ")
        if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
            try:
                base64.b64decode(parts[1], validate=True)
            except binascii.Error:
                pass
            else:
                return f"{parts[0]} {parts[1]}"
        raise self.error(node, path, "expected a public key ('ssh-ed25519 AAAA...', as in "
                         "/etc/ssh/ssh_host_ed25519_key.pub) or a fingerprint ('SHA256:...', 43 characters)")

    def devices(self, node, defaults) -> dict[str, Device]:
        keys = ("host", "port", "user", "key", "target", "tags", "host_key", "connect_timeout")
        entries = self.mapping(node, ("devices",), ())
        if not entries:
            raise self.error(node, ("devices",), "no devices listed")
        out: dict[str, Device] = {}
        for dev_name, dnode in entries.items():
            path = ("devices", dev_name)
            if not _NAME.match(dev_name):
                raise self.error(dnode, path, "a device name uses letters, digits, '.', '_' and '-' only")
            if isinstance(dnode, yaml.ScalarNode):
                fields = self.shorthand(dnode, path)
            else:
                given = self.mapping(dnode, path, keys)
                if "host" not in given:
                    raise self.error(dnode, path, "missing key 'host'")
                fields = self.shorthand(given.pop("host"), (*path, "host"))
                for key, vnode in given.items():
                    if key in fields:
                        raise self.error(vnode, (*path, key),
                                         f"{key} is given twice (also in the host shorthand '{fields['host_text']}')")
                    fields[key] = self.field(key, vnode, (*path, key))
            fields.pop("host_text")
            values = {**defaults, **fields}
            out[dev_name] = Device(
                name=dev_name, host=values["host"], port=values["port"], user=values["user"],
                key=values["key"], target=values["target"], tags=tuple(values.get("tags", ())),
                host_key=values.get("host_key"), where=f"{self.name}:{self.line(dnode)}",
                connect_timeout=values["connect_timeout"],
            )
        return out

    def shorthand(self, node, path) -> dict:
        """'[user@]host[:port]' (IPv6 in brackets) -> {host, user?, port?}."""
        text = self.string(node, path, None, "a host ([user@]host[:port])")
        fields: dict = {"host_text": text}
        rest = text
        if "@" in rest:
            user, _, rest = rest.partition("@")
            if not _USER.match(user):
                raise self.error(node, path, f"expected a user name before '@', got {user!r}")
            fields["user"] = user
        port = None
        if rest.startswith("["):
            host, sep, tail = rest[1:].partition("]")
            if not sep or (tail and not tail.startswith(":")):
                raise self.error(node, path, f"expected [ipv6]:port, got {text!r}")
            port = tail[1:] if tail else None
        elif rest.count(":") == 1:
            host, _, port = rest.partition(":")
        else:
            host = rest
        if not _HOST.match(host or "") or host.startswith("-"):
            raise self.error(node, path, f"expected a host name or address, got {host!r}")
        fields["host"] = host
        if port is not None:
            if not port.isdigit() or not 1 <= int(port) <= 65535:
                raise self.error(node, path, f"expected a port from 1 to 65535 after ':', got {port!r}")
            fields["port"] = int(port)
        return fields

    def groups(self, node, devices: dict[str, Device]) -> dict[str, Group]:
        if node is None:
            return {}
        out: dict[str, Group] = {}
        all_tags = {t for d in devices.values() for t in d.tags}
        for gname, gnode in self.mapping(node, ("groups",), ()).items():
            path = ("groups", gname)
            if gname == ALL:
                raise self.error(gnode, path, "'all' is the implicit group of every device; pick another name")
            if not _NAME.match(gname):
                raise self.error(gnode, path, "a group name uses letters, digits, '.', '_' and '-' only")
            spec = self.mapping(gnode, path, ("devices", "match"))
            if len(spec) != 1:
                raise self.error(gnode, path, "a group has exactly one of 'devices' (a list) or 'match' (tags)")
            if "devices" in spec:
                def known(item, ipath, value):
                    if value not in devices:
                        raise self.error(item, ipath, f"no device '{value}': {did_you_mean(value, devices)}")
                members = self.names(spec["devices"], (*path, "devices"), known)
                out[gname] = Group(gname, members)
            else:
                match = self.mapping(spec["match"], (*path, "match"), ("tags",))
                if "tags" not in match:
                    raise self.error(spec["match"], (*path, "match"), "missing key 'tags'")

                def used(item, ipath, value):
                    if value not in all_tags:
                        raise self.error(item, ipath, f"no device has tag '{value}': {did_you_mean(value, all_tags)}")
                tags = self.names(match["tags"], (*path, "match", "tags"), used)
                if not tags:
                    raise self.error(match["tags"], (*path, "match", "tags"), "list at least one tag")
                members = tuple(d.name for d in devices.values() if set(tags) <= set(d.tags))
                if not members:
                    raise self.error(match["tags"], (*path, "match", "tags"),
                                     f"no device carries all of {', '.join(tags)}")
                out[gname] = Group(gname, members, tags)
            if not out[gname].devices:
                raise self.error(gnode, path, "the group is empty")
        return out

    def deployments(self, node, groups: dict[str, Group]) -> tuple[Deployment, ...]:
        if node is None:
            return ()
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, ("deployments",), f"expected a list, got {_kind(node)}")
        out = []
        for i, dnode in enumerate(node.value):
            path = ("deployments", i)
            spec = self.mapping(dnode, path, ("group", "model", "variants"))
            for key in ("group", "model", "variants"):
                if key not in spec:
                    raise self.error(dnode, path, f"missing key '{key}'")
            group = self.string(spec["group"], (*path, "group"), _NAME, "a group name")
            if group != ALL and group not in groups:
                raise self.error(spec["group"], (*path, "group"),
                                 f"no group '{group}': {did_you_mean(group, [ALL, *groups])}")
            model = self.string(spec["model"], (*path, "model"), None, "a model name or file")

            def variant(item, ipath, value):
                if value not in VARIANTS:
                    raise self.error(item, ipath, f"unknown variant '{value}': {did_you_mean(value, VARIANTS)}")
            variants = self.names(spec["variants"], (*path, "variants"), variant)
            if not variants:
                raise self.error(spec["variants"], (*path, "variants"), "list at least one variant")
            out.append(Deployment(group, model, variants))
        return tuple(out)


def _kind(node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return repr(node.value) if node is not None else "nothing"
