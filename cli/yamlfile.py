"""YAML loading that remembers line numbers, so every complaint about a file says file:line.

`load(path)` returns the data and a map from key path (a tuple of keys and indices) to the
1-based line where that node starts. Syntax errors and duplicate keys (which PyYAML would
silently resolve to the last value) become usage errors that name the file and line.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import Any

import yaml

from cli.errors import CliError, usage

KeyPath = tuple[str | int, ...]


@dataclass
class YamlDoc:
    """A parsed YAML file and where each node is."""

    path: pathlib.Path
    text: str
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, key: KeyPath) -> int:
        """The line of `key`, or of its nearest parent that has one (1 for the document)."""
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), 1)

    def error(self, key: KeyPath, problem: str, *, hint: str | None = None) -> CliError:
        """A usage error pointing at `key` in this file."""
        return usage(f"{self.path}:{self.line(key)}: {problem}", hint=hint)


def _walk(node: yaml.Node, key: KeyPath, lines: dict[KeyPath, int], path: pathlib.Path) -> None:
    lines[key] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k_node, v_node in node.value:
            name = str(k_node.value)
            line = k_node.start_mark.line + 1
            if name in seen:
                raise usage(f"{path}:{line}: duplicate key `{name}` (first on line {seen[name]})")
            seen[name] = line
            lines[(*key, name)] = line
            _walk(v_node, (*key, name), lines, path)
            lines[(*key, name)] = line  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*key, i), lines, path)


def parse(text: str, path: pathlib.Path) -> YamlDoc:
    """Parse `text` (the content of `path`) into a YamlDoc."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = exc.problem or exc.context or "invalid YAML"
        raise usage(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise usage(f"{path}: invalid YAML: {exc}") from None
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _walk(node, (), lines, path)
    return YamlDoc(path=path, text=text, data=data, lines=lines)


def load(path: pathlib.Path) -> YamlDoc:
    """Read and parse `path`; unreadable files are usage errors too."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise usage(f"{path} not found") from None
    except UnicodeDecodeError:
        raise usage(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise usage(f"cannot read {path}: {exc.strerror}") from None
    return parse(text, path)
