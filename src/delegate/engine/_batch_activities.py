"""The activities of a batch on Temporal: claim, run one item, give back held retries.

They run on `delegate worker` processes, against the store the worker was started with (the same
PostgreSQL database on every machine). The store holds the items and their results, and claims
and stores them exactly as the embedded engine's workers do (`delegate.batch.WorkQueue`), with the
batch's workflow as the lease owner (`temporal:<batch id>`): the workflow is durable, so its claims
never lapse; an item activity whose worker died is run again by Temporal after the heartbeat
timeout, and counted as an interruption.

Temporal also runs an item's activity again when its worker is alive but its heartbeats stopped
reaching the server (a network cut, a stalled process): then two executions of one attempt exist.
Each execution fences the item in the store with its Temporal attempt number (`WorkQueue.take`):
the older one sees the newer fence at its next look (every third of the heartbeat timeout, at most
every `STORE_LOOK` seconds) and cancels its subagent; the newer one waits half again as long before
it starts its own, and only one result, with its usage, is ever stored (`run_live`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from temporalio import activity

from .._events import Event, EventSink, EventType
from .._time import utc_now
from ..batch import (
    AttemptResult,
    Batches,
    ClaimedItem,
    ItemRunner,
    RunnerFactory,
    ServeInfo,
    WorkQueue,
    run_attempt,
)
from ._batch_workflow import CLAIM, ITEM, RELEASE, ClaimAnswer, ClaimRequest, ItemRef, ItemRequest

_log = logging.getLogger("delegate.engine")
STORE_LOOK = 2.0
"""The most seconds between a running item's looks at the store (is it still this execution's?)."""


def lease_owner(batch_id: str) -> str:
    """Who holds a Temporal batch's claimed items in the store: its workflow, whatever its epoch."""
    return f"temporal:{batch_id}"


