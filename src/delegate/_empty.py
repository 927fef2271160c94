"""New empty containers, as dataclass fields' factories.

`field(default_factory=list[Artifact])` calls typing's alias (190 ns a call against 50 for a plain
function), and a fan-out makes several records, messages and contexts a subagent; a bare `list`
leaves the field's type unknown to the type checker. These are typed and plain.
"""

from __future__ import annotations

from typing import Any


def empty_list() -> list[Any]:
    return []


def empty_dict() -> dict[Any, Any]:
    return {}


def empty_set() -> set[Any]:
    return set()
