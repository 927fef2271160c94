"""Front matter of definition and skill files, read as forgivingly as Claude Code reads them.

Strict YAML first. When that fails, a line-based reading of the top-level `key: value` pairs: the
value taken as written to the end of the line (an unquoted `Triggers on: 'x', 'y'` stays text),
indented continuation lines joined, `- item` lines under an empty key read as a list. Each thing
that is not as it should be becomes a `CatalogueWarning` naming the file (relative to the folder
it came from, never the server's absolute path), the line when it is known, and the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

MAX_FILE_BYTES = 1_000_000
"""A definition or skill file larger than this is skipped: it cannot be meant as one."""


@dataclass(frozen=True, slots=True)
class CatalogueWarning:
    """Something wrong with one file of the catalogue: shown by `delegate agents list`, `GET
    /agents`, the server log and a run's events, always the same way."""

    file: str
    """The file, relative to the folder it came from (`.claude/agents/x.md`, `agents/x.md`)."""
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "reason": self.reason}


class Unreadable(Exception):
    """A file that cannot be a definition at all: it is skipped with this warning."""

    def __init__(self, warning: CatalogueWarning) -> None:
        super().__init__(str(warning))
        self.warning = warning


@dataclass(frozen=True, slots=True)
class FrontMatter:
    fields: dict[str, Any]
    body: str
    warnings: list[CatalogueWarning]


_PLAIN = re.compile(r"[^\[{'\"].*")
_YAML_SCALAR = re.compile(r"[-+]?(?:\d[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)|true|false|yes|no|on|off|null|~", re.I)
_OPEN = re.compile(r"\A\ufeff?---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*\r?$", re.M)
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")


def display_name(path: Path, folder: Path, label: str) -> str:
    """How warnings and `source` name `path`: `label` (the folder as users know it) and the path
    inside the folder, never the absolute path."""
    try:
        inside = path.relative_to(folder).as_posix()
    except ValueError:
        inside = path.name
    return f"{label.rstrip('/')}/{inside}" if label else inside


def read_front_matter(path: Path, name: str, kind: str) -> FrontMatter:
    """The front matter and body of the Markdown file at `path`, shown as `name` in warnings.
    Raises `Unreadable` for a file that is not UTF-8 text, has no front matter, or none we can read."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise Unreadable(CatalogueWarning(name, f"cannot read the file ({exc.strerror}); skipped")) from None
    if len(raw) > MAX_FILE_BYTES:
        raise Unreadable(CatalogueWarning(name, f"larger than {MAX_FILE_BYTES:,} bytes; not a {kind}; skipped"))
    if b"\0" in raw:
        raise Unreadable(CatalogueWarning(name, f"a binary file, not a {kind}; skipped"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(CatalogueWarning(name, f"not UTF-8 text (byte {exc.start}); skipped")) from None
    return parse_front_matter(text, name, kind)


def parse_front_matter(text: str, name: str, kind: str) -> FrontMatter:
    opening = _OPEN.match(text)
    closing = _CLOSE.search(text, opening.end()) if opening else None
    if opening is None or closing is None:
        raise Unreadable(
            CatalogueWarning(
                name, f"no front matter: a {kind} starts with 'name' and 'description' between '---' lines; skipped", 1
            )
        )
    block, body = text[opening.end() : closing.start()].rstrip("\r\n"), text[closing.end() :].strip()
    warnings: list[CatalogueWarning] = []
    yaml = _yaml()
    try:
        loaded: object = yaml.load(block, Loader=_loader(yaml)) if block.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = 2 + mark.line if mark is not None else None
        problem = getattr(exc, "problem", None) or "not valid YAML"
        fields = _read_lines(block, name, warnings)
        warnings.insert(
            0, CatalogueWarning(name, f"front matter is not strict YAML ({problem}); read line by line", line)
        )
        return FrontMatter(fields, body, warnings)
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise Unreadable(CatalogueWarning(name, "front matter is not a mapping of 'key: value' fields; skipped", 2))
    return FrontMatter({str(k): v for k, v in cast(dict[object, Any], loaded).items()}, body, warnings)


def _yaml() -> Any:
    """PyYAML, imported when a file is first read: a process that reads no definition or skill
    file does without it (about 0.9 MB)."""
    import yaml

    return yaml


def _loader(yaml: Any) -> Any:
    """libyaml's safe loader when PyYAML was built with it (ten times faster), else the Python one."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_lines(block: str, name: str, warnings: list[CatalogueWarning]) -> dict[str, Any]:
    """Top-level `key: value` pairs of a block that is not strict YAML (see the module's docstring)."""
    fields: dict[str, Any] = {}
    key: str | None = None
    for number, line in enumerate(block.splitlines(), start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        top = _KEY.match(line)
        if top is not None:
            key = str(top.group(1))
            fields[key] = _scalar((top.group(2) or "").strip())
            continue
        if key is None or not line[:1].isspace():
            unread = line.strip()[:60]
            warnings.append(CatalogueWarning(name, f"cannot read {unread!r} as 'key: value'; ignored", number))
            continue
        item = line.strip()
        value = fields[key]
        if item.startswith("- ") and (value == "" or isinstance(value, list)):
            fields[key] = [*cast(list[Any], value or []), _scalar(item[2:].strip())]
        elif isinstance(value, str):
            fields[key] = f"{value} {item}" if value else item
        else:
            fields[key] = f"{value} {item}"
    return fields


def _scalar(value: str) -> Any:
    """A value as written, except numbers, booleans, `[a, b]` lists and quoted strings, which
    mean what YAML says they mean."""
    if not value or value in ("|", ">", "|-", ">-", "|+", ">+"):
        return ""  # a block scalar: its indented lines follow
    if _PLAIN.fullmatch(value) and not _YAML_SCALAR.fullmatch(value):
        return value  # plain text: the common case, no parser needed
    yaml = _yaml()
    try:
        parsed: object = yaml.load(value, Loader=_loader(yaml))
    except yaml.YAMLError:
        return value
    if isinstance(parsed, (list, int, float)) or (isinstance(parsed, str) and value[0] in "'\""):
        return cast(Any, parsed)
    return value
