"""The Temporal engine: a client to start and signal executions, and the worker that serves them.

Imported only when a `temporal://` engine is used (`temporalio` is the `temporal` extra), never by
`import delegate`.

```python
engine = await TemporalEngine.connect(EngineSettings.parse("temporal://127.0.0.1:7233"))
await engine.start_batch(batch_id, epoch)       # idempotent: one execution per (batch, epoch)
async with TemporalWorker(engine, batches, runtime_factory) as worker:   # `delegate worker`
    await worker.serve_forever()
```

A worker serves one task queue (`EngineSettings.task_queue`) against one store: every worker of
a deployment is started with the same store (PostgreSQL, for several machines) and the same queue.
Besides serving Temporal's tasks, each worker looks at the store every `poll_interval` for batches
stored for Temporal that have no execution yet (submitted, resumed or retried by a process that
could not reach Temporal, such as the HTTP server of another deployment) and starts theirs: the
execution's id makes starting it twice a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._errors import UserError
from .._events import EventSink
from ..batch import Batches, ItemRunner, RunnerFactory, WorkQueue
from ._batch_activities import BatchActivities
from ._batch_workflow import WORKFLOW, BatchRun, BatchWorkflow, workflow_id
from ._run_activities import RunActivities
from ._run_workflow import RUN_WORKFLOW, RunRequest, RunWorkflow, run_workflow_id
from ._settings import EngineSettings

_log = logging.getLogger("delegate.engine")
RESTART_AFTER = 30.0
"""Seconds before a worker makes sure again that a batch it started still has its execution."""


class TemporalEngine:
    """A connection to the Temporal server of `settings`."""

    def __init__(self, settings: EngineSettings, client: Client) -> None:
        self.settings = settings
        self.client = client

    @classmethod
    async def connect(cls, settings: EngineSettings) -> TemporalEngine:
        """Connect, or a `UserError` that names the address when no server answers there."""
        if not settings.temporal:
            raise UserError("this needs a Temporal engine: pass --engine temporal://HOST:PORT[/NAMESPACE]")
        try:
            client = await Client.connect(settings.address, namespace=settings.namespace)
        except RuntimeError as exc:  # the core's connection error
            raise UserError(f"no Temporal server answered at {settings.address}: {exc}") from exc
        return cls(settings, client)

    @property
    def task_timeout(self) -> timedelta:
        """How long a workflow task may stay with a silent worker: the heartbeat timeout, at most
        Temporal's default of 10 s (a worker that died mid-task costs its executions that long)."""
        return timedelta(seconds=min(10.0, self.settings.heartbeat_timeout))

    async def start_batch(self, batch_id: str, epoch: int) -> None:
        """Make sure the batch's execution of this epoch exists (started once, whoever asks)."""
        run = BatchRun(batch_id=batch_id, epoch=epoch, heartbeat_timeout=self.settings.heartbeat_timeout)
        with contextlib.suppress(WorkflowAlreadyStartedError):  # it ran and ended: nothing to do
            await self.client.start_workflow(
                WORKFLOW,
                run,
                id=workflow_id(batch_id, epoch),
                task_queue=self.settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"delegate batch {batch_id} (epoch {epoch})",
                task_timeout=self.task_timeout,
            )

    async def start_run(self, request: RunRequest) -> WorkflowHandle[Any, str]:
        """Start the run's execution (once: starting it again answers the one there is)."""
        return await self.client.start_workflow(
            RUN_WORKFLOW,
            request,
            id=run_workflow_id(request.run_id),
            task_queue=self.settings.task_queue,
            result_type=str,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"delegate run {request.run_id}",
            task_timeout=self.task_timeout,
        )

    async def batch_changed(self, batch_id: str, epoch: int) -> None:
        """Tell the batch's execution to look at the store now (it would at its next poll)."""
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id(batch_id, epoch))
        with contextlib.suppress(RPCError):  # it has ended, or not started yet: nothing to wake
            await handle.signal("changed")


