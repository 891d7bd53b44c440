"""YAML loading that remembers line numbers, so errors can point at them.

PyYAML's safe loader forgets where values came from. This loader builds
ordinary dicts and lists, but mappings are a ``dict`` subclass that records the
line of the mapping and of each key, and duplicate keys are reported instead of
silently keeping the last one.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode


class LineMap(dict[str, Any]):
    """A mapping from YAML that knows its own line and its keys' lines (1-based)."""

    line: int
    key_lines: dict[str, int]


class DuplicateKeyError(Exception):
    """The same key appears twice in one YAML mapping."""

    def __init__(self, key: str, line: int, first_line: int) -> None:
        self.key = key
        self.line = line
        self.first_line = first_line
        super().__init__(f"duplicate key {key!r} (first at line {first_line})")


class _LineLoader(yaml.SafeLoader):
    """Safe loader whose mappings are :class:`LineMap`."""


def _construct_line_map(loader: _LineLoader, node: MappingNode) -> Any:
    result = LineMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    yield result
    # Duplicates are judged among the keys written here; keys merged in with
    # "<<" may legitimately be overridden.
    written: dict[str, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key_text = str(loader.construct_object(key_node, deep=True))
        line = key_node.start_mark.line + 1
        if key_text in written:
            raise DuplicateKeyError(key_text, line, written[key_text])
        written[key_text] = line
    loader.flatten_mapping(node)  # merged pairs first, so written keys win below
    for key_node, value_node in node.value:
        key_text = str(loader.construct_object(key_node, deep=True))
        result.key_lines[key_text] = key_node.start_mark.line + 1
        result[key_text] = loader.construct_object(value_node, deep=True)


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_line_map)


def load_yaml(text: str) -> Any:
    """Parse ``text`` safely; mappings come back as :class:`LineMap`.

    Raises ``yaml.YAMLError`` for syntax errors and :class:`DuplicateKeyError`.
    """
    return yaml.load(text, Loader=_LineLoader)


def key_line(mapping: object, key: str) -> int | None:
    """Line of ``key`` in ``mapping`` when it came from YAML, else the mapping's line."""
    if isinstance(mapping, LineMap):
        return mapping.key_lines.get(key, mapping.line)
    return None
