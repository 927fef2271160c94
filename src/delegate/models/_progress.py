"""Progress marks, what the idle watchdog (`delegate.loop.Watchdog`) reads.

The loop watches each tool call (an MCP call included) and each model request: one that goes
`RunLimits.stall_timeout` seconds without progress is ended. What counts as progress is marked
where it happens, on the `Progress` of the call the current code serves: a command's output
(`tools/_shell.py`), an MCP server's progress notification (`mcp/_client.py`), each event of a
model's stream (the provider adapters). A call waiting for a person (an `ask` rule's decision) is
held: that time never counts (`loop/_pause.py`).

Marking is a context variable read and a clock read, a fraction of a microsecond: cheap enough
for every chunk of a stream.
"""

from __future__ import annotations

import time
from contextvars import ContextVar


class Progress:
    """When the call it belongs to last did something (`time.monotonic()`), and how many waits
    for a person hold it now (while any does, it is not idle)."""

    __slots__ = ("held", "last")

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.held = 0

    def mark(self) -> None:
        self.last = time.monotonic()


WATCHED: ContextVar[Progress | None] = ContextVar("delegate_progress", default=None)
"""The progress of the watched call the current code serves (None: no call is watched)."""


def progress() -> None:
    """Mark progress of the watched call the current code serves, if any."""
    watched = WATCHED.get()
    if watched is not None:
        watched.last = time.monotonic()


def watched() -> Progress | None:
    """The progress of the watched call the current code serves: what code that runs elsewhere
    (a protocol's callback, another task) marks for it."""
    return WATCHED.get()
