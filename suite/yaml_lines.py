"""Load YAML while keeping the line of every node, so spec errors can name the line.

`load_with_lines(text)` returns the data (as `yaml.safe_load` would) and a map from each node's
path (`("benchmarks", 2, "params", "n")`) to its 1-based line. Duplicate mapping keys, which
PyYAML silently resolves to the last one, are rejected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

NodePath = tuple[str | int, ...]


class YamlInputError(Exception):
    """The text is not valid YAML (or repeats a key); `line` is 1-based where known."""

    def __init__(self, message: str, line: int | None, path: NodePath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path


@dataclass(frozen=True)
class LoadedYaml:
    data: Any
    lines: dict[NodePath, int] = field(default_factory=dict)

    def line_of(self, path: NodePath) -> int | None:
        """Line of the node at `path`, or of its nearest ancestor that has one."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]


class _Loader(yaml.SafeLoader):
    """SafeLoader; a subclass so that nothing registered here leaks into PyYAML's own loader."""


def _walk(node: yaml.Node, path: NodePath, lines: dict[NodePath, int], stack: set[int]) -> None:
    if id(node) in stack:  # a recursive alias: its lines are already recorded
        return
    stack.add(id(node))
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = key_node.value
            if key == "<<":  # merge key: its entries are merged by the constructor
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise YamlInputError(
                    f"duplicate key {key!r} (first defined on line {seen[key]})", line, path + (key,)
                )
            seen[key] = line
            lines[path + (key,)] = line
            _walk(value_node, path + (key,), lines, stack)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, path + (index,), lines, stack)
    stack.discard(id(node))


def load_with_lines(text: str) -> LoadedYaml:
    """Parse one YAML document; raise YamlInputError with the line on a syntax error."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        raise YamlInputError(f"invalid YAML: {what}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise YamlInputError(f"invalid YAML: {exc}", None) from None
    finally:
        loader.dispose()
    lines: dict[NodePath, int] = {}
    if node is not None:
        _walk(node, (), lines, set())
    return LoadedYaml(data=data, lines=lines)


def format_path(path: NodePath) -> str:
    """`("benchmarks", 2, "params", "n")` -> `benchmarks[2].params.n`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
