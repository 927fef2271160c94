"""An agent's deadline (`delegate.loop.Deadline`): `asyncio.Timeout`'s behaviour under one shared
timer a loop. What each test checks is what `asyncio.timeout` would do in its place."""

from __future__ import annotations

import asyncio
import gc
import random

import pytest

from delegate.loop import Deadline, deadlines_paused, passed_deadline
from delegate.loop._deadline import _TIMERS, deadlines  # pyright: ignore[reportPrivateUsage]


async def test_a_passed_deadline_raises_timeout_error_and_says_it_expired() -> None:
    deadline = Deadline(0.01)
    with pytest.raises(TimeoutError), deadline:
        assert deadlines() == (deadline,)
        await asyncio.sleep(10)
    assert deadline.expired()
    assert deadlines() == ()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancellation it made is taken back


async def test_a_deadline_that_ended_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    with Deadline(0.02) as deadline:
        assert _TIMERS[loop].live == 1
        await asyncio.sleep(0)
    assert not deadline.expired()
    assert loop not in _TIMERS  # nothing is left that could cancel the task later


async def test_a_deadline_due_when_it_is_set_passes_before_what_is_ready_runs() -> None:
    """As `asyncio.Timeout`: moved to a time already past, it fires before the task's next step."""
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError), Deadline(60) as deadline:
        deadline.reschedule(loop.time() - 1)
        await asyncio.sleep(0)  # one yield: the deadline's cancellation comes first
        raise AssertionError("not reached: the deadline had passed")
    assert deadline.expired()


async def test_a_cancellation_not_its_own_stays_a_cancellation() -> None:
    async def waits() -> None:
        with Deadline(60):
            await asyncio.sleep(10)

    task = asyncio.create_task(waits())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_inner_of_two_deadlines_passes_first_and_the_outer_goes_on() -> None:
    with Deadline(60) as outer:
        with pytest.raises(TimeoutError), Deadline(0.01) as inner:
            assert deadlines() == (outer, inner)
            await asyncio.sleep(10)
        assert inner.expired() and not outer.expired()
        assert passed_deadline() is None
        await asyncio.sleep(0)  # the task is not cancelled any more
    assert not outer.expired()


async def test_a_subagent_started_under_a_passed_deadline_knows_its_seconds() -> None:
    seen: list[float | None] = []

    async def subagent() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(passed_deadline())
            raise

    with pytest.raises(TimeoutError), Deadline(0.01):
        await asyncio.gather(subagent())
    assert seen == [0.01]


async def test_held_it_does_not_pass_and_moved_on_it_passes_at_its_new_time() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError), Deadline(0.01) as deadline:
        with deadlines_paused():
            assert deadline.when() is None
            assert loop not in _TIMERS  # held: no timer left that could pass it
            await asyncio.sleep(0)
        assert not deadline.expired()
        moved = deadline.when()
        assert moved is not None and moved > loop.time()
        await asyncio.sleep(10)
    assert deadline.expired()


async def test_many_deadlines_at_once_each_passes_at_its_own_time_and_no_earlier() -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(7)
    passed: dict[int, float] = {}

    async def agent(n: int, seconds: float, ends_early: bool) -> None:
        try:
            with Deadline(seconds) as deadline:
                if not ends_early:  # one that ends early ends before the loop turns: no timing to lose
                    await asyncio.sleep(10)
        except TimeoutError:
            passed[n] = loop.time()
            when = deadline.when()
            assert when is not None and when <= passed[n]  # as `asyncio.Timeout.when()`: the time it passed
        else:
            assert ends_early and not deadline.expired()

    plans = [(n, rng.uniform(0.005, 0.05), rng.random() < 0.5) for n in range(400)]
    start = loop.time()
    await asyncio.gather(*(agent(n, seconds, early) for n, seconds, early in plans))
    assert set(passed) == {n for n, _, early in plans if not early}
    for n, seconds, early in plans:
        if not early:
            assert passed[n] >= start + seconds


async def test_a_deadline_is_entered_once_and_only_in_a_task() -> None:
    with Deadline(60) as deadline:
        pass
    with pytest.raises(RuntimeError, match="entered once"):
        deadline.__enter__()
    with pytest.raises(RuntimeError, match="entered and has not passed"):
        deadline.reschedule(None)


def test_outside_an_event_loop_a_deadline_cannot_be_entered() -> None:
    with pytest.raises(RuntimeError):
        Deadline(1).__enter__()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the task it abandons
def test_a_loop_closed_with_a_deadline_still_entered_is_not_kept() -> None:
    abandoned: list[asyncio.Task[None]] = []

    async def under_deadline(entered: asyncio.Event) -> None:
        with Deadline(60):
            entered.set()
            await asyncio.sleep(60)

    async def abandon() -> None:
        entered = asyncio.Event()
        abandoned.append(asyncio.get_running_loop().create_task(under_deadline(entered)))
        await entered.wait()

    old = asyncio.new_event_loop()
    try:
        old.run_until_complete(abandon())  # its task is left under its deadline
        assert old in _TIMERS
        old.close()

        async def another() -> None:
            with Deadline(60):
                assert old not in _TIMERS

        asyncio.run(another())
        assert old not in _TIMERS
    finally:
        old.close()
        abandoned.clear()
        gc.collect()  # the abandoned task goes now, under this test's filter
