"""A workflow's journal: each `agent()` call is a subagent kept for a resume under a key that
says where in the script it was made and with what arguments.

The key is `<prefix>wf:<site>:<item>:<stage>:<j>:<digest>`: `site` counts the script's calls of
`agent()`, `parallel()` and `pipeline()` in the order it makes them (the script is
deterministic: it has no clock, randomness or input but its own); `item`, `stage` and `j` place a
call within a `parallel()` or `pipeline()`; `digest` is a hash of the call's arguments. The
record stored under it (a finished subagent's row, written as it ends) is its journal entry:
the runner gives it back instead of running the agent again (`SubagentRunner.run`).

A resumed workflow runs its script again from the start. A call at a place the journal holds
with the same arguments is answered from it; the first call whose arguments differ from the
journal's at its place is where the script diverged: it runs, and so does every call after it
in the journal's order (their entries are dropped), while calls before it are still answered.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import MutableMapping
from typing import Any

from .._record import TaskOutput

__all__ = ["Journal", "Position", "digest", "is_workflow_key"]

Position = tuple[int, int, int, int]
"""Where a call was made: its site, and its item, stage and place within a list of calls."""


_KEY = re.compile(r"(?:[^>]*/)?wf:\d+:\d+:\d+:\d+:[0-9a-f]{16}")


def is_workflow_key(key: str) -> bool:
    """Whether `key` is a workflow agent's (of a run that is a workflow, or of a lead's
    `workflow` call; not a subagent nested below one)."""
    return _KEY.fullmatch(key) is not None


def digest(arguments: dict[str, Any]) -> str:
    """A short hash of a call's arguments (its prompt and options, as JSON with sorted keys)."""
    text = json.dumps(arguments, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Journal:
    """The keys of a workflow's agents, and the divergence of a changed script (see the module).

    `finished` is the runner's map of finished subagents by key (a resumed run's): entries past a
    divergence are taken out of it, so that they run again."""

    def __init__(self, prefix: str, finished: MutableMapping[str, TaskOutput]) -> None:
        self.prefix = f"{prefix}wf:"
        self.finished = finished
        self.journaled: dict[Position, str] = {}
        for key in finished:
            position = _position(key, self.prefix)
            if position is not None:
                self.journaled[position] = key
        self.diverged: Position | None = None
        """The first place where the script called with other arguments than the journal holds."""
        self.diverged_line: int | None = None
        """The script's line of that call (None: not known)."""

    def key(self, position: Position, arguments: dict[str, Any], line: int | None = None) -> str:
        """The key of the call at `position` with `arguments`; the first call that differs from
        the journal marks the divergence (see `diverged`)."""
        key = f"{self.prefix}{':'.join(map(str, position))}:{digest(arguments)}"
        old = self.journaled.get(position)
        if old is not None and old != key and (self.diverged is None or position < self.diverged):
            self.diverged, self.diverged_line = position, line
            for later, stale in list(self.journaled.items()):
                if later >= position:
                    self.finished.pop(stale, None)
        return key

    @property
    def replayable(self) -> int:
        """How many journaled agents are still to be answered from the journal."""
        return sum(1 for key in self.journaled.values() if key in self.finished)


def _position(key: str, prefix: str) -> Position | None:
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split(":")
    if len(parts) != 5 or not all(p.isdigit() for p in parts[:4]):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
