"""An agent's deadline: `asyncio.Timeout`'s behaviour without a timer of its own.

A fan-out of thousands of subagents gave each its own `asyncio.timeout`: a `TimerHandle` and a
copied context each, pushed on the loop's heap and cancelled again a moment later, about 7 µs a
subagent of a fan-out whose model answers at once (a tenth of its cost). Here the deadlines of one
event loop share one heap of plain tuples and a single `TimerHandle`, set for the earliest of them;
a deadline that ends is dropped from the heap lazily (when the timer reaches it, when the heap
holds twice as many entries as live ones and 64 more, or when none is left).

What a deadline does when it passes is `asyncio.Timeout`'s: it cancels its task, and on leaving it
turns that cancellation (and only that one) into `TimeoutError`; one already due when set or moved
fires before what is ready to run, and one is due within the clock's resolution, as the loop judges
its timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from contextvars import ContextVar, Token
from types import TracebackType

_DEADLINES: ContextVar[tuple[Deadline, ...]] = ContextVar("delegate_deadlines", default=())
"""The deadlines of the agents the current code runs under (a subagent's task inherits its lead's)."""

_CREATED, _ENTERED, _EXPIRING, _EXPIRED, _EXITED = range(5)

_RESOLUTION = time.get_clock_info("monotonic").resolution
"""What asyncio's loop adds to its time when it looks for due timers (`_clock_resolution`)."""


def deadlines() -> tuple[Deadline, ...]:
    """The deadlines of the agents the current code runs under, outermost first."""
    return _DEADLINES.get()


def passed_deadline() -> float | None:
    """The timeout, in seconds, of an enclosing agent whose deadline has passed, or None.

    A subagent cancelled because its lead's (the run's) deadline passed asks this to end
    `timed_out`, not `cancelled`: the deadline expires (`Deadline.expired()`) before the
    cancellation reaches the subagent's task."""
    for deadline in _DEADLINES.get():
        if deadline.expired():
            return deadline.seconds
    return None


class Deadline:
    """`seconds` from entering, for the task that enters it (`with Deadline(600): ...`), and
    for every agent that task starts meanwhile (`deadlines()`). Entered once."""

    __slots__ = ("_cancelling", "_seq", "_state", "_task", "_timers", "_token", "_when", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._when: float | None = None
        self._seq = -1
        """The sequence number of its entry in the heap; -1 while it has none."""
        self._state = _CREATED
        self._task: asyncio.Task[object] | None = None
        self._timers: _Timers | None = None
        self._token: Token[tuple[Deadline, ...]] | None = None
        self._cancelling = 0

    def when(self) -> float | None:
        """When it passes, in the loop's time (None while it is held: see `reschedule`)."""
        return self._when

    def expired(self) -> bool:
        """Whether it passed (and cancelled its task)."""
        return self._state in (_EXPIRING, _EXPIRED)

    def reschedule(self, when: float | None) -> None:
        """Move it to `when` (loop time), or hold it (None) until moved again."""
        if self._state != _ENTERED or self._task is None:
            raise RuntimeError("only a deadline that was entered and has not passed can be moved")
        if self._seq != -1:
            self._unschedule()
        self._when = when
        if when is not None:
            self._timers = timers = _timers_of(self._task.get_loop())
            self._seq = timers.add(self, when)

    def __enter__(self) -> Deadline:
        if self._state != _CREATED:
            raise RuntimeError("a deadline is entered once")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline must be entered inside a task")
        self._task, self._cancelling, self._state = task, task.cancelling(), _ENTERED
        self._token = _DEADLINES.set((*_DEADLINES.get(), self))
        self.reschedule(task.get_loop().time() + self.seconds)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._token is not None and self._task is not None
        task, self._task = self._task, None
        try:
            if self._state == _EXPIRING:
                self._state = _EXPIRED
                if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                    raise TimeoutError from exc
                return
            if self._seq != -1:
                self._unschedule()
            self._state = _EXITED
        finally:  # last: a coroutine closed outside its task's context cannot reset it
            with contextlib.suppress(ValueError):
                _DEADLINES.reset(self._token)

    def _unschedule(self) -> None:
        assert self._timers is not None
        self._seq = -1
        self._timers.drop()

    def _expire(self) -> None:
        """Its time came: cancel its task (its heap entry was taken already)."""
        assert self._task is not None
        self._seq = -1
        self._state = _EXPIRING
        self._task.cancel()


class _Timers:
    """The deadlines of one event loop: a heap of `(when, seq, deadline)` under one timer, set
    for the earliest entry. An entry is live while its deadline's `_seq` is its own."""

    __slots__ = ("at", "handle", "heap", "live", "loop", "seqs")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[tuple[float, int, Deadline]] = []
        self.live = 0
        self.handle: asyncio.Handle | None = None
        self.at = -math.inf
        """When `handle` is set to fire (-inf: as soon as it can)."""
        self.seqs = itertools.count()

    def add(self, deadline: Deadline, when: float) -> int:
        """Add `deadline`'s entry at `when`; its sequence number."""
        seq = next(self.seqs)
        heapq.heappush(self.heap, (when, seq, deadline))
        self.live += 1
        if self.handle is None or when < self.at:
            self._arm(when)
        return seq

    def _arm(self, when: float) -> None:
        """The timer for `when`: at once (before what is ready now, as `asyncio.Timeout` does) if
        it is due already."""
        if self.handle is not None:
            self.handle.cancel()
        if when <= self.loop.time():
            self.handle, self.at = self.loop.call_soon(self._fire), -math.inf
        else:
            self.handle, self.at = self.loop.call_at(when, self._fire), when

    def drop(self) -> None:
        """One deadline ended, moved or passed: its entry stays in the heap, dead, until swept."""
        self.live -= 1
        if self.live == 0:
            self._close()
        elif len(self.heap) > 2 * self.live + 64:
            self.heap = [entry for entry in self.heap if entry[2]._seq == entry[1]]  # pyright: ignore[reportPrivateUsage]
            heapq.heapify(self.heap)

    def _close(self) -> None:
        """No deadline left: no timer, and no heap kept for this loop."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.heap.clear()
        if _TIMERS.get(self.loop) is self:
            del _TIMERS[self.loop]

    def _fire(self) -> None:
        self.handle = None
        heap = self.heap
        now = self.loop.time() + _RESOLUTION  # due as the loop judges a timer due
        due: list[Deadline] = []
        while heap and (heap[0][0] <= now or heap[0][2]._seq != heap[0][1]):  # pyright: ignore[reportPrivateUsage]
            _, seq, deadline = heapq.heappop(heap)
            if deadline._seq == seq:  # pyright: ignore[reportPrivateUsage]
                due.append(deadline)
        self.live -= len(due)
        if self.live == 0:
            self._close()
        elif heap:
            self._arm(heap[0][0])
        for deadline in due:
            deadline._expire()  # pyright: ignore[reportPrivateUsage]


_TIMERS: dict[asyncio.AbstractEventLoop, _Timers] = {}
"""Each event loop's deadlines, while it has any (dropped when its last one ends, or once the loop
is found closed: a loop closed with tasks still under a deadline is not kept)."""


def _timers_of(loop: asyncio.AbstractEventLoop) -> _Timers:
    timers = _TIMERS.get(loop)
    if timers is None:
        for closed in [other for other in list(_TIMERS) if other.is_closed()]:
            _TIMERS.pop(closed, None)
        timers = _TIMERS[loop] = _Timers(loop)
    return timers
