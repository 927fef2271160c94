"""A batch on Temporal: one workflow per (batch, epoch) claims items, each item one activity.

Workflow `delegate.batch`, id `batch:<batch id>:<epoch>` (a resume or a retry bumps the epoch, so
each starts a fresh execution). It loops: a local activity claims what may start now from the
store (one transaction under the batch row's lock, so `max_running_items` and `max_live_items`
hold exactly, whoever else claims), and each claimed item becomes an activity, `delegate.batch.item`,
named by the item's key and attempt (`<key>#<attempt>`), on any worker of
the task queue. Each claim is named (`<run id>/<n>`, the same on replay): a worker that dies after
its claim committed and before the workflow's history recorded it leaves the claim to be made again
on another worker, which answers the items taken the first time (before, they stayed `running` with
no activity to run them, and filled the batch's `max_running_items`: the batch stalled). The
activity runs the subagent, heartbeating, and stores the result itself with a
conditional update (`WHERE` the attempt still holds the item): a result is stored once, however
often the activity ran. A worker that dies mid-item stops heartbeating; Temporal runs the activity
again on another worker after the heartbeat timeout, and the item starts again from the start
(counted as an interruption, as the embedded engine does).

The store, not the workflow's history, holds the items, their prompts and results: the history
holds item ids, keys and attempt numbers only, and past about 10,000 events the workflow lets its
running items finish and continues as new (same id), so a batch of any size stays small.

This module runs inside Temporal's workflow sandbox: it imports nothing of delegate at run time,
only names activities, and reads time and sleeps through `workflow`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ._agent_activity import AGENT_RETRY, AGENT_START_TO_CLOSE, heartbeat

CLAIM = "delegate.batch.claim"
ITEM = "delegate.batch.item"
RELEASE = "delegate.batch.release"
WORKFLOW = "delegate.batch"
POLL = 2.0
"""Seconds between looks at the store when nothing signalled a change (a pause made by a process
without the engine, say)."""
HISTORY_LIMIT = 10_000
"""Events after which the workflow drains and continues as new (Temporal warns at 10,240)."""


@dataclass(kw_only=True)
class BatchRun:
    """The workflow's input."""

    batch_id: str
    epoch: int
    heartbeat_timeout: float


@dataclass(kw_only=True)
class ClaimRequest:
    batch_id: str
    epoch: int
    room: int
    token: str | None = None
    """Names this claim (`<run id>/<n>`, the same when the workflow replays): a claim made again
    after a worker died answers the items it took the first time."""


@dataclass(kw_only=True)
class ItemRef:
    item_id: int
    key: str
    attempt: int


@dataclass(kw_only=True)
class ClaimAnswer:
    state: str
    items: list[ItemRef] = field(default_factory=lambda: list[ItemRef]())
    next_due_in: float | None = None
    """Seconds until the earliest retry the batch holds may start."""


@dataclass(kw_only=True)
class ItemRequest:
    batch_id: str
    item_id: int
    key: str
    attempt: int


ROOM = 10_000
"""The most items one execution runs at once; the batch's own caps bound it."""
CLAIM_SIZE = 25
"""The most items one claim starts: a claim's items are started in one workflow activation, and
Temporal fails an activation that does not yield within 2 s (200 at once did not, on a loaded
2-core machine, and the execution's worker slot stayed stuck). A full claim claims again at once."""
BOUNDED_CLAIMS = "delegate.batch.bounded-claims"
"""The patch that bounds claims (executions started before it replay as they ran)."""


def workflow_id(batch_id: str, epoch: int) -> str:
    return f"batch:{batch_id}:{epoch}"


@workflow.defn(name=WORKFLOW)
class BatchWorkflow:
    def __init__(self) -> None:
        self._changed = False
        self._running: dict[int, workflow.ActivityHandle[str]] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self._claims = 0

    @workflow.signal(name="changed")
    def changed(self) -> None:
        """The batch was paused, resumed, cancelled or retried: look at the store now."""
        self._changed = True

    @workflow.run
    async def run(self, batch: BatchRun) -> str:
        draining: str | None = None  # why no more is claimed here: superseded, or continue as new
        timeout: float | None = POLL
        while True:
            self._changed = False
            if draining is None:
                answer, full = await self._claim(batch)
                if full:
                    self._changed = True  # there may be more to start now: claim again at once
                ended = await self._ended(batch, answer)
                if ended is not None:
                    return ended
                if answer.state == "superseded":
                    draining = "superseded"
                elif workflow.info().get_current_history_length() > HISTORY_LIMIT:
                    draining = "continue"
                due = answer.next_due_in
                timeout = POLL if due is None else min(POLL, max(0.0, due))
            if draining is not None:
                if not self._running:
                    if draining == "superseded":
                        return draining
                    workflow.continue_as_new(batch)
                timeout = None
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._changed, timeout=timeout)

    async def _claim(self, batch: BatchRun) -> tuple[ClaimAnswer, bool]:
        """Claim and start what may start now; and whether the claim was full (more may wait)."""
        self._claims += 1
        token = f"{workflow.info().run_id}/{self._claims}"
        room = ROOM - len(self._running)
        bounded = workflow.patched(BOUNDED_CLAIMS)
        if bounded:
            room = min(CLAIM_SIZE, room)
        request = ClaimRequest(batch_id=batch.batch_id, epoch=batch.epoch, room=room, token=token)
        answer = await workflow.execute_local_activity(
            CLAIM,
            request,
            result_type=ClaimAnswer,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )
        for item in answer.items:
            self._start(batch, item)
        return answer, bounded and room > 0 and len(answer.items) >= room

    async def _ended(self, batch: BatchRun, answer: ClaimAnswer) -> str | None:
        """Why this execution ends now (finished, missing, cancelled, paused), or None."""
        if answer.state in ("finished", "missing"):
            return answer.state
        if answer.state == "cancelled":
            return await self._stop()
        if answer.state == "paused" and not self._running:
            await workflow.execute_local_activity(RELEASE, batch.batch_id, start_to_close_timeout=timedelta(seconds=60))
            return "paused"
        return None

    def _start(self, batch: BatchRun, item: ItemRef) -> None:
        request = ItemRequest(batch_id=batch.batch_id, item_id=item.item_id, key=item.key, attempt=item.attempt)
        handle = workflow.start_activity(
            ITEM,
            request,
            result_type=str,
            activity_id=f"{item.key}#{item.attempt}",
            summary=f"batch {batch.batch_id} item {item.key} attempt {item.attempt}",
            start_to_close_timeout=AGENT_START_TO_CLOSE,
            heartbeat_timeout=heartbeat(batch.heartbeat_timeout),
            # A worker that died: run it again elsewhere. The activity counts each such retry as
            # an interruption in the store, and fails the item at the embedded engine's limit.
            retry_policy=AGENT_RETRY,
        )
        self._running[item.item_id] = handle
        self._watchers.append(asyncio.ensure_future(self._watch(item.item_id, handle)))

    async def _watch(self, item_id: int, handle: workflow.ActivityHandle[str]) -> None:
        try:
            await handle
        except (ActivityError, asyncio.CancelledError):
            pass  # cancelled with its batch: the store holds what it was (cancelled)
        finally:
            del self._running[item_id]
            self._changed = True

    async def _stop(self) -> str:
        """A cancelled batch: cancel its running items (the store already says they are cancelled)."""
        for handle in list(self._running.values()):
            handle.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        return "cancelled"
