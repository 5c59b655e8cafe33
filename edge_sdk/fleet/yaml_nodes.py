"""YAML text -> a node tree, safely: plain values, lists and mappings only, nested at most MAX_DEPTH.

PyYAML's own composer recurses once per nesting level (100k-deep brackets raise RecursionError)
and accepts any tag, which the constructor then turns into a traceback (`!!int abc` is a
ValueError, `!!timestamp notadate` an AttributeError) or worse (`!!python/name:os.system`). Here
the events are composed by a loop with an explicit depth limit, every tag outside the core schema
is refused, and each problem is a ConfigError naming file:line. The events come from libyaml's C
parser when PyYAML was built with it (a 324k-device fleet file composes several times faster),
else from the pure-Python parser: both give the same events and marks.
"""
from __future__ import annotations

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (AliasEvent, DocumentEndEvent, DocumentStartEvent, MappingEndEvent, MappingStartEvent,
                         ScalarEvent, SequenceEndEvent, SequenceStartEvent, StreamEndEvent, StreamStartEvent)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from edge_sdk.errors import ConfigError

MAX_DEPTH = 64
_CORE = "tag:yaml.org,2002:"
SCALAR_TAGS = frozenset(_CORE + t for t in ("str", "int", "float", "bool", "null"))
_TAGS = {ScalarNode: SCALAR_TAGS, SequenceNode: frozenset({_CORE + "seq"}), MappingNode: frozenset({_CORE + "map"})}
try:
    from yaml.cyaml import CParser as _Parser  # libyaml's C parser
except ImportError:  # PyYAML built without libyaml
    _Parser = yaml.SafeLoader
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCT = SafeConstructor()


def uses_libyaml() -> bool:
    return _Parser is not yaml.SafeLoader


def compose(text: str, name: str):
    """The single document's root node (None for an empty file); ConfigError names file:line."""
    parser = _Parser(text)
    try:
        return _Composer(parser, name).document()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{name}{line}: not valid YAML: {e.problem or e.context}") from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow: it has a position, not a mark
        line = text.count("\n", 0, e.position) + 1
        raise ConfigError(f"{name}:{line}: not valid YAML: character U+{_codepoint(e.character):04X} is not "
                          f"allowed (position {e.position})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{name}: not valid YAML: {e}") from None
    finally:
        parser.dispose()


def scalar_value(node: ScalarNode):
    """The Python value of a core-schema scalar; ValueError when its text does not fit its tag."""
    tag = node.tag
    if tag == _CORE + "str":
        return node.value
    try:
        if tag == _CORE + "int":
            return _CONSTRUCT.construct_yaml_int(node)
        if tag == _CORE + "float":
            return _CONSTRUCT.construct_yaml_float(node)
        if tag == _CORE + "bool":
            return _CONSTRUCT.construct_yaml_bool(node)
    except (ValueError, KeyError, ConstructorError):
        raise ValueError(f"{node.value!r} is not a valid {_short(tag)}") from None
    if tag == _CORE + "null":
        return None
    raise ValueError(f"tag {_short(tag)} is not allowed")


class _Composer:
    def __init__(self, parser, name: str):
        self.parser, self.name = parser, name
        self.anchors: dict[str, yaml.Node] = {}

    def error(self, mark, message: str) -> ConfigError:
        return ConfigError(f"{self.name}:{mark.line + 1}: {message}")

    def document(self):
        get = self.parser.get_event
        if not isinstance(get(), StreamStartEvent):
            raise ConfigError(f"{self.name}: not a YAML stream")
        event = get()
        if isinstance(event, StreamEndEvent):
            return None
        if not isinstance(event, DocumentStartEvent):
            raise self.error(event.start_mark, "not valid YAML: expected a document")
        root = self.node()
        get()  # DocumentEndEvent: the parser only yields it here
        event = get()
        if not isinstance(event, StreamEndEvent):
            raise self.error(event.start_mark, "expected a single document in the fleet file, found another")
        return root

    def node(self):
        """Compose one node with an explicit stack (no recursion, so no depth is too deep to report)."""
        get = self.parser.get_event
        stack: list[tuple[yaml.Node, list]] = []  # (collection node, its pending key or items)
        while True:
            event = get()
            if isinstance(event, (SequenceEndEvent, MappingEndEvent)):
                done, pending = stack.pop()
                if isinstance(done, MappingNode) and pending:
                    raise self.error(event.start_mark, "not valid YAML: a mapping key has no value")
                done.end_mark = event.end_mark
            elif isinstance(event, AliasEvent):
                done = self.anchors.get(event.anchor)
                if done is None:
                    raise self.error(event.start_mark, f"not valid YAML: unknown alias '*{event.anchor}'")
            elif isinstance(event, ScalarEvent):
                done = self.make(ScalarNode, event, event.value)
            elif isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                kind = SequenceNode if isinstance(event, SequenceStartEvent) else MappingNode
                if len(stack) >= MAX_DEPTH:
                    raise self.error(event.start_mark, f"nested more than {MAX_DEPTH} levels deep; a fleet "
                                     "file needs a few")
                stack.append((self.make(kind, event, []), []))
                continue
            elif isinstance(event, DocumentEndEvent):  # pragma: no cover - the parser balances events
                raise self.error(event.start_mark, "not valid YAML: the document ended early")
            else:  # pragma: no cover
                raise self.error(event.start_mark, f"not valid YAML: unexpected {type(event).__name__}")
            if not stack:
                return done
            self.attach(stack[-1], done)

    @staticmethod
    def attach(top, child) -> None:
        parent, pending = top
        if isinstance(parent, SequenceNode):
            parent.value.append(child)
        elif pending:
            parent.value.append((pending.pop(), child))
        else:
            pending.append(child)

    def make(self, kind, event, value):
        tag = event.tag
        if tag is None or tag == "!":
            tag = _RESOLVER.resolve(kind, value if kind is ScalarNode else None, event.implicit)
            if kind is ScalarNode and tag not in SCALAR_TAGS:  # an implicit date, '<<' or '=': plain text
                tag = _CORE + "str"
        if tag not in _TAGS[kind]:
            raise self.error(event.start_mark, f"YAML tag {_short(tag)} is not allowed here; a fleet file holds "
                             "plain values, lists and mappings only")
        if kind is ScalarNode:
            node = ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style)
        else:
            node = kind(tag, value, event.start_mark, event.end_mark, flow_style=event.flow_style)
        if event.anchor is not None:
            if event.anchor in self.anchors:
                raise self.error(event.start_mark, f"not valid YAML: anchor '&{event.anchor}' is defined twice")
            self.anchors[event.anchor] = node
        return node


def _short(tag: str) -> str:
    return "'!!" + tag[len(_CORE):] + "'" if tag.startswith(_CORE) else repr(tag)


def _codepoint(c) -> int:
    return c if isinstance(c, int) else ord(c[:1] or "\0")
