"""The idle watchdog: ends a tool call or a model request that goes `idle` seconds without progress.

An agent's `Watchdog` is started once, in its task (`start`, `stop`); each call it makes there is a
watched stretch, `with dog: ...`. A command's output, an MCP server's progress notification, a
chunk of a model's stream mark progress on it (`delegate.models.progress`), and while a wait for a
person holds it (`loop/_pause.py`) no time counts. A stretch that goes `idle` seconds without any
is ended: its task is cancelled, and leaving the stretch turns that cancellation (and only that
one) into `TimeoutError`, as `asyncio.Timeout` does; `hung` says how long it went without progress.
Calls that run at once in tasks of their own (several tool calls of one turn) each get one of
their own, made by the agent's (`apart`): the same patrol looks at it, and it is put in the
call's task's context (a copy that ends with the task), never reset, and let go with a set's
discard (`drop`).

Every call of every agent is watched, so a stretch must cost next to nothing: it is a clock read
and three attributes set, and the watchdog has no timer of its own. The watchdogs of one event
loop are looked at together by one patrol, a timer that comes back every quarter of the shortest
`idle` among them while any is started (every 75 s at the default 300 s), and stops when none is
left. A stretch is so ended between `idle` and 1.25 x `idle` seconds after its last progress. A
patrol that comes late found the event loop itself busy (a module imported on first use, a long
step of other work): the calls could not have been served meanwhile, so their idle time starts
again then.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextvars import Token
from types import TracebackType

from ..models import WATCHED, Progress


class Watchdog(Progress):
    """Ends a watched stretch of the task that started it after `idle` seconds without progress
    (see the module's docstring)."""

    __slots__ = ("_armed", "_cancelling", "_fired", "_patrol", "_task", "_token", "ended", "hung", "idle")

    def __init__(self, idle: float) -> None:
        super().__init__()
        self.idle = idle
        self.hung = 0.0
        """The seconds the last stretch it ended went without progress."""
        self.ended = False
        """Whether it ended the last stretch."""
        self._armed = False
        self._fired = False
        self._task: asyncio.Task[object] | None = None
        self._token: Token[Progress | None] | None = None
        self._patrol: _Patrol | None = None
        self._cancelling = 0

    def apart(self) -> Watchdog:
        """A watchdog of the same `idle` for a call this agent runs in a task of its own (the
        current task, made for that call alone), started: looked at by the same patrol, put in
        the task's context (a copy that ends with the task: nothing to reset), and dropped from
        the patrol when the call ends (`drop`)."""
        patrol = self._patrol
        assert patrol is not None, "start the watchdog first"
        dog = Watchdog(self.idle)
        dog._task = asyncio.current_task()
        dog._patrol = patrol
        patrol.watched.add(dog)
        WATCHED.set(dog)
        return dog

    def drop(self) -> None:
        """Stop watching a watchdog made by `apart` (its call ended). Its task is let go: the
        task's context holds the watchdog, so keeping the task would make a cycle that only the
        garbage collector frees (measured: 1.37x a call ten at once, against 1.19x with none)."""
        self._task = None
        if self._patrol is not None:
            self._patrol.watched.discard(self)

    def start(self) -> Watchdog:
        """Watch the stretches of the current task from now on, until `stop`."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a watchdog must be started inside a task")
        self._task = task
        self._token = WATCHED.set(self)
        self._patrol = _patrol_of(task.get_loop())
        self._patrol.watch(self)
        return self

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        if self._patrol is not None:
            self._patrol.watched.discard(self)
        if self._token is not None:
            with contextlib.suppress(ValueError):  # a coroutine closed outside its task's context
                WATCHED.reset(self._token)

    def __enter__(self) -> Watchdog:
        task = self._task
        assert task is not None, "start the watchdog first"
        self.last = time.monotonic()
        self._cancelling = task.cancelling()
        self.ended = False
        self._armed = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._armed = False
        if self._fired:
            self._fired = False
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc

    def _expire(self, quiet: float) -> None:
        assert self._task is not None
        self._armed = False
        self._fired = self.ended = True
        self.hung = quiet
        self._task.cancel()


class _Patrol:
    """The watchdogs started on one event loop, and the timer that looks at them."""

    __slots__ = ("at", "every", "handle", "loop", "watched")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.watched: set[Watchdog] = set()
        self.handle: asyncio.TimerHandle | None = None
        self.at = 0.0
        """When `handle` fires (loop time)."""
        self.every = 0.0

    def watch(self, dog: Watchdog) -> None:
        """Look at `dog` too (sooner, if its `idle` is shorter than any so far)."""
        self.watched.add(dog)
        every = dog.idle / 4
        if self.handle is None or every < self.every:
            self.arm(every)

    def arm(self, every: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.every = every
        self.at = self.loop.time() + every
        self.handle = self.loop.call_at(self.at, self._look)

    def _look(self) -> None:
        self.handle = None
        late = self.loop.time() - self.at > self.every
        now = time.monotonic()
        for dog in list(self.watched):
            if not dog._armed:  # pyright: ignore[reportPrivateUsage]
                continue
            if late:  # the loop was busy, not the call
                dog.last = max(dog.last, now)
            quiet = now - dog.last
            if not dog.held and quiet >= dog.idle:
                dog._expire(quiet)  # pyright: ignore[reportPrivateUsage]
        if self.watched:
            self.arm(min(dog.idle for dog in self.watched) / 4)
        elif _PATROLS.get(self.loop) is self:
            del _PATROLS[self.loop]


_PATROLS: dict[asyncio.AbstractEventLoop, _Patrol] = {}
"""Each event loop's patrol, while it has watchdogs started (dropped when its last one is gone at
its next look, or once the loop is found closed)."""


def _patrol_of(loop: asyncio.AbstractEventLoop) -> _Patrol:
    patrol = _PATROLS.get(loop)
    if patrol is None:
        for closed in [other for other in list(_PATROLS) if other.is_closed()]:
            _PATROLS.pop(closed, None)
        patrol = _PATROLS[loop] = _Patrol(loop)
    return patrol
