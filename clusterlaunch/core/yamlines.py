"""YAML loading that remembers line numbers, so errors can point at them, within limits.

PyYAML's safe loader forgets where values came from. This loader builds
ordinary dicts and lists, but mappings are a ``dict`` subclass that records the
line of the mapping and of each key, and duplicate keys are reported instead of
silently keeping the last one.

It also bounds what a small file can cost: collections nest at most
:data:`~clusterlaunch.core.limits.MAX_YAML_DEPTH` deep (5,000 levels overflowed the
Python stack) and the document has at most
:data:`~clusterlaunch.core.limits.MAX_YAML_NODES` nodes with every alias counted at
its full size (a 368-byte alias bomb took 48 s and 3.2 GB). Events come from
libyaml when PyYAML has it (1 MiB of ``x: 1`` lines: 1.2 s instead of 21 s);
nodes are composed here, so the limits hold before anything is built.

Integers must be plain decimal: an unquoted ``0755``, ``0x1F``, ``1:30:00``,
``1_000`` or ``08`` becomes a :class:`~clusterlaunch.core.yamlnumbers.NumberForm`,
which the reader refuses. Mapping keys are the text as written (``yes:`` is not True).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, Event
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from clusterlaunch.core.limits import MAX_YAML_DEPTH, MAX_YAML_NODES
from clusterlaunch.core.yamlnumbers import DECIMAL, NUMBER_TEXT, SHOWN, NumberForm, yaml12_number


class PythonEvents(Reader, Scanner, Parser):
    """PyYAML's pure-Python event source, for a PyYAML built without libyaml."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


try:
    from yaml._yaml import CParser as _EventSource
except ImportError:
    _EventSource = PythonEvents  # type: ignore[assignment, misc]


class LineMap(dict[str, Any]):
    """A mapping from YAML that knows its own line and its keys' lines (1-based), and the
    text of each value YAML read as something else (``yes``: True), for messages."""

    line: int
    key_lines: dict[str, int]
    texts: dict[str, str]


class LineList(list[Any]):
    """A list from YAML that knows the line of each item (1-based), for messages about
    an item that is no mapping (``- node0``) and so has no line of its own."""

    lines: list[int]


class DuplicateKeyError(Exception):
    """The same key appears twice in one YAML mapping."""

    def __init__(self, key: str, line: int, first_line: int) -> None:
        self.key = key
        self.line = line
        self.first_line = first_line
        super().__init__(f"duplicate key {key!r} (first at line {first_line})")


class YamlLimitError(Exception):
    """The document exceeds a size limit; ``line`` is where it was noticed (1-based)."""

    def __init__(self, line: int, problem: str) -> None:
        self.line = line
        super().__init__(problem)


