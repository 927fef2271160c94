"""Time that does not count against an agent's deadline: a call waiting for a person's decision.
Nor against the call's idle watchdog: a call waiting for a person is not stuck.

`deadlines_paused()` holds the deadlines of every agent the current code runs under (the run's,
the subagent's own) while it is entered: none of them can pass meanwhile, and when the last
pause of a deadline ends it moves on by the time it was held. Pauses of one deadline that overlap
(two subagents waiting at once) hold it once, for the time from the first start to the last end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass

from ..models import watched
from ._deadline import deadlines


@dataclass(slots=True)
class _Held:
    when: float | None
    since: float
    count: int = 0


_ON_WAIT: ContextVar[Callable[[], None] | None] = ContextVar("delegate_on_wait", default=None)
"""What to do when a call of the current agent starts waiting (see `on_wait`)."""


def on_wait(action: Callable[[], None]) -> None:
    """Have `action` run whenever a call of the current agent (this task and those it starts)
    begins to wait: a subagent's journal then writes what it held back (`StoredJournal.scoped`)."""
    _ON_WAIT.set(action)


_held: dict[int, _Held] = {}
"""The deadlines held now, by their `id` (each pause keeps its deadline alive)."""


@contextlib.contextmanager
def deadlines_paused() -> Generator[None]:
    loop = asyncio.get_running_loop()
    action = _ON_WAIT.get()
    if action is not None:
        action()
    held_now = [deadline for deadline in deadlines() if not deadline.expired()]
    for deadline in held_now:
        held = _held.get(id(deadline))
        if held is None:
            held = _held[id(deadline)] = _Held(deadline.when(), loop.time())
            deadline.reschedule(None)
        held.count += 1
    progress = watched()
    if progress is not None:
        progress.held += 1
    try:
        yield
    finally:
        if progress is not None:
            progress.held -= 1
            progress.mark()  # its idle time starts again when the person has decided
        for deadline in held_now:
            held = _held[id(deadline)]
            held.count -= 1
            if held.count == 0:
                del _held[id(deadline)]
                if held.when is not None:
                    deadline.reschedule(held.when + (loop.time() - held.since))