class BatchActivities:
    """The batch activities of one worker process, over its store and its runner (or factory)."""

    def __init__(
        self,
        batches: Batches,
        runner: ItemRunner | RunnerFactory,
        *,
        heartbeat_timeout: float,
        retry_delay: float = 2.0,
        max_retry_delay: float = 60.0,
        emit: EventSink | None = None,
    ) -> None:
        self.queue = WorkQueue(batches)
        self._runner = runner
        self._runners: dict[tuple[str, str | None], ItemRunner] = {}
        self.heartbeat_timeout = heartbeat_timeout
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._emit = emit

    def activities(self) -> list[Callable[..., Any]]:
        return [self.claim, self.run_item, self.release]

    async def aclose(self) -> None:
        """Close the runners this worker built."""
        runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            close = getattr(runner, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    @activity.defn(name=CLAIM)
    async def claim(self, request: ClaimRequest) -> ClaimAnswer:
        owner = lease_owner(request.batch_id)
        claim = await asyncio.to_thread(
            self.queue.claim,
            request.batch_id,
            owner,
            request.room,
            0.0,
            shared=False,
            epoch=request.epoch,
            token=request.token,
        )
        if claim.newly_finished:
            info = await asyncio.to_thread(self.queue.serve_info, request.batch_id)
            if info is not None:
                self._event(info, "batch.completed", {"batch_id": request.batch_id})
        due = None
        if claim.next_due is not None:
            due = (claim.next_due - utc_now()).total_seconds()
        items = [ItemRef(item_id=i.id, key=i.key, attempt=i.attempt) for i in claim.items]
        return ClaimAnswer(state=claim.state, items=items, next_due_in=due)

    @activity.defn(name=RELEASE)
    async def release(self, batch_id: str) -> None:
        await asyncio.to_thread(self.queue.release_waiting, batch_id, lease_owner(batch_id))

    @activity.defn(name=ITEM)
    async def run_item(self, request: ItemRequest) -> str:
        """Run one attempt of an item and store its result; its new status, or `gone` when this
        execution no longer holds the item (stored already, its batch cancelled, or a newer
        execution of the attempt took it over on another worker)."""
        owner = lease_owner(request.batch_id)
        fence = activity.info().attempt  # Temporal's attempt number: each run of this activity a higher one
        held = (request.item_id, owner, request.attempt)
        taken = await asyncio.to_thread(self.queue.take, *held, fence, interrupted=fence > 1)
        info = await asyncio.to_thread(self.queue.serve_info, request.batch_id)
        if taken is None or info is None:
            return "gone"
        check = self._check_interval()
        if taken.handover:
            # The execution before this one may still be running the item on a worker whose
            # heartbeats stopped reaching Temporal: it looks at the store every `check` seconds and
            # stops when it sees this one's fence. Until this one goes live, a result the older
            # one finishes first is the one stored, and this one runs nothing.
            await self._wait_beating(check * 1.5, check)
            if not await asyncio.to_thread(self.queue.go_live, *held, fence):
                return "gone"
        runner = await self._runner_for(info)
        item = taken.item
        running = asyncio.create_task(run_attempt(runner, info, item), name=f"delegate-batch-item-{item.key}")
        try:
            result = await self._beating(running, (*held, fence), check)
        except asyncio.CancelledError:  # Temporal cancelled it: the batch was cancelled, or its heartbeat timed out
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
            raise
        if result is None:
            return "gone"
        return await self._store(info, item, owner, dataclasses.replace(result, fence=fence))

    def _check_interval(self) -> float:
        """Seconds between this execution's heartbeats and its looks at the store: a third of the
        activity's heartbeat timeout (the same on every worker: the workflow sets it), at most
        `STORE_LOOK`, so that a takeover's wait (half again as long) stays short."""
        timeout = activity.info().heartbeat_timeout
        seconds = timeout.total_seconds() if timeout else self.heartbeat_timeout
        return max(0.05, min(STORE_LOOK, seconds / 3))

    @staticmethod
    async def _wait_beating(seconds: float, interval: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            activity.heartbeat()
            await asyncio.sleep(min(interval, left))

    async def _beating(
        self, running: asyncio.Task[AttemptResult], held: tuple[int, str, int, int], interval: float
    ) -> AttemptResult | None:
        """Heartbeat while the attempt runs; stop it (None) when the store says this execution no
        longer holds it: its batch was cancelled by a process that could not tell Temporal, or a
        newer execution took it over (Temporal gave up on this worker's heartbeats)."""
        while True:
            activity.heartbeat()
            done, _ = await asyncio.wait({running}, timeout=interval)
            if done:
                return running.result()
            if await asyncio.to_thread(self.queue.held, *held) is None:
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running
                return None

    async def _store(self, info: ServeInfo, item: ClaimedItem, owner: str, result: AttemptResult) -> str:
        (status,) = await asyncio.to_thread(self.queue.finish, owner, [result], backoff=self._backoff)
        if status is None:
            return "gone"
        data = {
            "batch_id": info.id,
            "key": item.key,
            "status": "queued" if status == "waiting" else status,
            "attempt": item.attempt,
            "retrying": status == "waiting",
        }
        self._event(info, "batch.item", data)
        return status

    def _backoff(self, failures: int) -> float:
        return min(self.max_retry_delay, self.retry_delay * 2 ** (failures - 1))

    async def _runner_for(self, info: ServeInfo) -> ItemRunner:
        if isinstance(self._runner, ItemRunner):
            return self._runner
        key = (info.user_id, info.model)
        runner = self._runners.get(key)
        if runner is None:
            # Off the event loop: building a runner reads definition files, and may load a model.
            runner = self._runners[key] = await asyncio.to_thread(self._runner, info.user_id, info.model)
        return runner

    def _event(self, info: ServeInfo, type: EventType, data: dict[str, Any]) -> None:
        if self._emit is None:
            return
        try:
            self._emit(
                Event(type=type, run_id=info.run_id or f"batch-{info.id}", agent_id=f"batch:{info.id}", data=data)
            )
        except Exception as exc:
            _log.warning("batch event sink failed: %s: %s", type, exc)
