"""The plain data of memory: notes and who reads them, todos and how an agent reads them back.
No database here (a storeless run loads none): `_notes.py` and `_todos.py` keep them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from .._errors import UserError
from .._text import safe_text
from .._time import iso

Scope = Literal["local", "project", "user"]
SCOPES: tuple[Scope, ...] = ("local", "project", "user")

MAX_NOTE_CHARS = 2_000
"""The longest note: memory holds facts to recall, not documents (those belong in files)."""


@dataclass(frozen=True, slots=True)
class Note:
    """One note, as read back."""

    id: int
    user_id: str
    workspace: str
    scope: Scope
    agent: str
    """'' for the lead's notes; else the subagent type whose own memory it is."""
    text: str
    run_id: str | None
    written_by: str | None
    """The agent that wrote it last (`lead`, `sub3`); None: a person, from the CLI or HTTP."""
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The note as `delegate memory ... --json` and `GET /api/v1/memory` show it."""
        return {
            "id": self.id,
            "scope": self.scope,
            "agent": self.agent or None,
            "workspace": self.workspace or None,
            "text": self.text,
            "run_id": self.run_id,
            "written_by": self.written_by,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


@dataclass(frozen=True, slots=True)
class Reader:
    """Whose notes are seen: `user_id`'s in `workspace` (a root path), or, with `workspace` None,
    every note `user_id` wrote (the owner scope of the HTTP API)."""

    user_id: str
    workspace: str | None = None


def note_text(text: str) -> str:
    """`text` as a note keeps it; `UserError` when it is empty or longer than `MAX_NOTE_CHARS`."""
    kept = safe_text(text).strip()
    if not kept:
        raise UserError("a note needs text: say what to remember")
    if len(kept) > MAX_NOTE_CHARS:
        raise UserError(
            f"a note holds at most {MAX_NOTE_CHARS:,} characters (this one has {len(kept):,}): keep the fact, "
            "and put the details in a file the note names"
        )
    return kept


TodoStatus = Literal["pending", "in_progress", "completed"]
TODO_STATUSES: tuple[TodoStatus, ...] = ("pending", "in_progress", "completed")
MAX_TODOS = 50
MAX_TODO_CHARS = 300
_MARKS: dict[str, str] = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}


@dataclass(frozen=True, slots=True)
class Todo:
    content: str
    status: TodoStatus = "pending"

    def to_dict(self) -> dict[str, str]:
        return {"content": self.content, "status": self.status}


def parse_todos(value: object) -> list[Todo]:
    """A list as `todo_write` takes it (`[{"content", "status"}]`); `ValueError` saying what is wrong."""
    if not isinstance(value, list):
        raise ValueError("todos is a list of {content, status}")
    items = cast(list[object], value)
    if len(items) > MAX_TODOS:
        raise ValueError(f"at most {MAX_TODOS} todos: merge some")
    found: list[Todo] = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise ValueError(f"todo {number} is not an object with content and status")
        entry = cast(dict[str, Any], item)
        content, status = entry.get("content"), entry.get("status", "pending")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"todo {number} needs a content: what to do")
        if status not in TODO_STATUSES:
            raise ValueError(f"todo {number}: status is one of {', '.join(TODO_STATUSES)}, not {status!r}")
        text = " ".join(safe_text(content).split())[:MAX_TODO_CHARS]
        found.append(Todo(content=text, status=status))
    return found


def render_todos(todos: list[Todo]) -> str:
    """A list as an agent reads it back: one line a todo, `[x]` done, `[>]` in progress."""
    if not todos:
        return "Your todo list is empty."
    done = sum(t.status == "completed" for t in todos)
    lines = [f"{_MARKS[t.status]} {t.content}" for t in todos]
    return f"Todos ({done}/{len(todos)} completed):\n" + "\n".join(lines)


def todos_json(lists: dict[str, list[Todo]]) -> dict[str, list[dict[str, str]]]:
    """Lists by agent id as `runs show --json` and the HTTP API show them."""
    return {agent: [t.to_dict() for t in todos] for agent, todos in lists.items()}