class _Limited(Composer):
    """Composes within the limits; mixed in before an event source and the safe constructor."""

    def __init__(self, stream: str) -> None:
        super().__init__()
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[Node, int] = {}  # expanded size of every finished node
        self.tagged: set[Node] = set()  # scalars written with a tag (!!str 0755): as asked

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()  # type: ignore[attr-defined]
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias is PyYAML's own error
                if target not in self._sizes:
                    raise YamlLimitError(
                        _line(event), f"alias *{event.anchor} is used inside its own anchor"
                    )
                self._grow(self._sizes[target], event)
            return self._composed(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise YamlLimitError(
                _line(event), f"nested deeper than {MAX_YAML_DEPTH} levels (the limit)"
            )
        start = self._nodes
        self._grow(1, event)
        try:
            node = self._composed(parent, index)
        finally:
            self._depth -= 1
        self._sizes[node] = self._nodes - start
        return node

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        tag = self.peek_event().tag  # type: ignore[attr-defined]
        node = super().compose_scalar_node(anchor)
        if tag is not None:
            self.tagged.add(node)
        return node

    def _composed(self, parent: Node | None, index: Any) -> Node:
        node = super().compose_node(parent, index)
        assert node is not None  # PyYAML returns None only past the end of the stream
        return node

    def _grow(self, count: int, event: Event) -> None:
        self._nodes += count
        if self._nodes > MAX_YAML_NODES:
            raise YamlLimitError(
                _line(event),
                f"more than {MAX_YAML_NODES:,} YAML values (aliases counted in full), "
                "the limit for a hosts file; use host ranges and a defaults: block",
            )

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # PyYAML lets ValueError escape for a bad date or an integer of 5,000 digits.
        try:
            return super().construct_object(node, deep)  # type: ignore[misc]
        except (ValueError, OverflowError) as exc:
            raise ConstructorError(None, None, str(exc), node.start_mark) from None


def loader_class(events: type) -> type:
    """A safe loader on ``events`` (libyaml's or PyYAML's parser) with line maps and limits."""

    class Loader(_Limited, events, SafeConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            events.__init__(self, stream)  # type: ignore[misc]
            _Limited.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    Loader.add_constructor(Resolver.DEFAULT_MAPPING_TAG, _construct_line_map)
    Loader.add_constructor(Resolver.DEFAULT_SEQUENCE_TAG, _construct_line_list)
    Loader.add_constructor("tag:yaml.org,2002:str", _construct_text)
    Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
    return Loader


def _line(event: Event) -> int:
    return 1 + (event.start_mark.line if event.start_mark is not None else 0)


def _construct_text(loader: Any, node: ScalarNode) -> str | NumberForm:
    value = _sendable(node)
    # Unquoted 08, 0o17; "!!str 08" asks for the text, which every reader gives.
    if not node.style and node not in loader.tagged and NUMBER_TEXT.fullmatch(value):
        return NumberForm(value, node.start_mark.line + 1, yaml12_number(value), "YAML 1.2")
    return value


def _sendable(node: ScalarNode) -> str:
    """The scalar's text, as written (quotes and escapes resolved), if a host can be sent it."""
    value: str = node.value
    # "\ud800" and "\0" escapes are valid YAML, but no host can be sent them.
    if "\x00" in value or any("\ud800" <= char <= "\udfff" for char in value):
        raise ConstructorError(
            None, None, "a NUL or a lone surrogate (\\ud800-\\udfff) in a string", node.start_mark
        )
    return value


def _key_text(loader: Any, node: Node) -> str:
    """A mapping key as written: a key names something (a field, a variable), so ``yes:``,
    ``~:``, ``Null:`` and ``.inf:`` stay that text, not YAML's True, None and inf."""
    if isinstance(node, ScalarNode):
        return _sendable(node)
    return str(loader.construct_object(node, deep=True))  # [a, b]: a name no field takes


def _construct_int(loader: Any, node: ScalarNode) -> int | NumberForm:
    number = loader.construct_yaml_int(node)
    text = loader.construct_scalar(node)
    if DECIMAL.fullmatch(text):
        return int(number)
    shown = number if abs(number) < 10**SHOWN else None
    return NumberForm(text, node.start_mark.line + 1, shown)


def _construct_line_list(loader: Any, node: Node) -> Any:
    result = LineList()
    result.lines = [item.start_mark.line + 1 for item in node.value]
    yield result
    result.extend(loader.construct_object(item, deep=True) for item in node.value)


def item_line(items: object, index: int) -> int | None:
    """Line of ``items[index]`` when the list came from YAML."""
    return items.lines[index] if isinstance(items, LineList) else None


def _construct_line_map(loader: Any, node: MappingNode) -> Any:
    result = LineMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    result.texts = {}
    yield result
    # Duplicates are judged among the keys written here; keys merged in with
    # "<<" may legitimately be overridden.
    written: dict[str, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key_text = _key_text(loader, key_node)
        line = key_node.start_mark.line + 1
        if key_text in written:
            raise DuplicateKeyError(key_text, line, written[key_text])
        written[key_text] = line
    loader.flatten_mapping(node)  # merged pairs first, so written keys win below
    for key_node, value_node in node.value:
        key_text = _key_text(loader, key_node)
        result.key_lines[key_text] = key_node.start_mark.line + 1
        value = result[key_text] = loader.construct_object(value_node, deep=True)
        result.texts.pop(key_text, None)  # a written key overriding a merged one
        if isinstance(value_node, ScalarNode) and not isinstance(value, str | NumberForm):
            result.texts[key_text] = value_node.value


_LOADER = loader_class(_EventSource)


def load_yaml(text: str) -> Any:
    """Parse ``text`` safely; mappings come back as :class:`LineMap`.

    Raises ``yaml.YAMLError`` for syntax errors, :class:`DuplicateKeyError`
    and :class:`YamlLimitError`.
    """
    return yaml.load(text, Loader=_LOADER)


def describe_yaml_error(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """(line, one-line problem) for a PyYAML error, the same from libyaml and from Python."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    kind = "YAML value" if isinstance(exc, ConstructorError) else "YAML syntax"
    if mark is None:
        return None, f"{kind} error: {problem}"
    if problem == "but found another document":  # a second "---": what PyYAML says is opaque
        problem = "a second document (---); a hosts file is one YAML document: remove that ---"
    if problem == "found character that cannot start any token":  # libyaml leaves out which
        lines = text.splitlines()
        row = lines[mark.line] if mark.line < len(lines) else ""
        if mark.column < len(row):
            problem = f"found character {row[mark.column]!r} that cannot start any token"
    return mark.line + 1, f"{kind} error: {problem}"


def written(mapping: object, key: str) -> str | None:
    """The text of ``mapping[key]`` when YAML read it as something else (``~``, ``yes``)."""
    return mapping.texts.get(key) if isinstance(mapping, LineMap) else None


def key_line(mapping: object, key: str) -> int | None:
    """Line of ``key`` in ``mapping`` when it came from YAML, else the mapping's line."""
    if isinstance(mapping, LineMap):
        return mapping.key_lines.get(key, mapping.line)
    return None
