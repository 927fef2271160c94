"""Helpers for the batch tests: a runner that sleeps and counts, fixtures for a store on each backend.

The runner stands in for `delegate.Runtime.run_task`: the engine only sees its protocol, and a
scripted model would answer after the same sleep. It counts how many items run at once, and can
fail an item's first attempts, hold items until released, or give an acceptance verdict.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from delegate import EventSink, Store, TaskOutput, Usage, UserError
from delegate.batch import Batch, Batches, BatchWorker
from delegate.testing import subagent_record

USER = "alice"
FAST = {"poll_interval": 0.05, "heartbeat_ttl": 3.0, "retry_delay": 0.01, "max_retry_delay": 0.05}
"""Worker settings that keep the tests quick: short polls and retry backoffs."""


@dataclass
class Call:
    key: str
    attempt: int
    prompt: str
    subagent_type: str
    user_id: str
    run_id: str
    acceptance_criteria: list[str] | None


class Runner:
    """Runs an item by sleeping `delay`; records calls and the most items seen running at once.

    `fail` maps a key to how many first attempts end in `error`; `raise_for` keys crash the runner,
    `reject` keys make it raise `UserError` (as for an unknown type); `hold`, when set, is awaited by
    every item (release it to let them finish); `acceptance` maps a key to its verdict.
    `watch`, if given, is called at each start (to sample the store's counts, say). `usage` maps a
    key to what its item reports having spent (others: `subagent_record`'s default).
    """

    def __init__(
        self,
        delay: float = 0.01,
        *,
        fail: dict[str, int] | None = None,
        raise_for: set[str] | None = None,
        reject: set[str] | None = None,
        hold: asyncio.Event | None = None,
        acceptance: dict[str, list[dict[str, Any]]] | None = None,
        watch: Callable[[], None] | None = None,
        usage: dict[str, Usage] | None = None,
    ) -> None:
        self.delay = delay
        self.fail = fail or {}
        self.raise_for = raise_for or set()
        self.reject = reject or set()
        self.hold = hold
        self.acceptance = acceptance or {}
        self.watch = watch
        self.usage = usage or {}
        self.calls: list[Call] = []
        self.running = 0
        self.peak = 0
        self.started = asyncio.Event()
        self.cancelled: list[str] = []

    async def run_task(
        self,
        *,
        subagent_type: str,
        prompt: str,
        description: str,
        acceptance_criteria: list[str] | None,
        run_id: str,
        user_id: str,
        tool_call_id: str | None,
        limits: Mapping[str, Any],
        sinks: Iterable[EventSink] = (),
    ) -> TaskOutput:
        assert tool_call_id is not None
        _, _, key, attempt = tool_call_id.split(":")
        call = Call(key, int(attempt), prompt, subagent_type, user_id, run_id, acceptance_criteria)
        self.calls.append(call)
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.started.set()
        if self.watch is not None:
            self.watch()
        try:
            if self.hold is not None:
                await self.hold.wait()
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.append(key)
            raise
        finally:
            self.running -= 1
        if key in self.raise_for:
            raise RuntimeError(f"runner crashed on {key}")
        if key in self.reject:
            raise UserError(f"unknown subagent type {subagent_type!r}; available: general-purpose")
        if self.fail.get(key, 0) >= call.attempt:
            failed = f"attempt {call.attempt} of {key} failed"
            return subagent_record(status="error", error=failed, tool_call_id=tool_call_id)
        verdict = self.acceptance.get(key)
        done = f"done {key} #{call.attempt}"
        return subagent_record(done, acceptance=verdict, usage=self.usage.get(key), tool_call_id=tool_call_id)

    def attempts(self, key: str) -> int:
        return sum(1 for c in self.calls if c.key == key)


def items(n: int, prefix: str = "item") -> list[dict[str, Any]]:
    return [{"key": f"{prefix}-{i}", "prompt": f"summarise {prefix} {i}"} for i in range(n)]


@asynccontextmanager
async def worker(
    batches: Batches, runner: Any, *, looks: QueueLooks | None = None, **options: Any
) -> AsyncIterator[BatchWorker]:
    """A started worker over `batches` (its looks at the queue counted in `looks`, if given)."""
    settings = FAST | options
    built = BatchWorker(batches, runner, **settings)
    if looks is not None:
        looks.watch(built)
    async with built as started:
        yield started


class QueueLooks:
    """Counts a worker's looks at its queue, so a test waits on them instead of sleeping: the
    scheduler's passes (each asks which batches to serve) and every claim's answer."""

    def __init__(self) -> None:
        self.passes = 0
        self.claims: list[tuple[str, str, int]] = []
        """`(batch id, state, items claimed)` of each claim answered, in order."""
        self.claiming = 0

    def watch(self, w: BatchWorker) -> None:
        queue = w.queue
        serving, claim = queue.serving, queue.claim

        def counted_serving() -> list[tuple[str, int]]:
            try:
                return serving()
            finally:
                self.passes += 1

        def counted_claim(batch_id: str, *args: Any) -> Any:
            self.claiming += 1
            try:
                answer = claim(batch_id, *args)
                self.claims.append((batch_id, answer.state, len(answer.items)))
                return answer
            finally:
                self.claiming -= 1

        queue.serving = counted_serving  # type: ignore[method-assign]
        queue.claim = counted_claim  # type: ignore[method-assign]

    async def passes_more(self, n: int) -> None:
        """Wait until the scheduler has looked `n` more times and no claim is on its way."""
        target = self.passes + n
        await until(lambda: self.passes >= target and self.claiming == 0)


async def finished(w: BatchWorker, batch_id: str, *, timeout: float = 60.0, user: str = USER) -> Batch:
    async with asyncio.timeout(timeout):
        return await w.wait(user, batch_id, poll=0.02)


async def until(condition: Callable[[], bool], *, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture(name="batches")
def batches_fixture(store_url: str) -> Iterator[Batches]:
    """`Batches` over a fresh store on each backend (the shared `store_url` fixture)."""
    store = Store.open(store_url)
    yield Batches(store)
    store.close()


def count_rows(store: Store) -> tuple[int, int]:
    with store.read() as conn:
        batches = conn.scalar(sa.text("SELECT count(*) FROM batches"))
        items = conn.scalar(sa.text("SELECT count(*) FROM batch_items"))
    return int(batches or 0), int(items or 0)


WORKER_SCRIPT = Path(__file__).with_name("batch_worker_process.py")


def worker_command(store_url: str, log: Path, delay: float, *extra: str) -> list[str]:
    """The command line of a worker in its own process (see batch_worker_process.py)."""
    return [sys.executable, str(WORKER_SCRIPT), store_url, str(log), str(delay), *extra]


def subprocess_env() -> dict[str, str]:
    root = Path(__file__).resolve().parent.parent
    return os.environ | {"PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def new_id() -> str:
    return uuid.uuid4().hex[:8]