class TemporalWorker:
    """Serves a deployment's task queue in this process: batch executions and their items.

    `runner` runs items (a `RunnerFactory` builds one per user and model). `concurrency` caps the
    items this process runs at once (each batch's own caps hold across all workers). `runs`, when
    given, also serves runs (`delegate run --engine temporal://...`) whose workspace is this worker's.
    """

    def __init__(
        self,
        engine: TemporalEngine,
        batches: Batches,
        runner: ItemRunner | RunnerFactory,
        *,
        concurrency: int = 100,
        poll_interval: float = 1.0,
        retry_delay: float = 2.0,
        max_retry_delay: float = 60.0,
        identity: str | None = None,
        emit: EventSink | None = None,
        runs: RunActivities | None = None,
    ) -> None:
        if concurrency < 1:
            raise UserError("concurrency must be at least 1")
        self.engine = engine
        self.queue = WorkQueue(batches)
        self.identity = identity or f"{os.getpid()}@{socket.gethostname()}"
        self.poll_interval = poll_interval
        settings = engine.settings
        self.activities = BatchActivities(
            batches,
            runner,
            heartbeat_timeout=settings.heartbeat_timeout,
            retry_delay=retry_delay,
            max_retry_delay=max_retry_delay,
            emit=emit,
        )
        self._worker = Worker(
            engine.client,
            task_queue=settings.task_queue,
            workflows=[BatchWorkflow, RunWorkflow],
            activities=[*self.activities.activities(), *(runs.activities() if runs is not None else [])],
            max_concurrent_activities=concurrency,
            identity=self.identity,
            # A dead worker's cached executions move to another worker after this, not 10 s.
            sticky_queue_schedule_to_start_timeout=engine.task_timeout,
            # The workflows import nothing of delegate's at run time; what they import at load
            # time (their module's package) is passed through instead of re-imported per run.
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("delegate")
            ),
        )
        self._started: dict[tuple[str, int], float] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopped = asyncio.Event()

    async def __aenter__(self) -> TemporalWorker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._worker.run(), name="delegate-temporal-worker"),
            asyncio.create_task(self._watch(), name="delegate-temporal-batches"),
        ]

    async def stop(self) -> None:
        """Stop taking work; running items are given back to Temporal, which runs them elsewhere."""
        if self._stopped.is_set():
            return
        self._tasks[1].cancel()
        with contextlib.suppress(Exception):
            await self._worker.shutdown()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.activities.aclose()
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Serve until `stop()` (from a signal handler, say); re-raises the worker's fatal error."""
        done, _ = await asyncio.wait(
            {self._tasks[0], asyncio.ensure_future(self._stopped.wait())}, return_when="FIRST_COMPLETED"
        )
        for task in done:
            if task is self._tasks[0] and not self._stopped.is_set():
                task.result()

    async def _watch(self) -> None:
        """Start the executions of batches stored for Temporal that have none yet."""
        while True:
            try:
                for batch_id, epoch in await asyncio.to_thread(self.queue.serving, "temporal"):
                    await self._ensure(batch_id, epoch, time.monotonic())
            except Exception as exc:  # the server or the database is away for a moment: look again
                _log.warning("temporal worker: starting batches: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.poll_interval)

    async def _ensure(self, batch_id: str, epoch: int, now: float) -> None:
        last = self._started.get((batch_id, epoch))
        if last is not None and now - last < RESTART_AFTER:
            return
        await self.engine.start_batch(batch_id, epoch)
        self._started[(batch_id, epoch)] = now


class Notifier:
    """A `Batches` listener that wakes a batch's execution after each change made in this process
    (pause, resume, cancel, retry), or starts the one a submit, resume or retry needs, from
    whatever thread made the change."""

    def __init__(self, engine: TemporalEngine, batches: Batches, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.queue = WorkQueue(batches)
        self.loop = loop

    def __call__(self, batch_id: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed
            asyncio.run_coroutine_threadsafe(self.changed(batch_id), self.loop)

    async def changed(self, batch_id: str) -> None:
        info = await asyncio.to_thread(self.queue.serve_info, batch_id)
        if info is None:
            return
        for epoch in (info.epoch - 1, info.epoch):  # a resume or retry has just left the one before
            await self.engine.batch_changed(batch_id, epoch)
        if (batch_id, info.epoch) in await asyncio.to_thread(self.queue.serving, "temporal"):
            await self.engine.start_batch(batch_id, info.epoch)


def notifier(engine: TemporalEngine, batches: Batches, loop: asyncio.AbstractEventLoop) -> Notifier:
    return Notifier(engine, batches, loop)
