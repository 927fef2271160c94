"""Following a run's events in the store, from any process: what `GET /runs/{id}/events` reads
for a run that is not live in its server, and what `delegate runs events --follow` prints.

The store numbers a run's events 1, 2, 3, ... with no gaps, so a reader that has seen `n` events
asks for the ones after `n`. A follower stops at `run.completed`, given once the run's end is
stored too (so what it reads of the run then is final); a run whose process died
(`interrupted`) never stores one, so the follower is given `interrupted_event` instead, once every
stored event was read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .._events import Event
from .._record import LIVE_STATUSES
from .._store import Store

PAGE = 500
"""Events read from the store at a time."""

StoredStep = Callable[[], Awaitable[tuple[list[tuple[int, Event]], bool]]]
"""Reads what is new: `((number, event) pairs, done)`."""


def interrupted_event(run_id: str) -> Event:
    """The terminal event a follower gets for a run whose process died (not stored: the run may
    be resumed, and go on with events numbered after the last stored one)."""
    data = {"status": "interrupted", "final": "", "error": "the process running it stopped; it can be resumed"}
    return Event(type="run.completed", run_id=run_id, agent_id="lead", data=data)


def stored_events(store: Store, run_id: str, after: int) -> StoredStep:
    """A step that reads the run's events numbered above `after` a page at a time, each call going
    on from the last; done at `run.completed`, at the end of a run that ended or is unknown, and
    (with `interrupted_event` last) at the end of one whose process died."""
    seq = after

    async def step() -> tuple[list[tuple[int, Event]], bool]:
        nonlocal seq
        found: list[tuple[int, Event]] = []
        for event in await asyncio.to_thread(store.events, run_id, seq, PAGE):
            if event.type == "run.completed" and not await _end_recorded(store, run_id):
                return found, False  # held back until the run's end is stored too: read again then
            seq += 1
            found.append((seq, event))
            if event.type == "run.completed":
                return found, True
        if found:
            return found, False  # read on at once
        run = await asyncio.to_thread(store.get_run, run_id)
        if run is not None and run.status == "interrupted" and seq >= run.event_count:
            return [(seq, interrupted_event(run_id))], True  # rather than keep the follower waiting for ever
        return found, run is None or (run.status not in LIVE_STATUSES and seq >= run.event_count)

    return step


async def _end_recorded(store: Store, run_id: str) -> bool:
    """Whether the run's row says it ended. The runtime stores `run.completed` just before how the
    run ended: a follower that stopped at the event could read the run as `running` still."""
    run = await asyncio.to_thread(store.get_run, run_id)
    return run is None or run.status not in LIVE_STATUSES
