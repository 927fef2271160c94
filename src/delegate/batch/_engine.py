"""The batch worker of the embedded engine: claims items from our tables and runs them.

Each batch a worker serves is one serving session, an asyncio task: it claims items from
`batch_items` with leases (see `_queue.py`) and runs them as asyncio tasks. Claims and results are
batched (one transaction claims up to the free slots, one stores every result that finished
meanwhile), so the engine costs a fraction of a millisecond per item. `max_running_items` and
`max_live_items` are checked in the claim transaction under the batch row's lock, on SQLite and
PostgreSQL alike. A killed worker's items are released by any other worker as soon as its heartbeat
lapses (at once, on the same machine, when its process is gone), and run again from the start.
Workers are woken in-process when a result is stored or a batch changes, and poll the database only
for changes made by other processes (`poll_interval`).

This engine needs no server: it is for one machine (the submitting process, or `delegate worker`
processes beside it). For more machines, batches run on Temporal (`delegate.engine`), which claims
and stores through the same `WorkQueue`. (Before, each serving session ran inside a DBOS workflow
that did no work of its own: DBOS recovers a workflow only on an executor of the same id, so the
leases above did the recovering, and it left `dbos.sqlite` in every workspace. It is gone.)

Item outcomes: `completed` -> succeeded. `error`, `timed_out`, `aborted`, `cancelled` (by the
runner itself), or an exception from the runner -> the attempt failed: retried after a backoff
(`retry_delay` * 2^(n-1), at most `max_retry_delay`) until the batch's `max_attempts`, then failed.
A `UserError` from the runner (an unknown subagent type, bad criteria) fails the item at once.
The acceptance verdict is stored as it is and never causes a retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._empty import empty_set
from .._errors import UserError
from .._events import Event, EventSink, EventType
from .._lease import host_identity as _host_identity
from .._lease import process_gone as _process_gone
from .._text import safe_text
from .._usage import Usage
from ..subagents import TaskOutput
from ..workspace import HOST, Workspace, reaches
from ._model import Batch
from ._queue import AttemptResult, ClaimedItem, ServeInfo, WorkQueue
from ._store import Batches

_T = TypeVar("_T")


@runtime_checkable
class ItemRunner(Protocol):
    """Runs one item as a subagent and gives back its record. `delegate.Runtime` is one.

    `limits` are the item's run limits (`RunLimits` fields by name, checked): its runner holds
    them within its own (`RunLimits.under`), as `Runtime.run_task` does. `sinks` hear the events of
    its subagent (what the item keeps of its turns: `TURN_EVENTS`)."""

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
        sinks: Iterable[EventSink],
    ) -> TaskOutput: ...


@runtime_checkable
class InFolder(Protocol):
    """An `ItemRunner` that works in one workspace folder (`delegate.Runtime` does): a worker runs
    with it only the batches submitted in that folder, or in the same folder on shared storage
    (the folder's id is the batch's: `delegate.workspace.Home`). A runner without a folder runs
    any batch."""

    @property
    def workspace(self) -> Workspace: ...


RunnerFactory = Callable[[str, str | None], ItemRunner]
"""Builds the runner for a batch from its owner's user id and the batch's `model` (None: the
default): for workers serving many batches. A `delegate.RuntimeFactory` is one.

It is called (in a thread) once for each serving session of a batch, and the runner it built is
closed (`aclose()`, if it has one) when that session ends, so a worker that served a thousand
batches holds runners only for those it serves now."""


@dataclass(eq=False)
class _Serving:
    info: ServeInfo
    runner: ItemRunner
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: set[asyncio.Task[None]] = field(default_factory=empty_set)


@dataclass(kw_only=True, slots=True)
class _Done:
    serving: _Serving
    item: ClaimedItem
    result: AttemptResult


class BatchWorker:
    """Runs the items of every active batch in the store, until stopped.

    ```python
    batches = Batches(Store.for_workspace(ws))
    async with BatchWorker(batches, runtime) as worker:       # runtime: an ItemRunner
        batch = await worker.wait(user_id, batch_id)           # or: await worker.serve_forever()
    ```

    `concurrency` caps the items this process runs at once, over all batches (each batch's own
    caps hold across all workers). `heartbeat_ttl` is how long a silent worker keeps its claims.
    `name` names the worker in the store's `batch_workers` (default: host and process id).
    """

    def __init__(
        self,
        batches: Batches,
        runner: ItemRunner | RunnerFactory,
        *,
        name: str | None = None,
        concurrency: int = 500,
        heartbeat_ttl: float = 30.0,
        poll_interval: float = 0.5,
        retry_delay: float = 2.0,
        max_retry_delay: float = 60.0,
        emit: EventSink | None = None,
    ) -> None:
        if concurrency < 1:
            raise UserError("concurrency must be at least 1")
        if heartbeat_ttl <= 0 or poll_interval <= 0:
            raise UserError("heartbeat_ttl and poll_interval must be positive")
        self.batches = batches
        self.queue = WorkQueue(batches)
        self._runner = runner
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.concurrency = concurrency
        self.heartbeat_ttl = heartbeat_ttl
        self.poll_interval = poll_interval
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._emit = emit
        self.worker_id = ""
        self._host = _host_identity()
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delegate-batch-db")
        self._serving: dict[str, _Serving] = {}
        self._sessions: dict[str, asyncio.Task[Any]] = {}
        self._elsewhere: dict[str, int] = {}
        """Batches whose folder this worker does not reach, by id, with the epoch it looked at:
        left to a worker of their folder (looked at again when the batch moves to another epoch)."""
        self._done: list[_Done] = []
        self._in_flight = 0
        self._wake = asyncio.Event()
        self._written = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped = asyncio.Event()
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> BatchWorker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Register, release dead workers' items, start serving."""
        self.worker_id = await self._call(self.queue.register_worker, self.name, self._host, os.getpid())
        await self._sweep()
        self._started = True
        self._loop = asyncio.get_running_loop()
        self.batches.listeners.append(self._on_change)
        self._background = [
            asyncio.create_task(self._scheduler(), name="delegate-batch-scheduler"),
            asyncio.create_task(self._heartbeat(), name="delegate-batch-heartbeat"),
            asyncio.create_task(self._writer(), name="delegate-batch-writer"),
        ]

    async def stop(self) -> None:
        """Stop cleanly: running items are interrupted and given back to the queue (not counted as
        failures), results already finished are stored."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        with contextlib.suppress(ValueError):
            self.batches.listeners.remove(self._on_change)
        scheduler, heartbeat, _writer = self._background
        scheduler.cancel()
        heartbeat.cancel()
        tasks = [t for s in self._serving.values() for t in s.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._wake_all()
        await asyncio.gather(*self._sessions.values(), return_exceptions=True)
        self._written.set()
        await asyncio.gather(*self._background, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._flush()
        try:
            await self._call(self.queue.unregister_worker, self.worker_id)
        finally:
            self._db.shutdown(wait=True)
            self._stopped.set()

    async def serve_forever(self) -> None:
        """Serve until `stop()` is called (from a signal handler, say)."""
        await self._stopped.wait()

    async def wait(self, user_id: str, batch_id: str, *, poll: float = 0.25) -> Batch:
        """Serve until the batch is completed, failed or cancelled; return it."""
        while True:
            batch = await asyncio.to_thread(self.batches.get, user_id, batch_id)
            if batch.done:
                return batch
            await asyncio.sleep(poll)

    def wake(self) -> None:
        """Look for work now instead of at the next poll."""
        self._wake_all()

    # -- scheduling -----------------------------------------------------------------------------

    def _on_change(self, batch_id: str) -> None:
        # Called by `Batches` in whatever thread changed the batch.
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._wake_batch, batch_id)

    def _wake_batch(self, batch_id: str) -> None:
        self._wake.set()
        serving = self._serving.get(batch_id)
        if serving is not None:
            serving.wake.set()

    def _wake_all(self) -> None:
        self._wake.set()
        for serving in self._serving.values():
            serving.wake.set()

    async def _scheduler(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                for batch_id, epoch in await self._call(self.queue.serving):
                    if self._elsewhere.get(batch_id) == epoch:
                        continue
                    if batch_id not in self._serving and batch_id not in self._sessions:
                        self._sessions[batch_id] = asyncio.create_task(self._session(batch_id, epoch))
            except Exception as exc:  # a database hiccup: try again at the next poll
                _log(f"batch scheduler: {type(exc).__name__}: {exc}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    async def _session(self, batch_id: str, epoch: int) -> None:
        """Serve the batch (`_serve`) until it needs nothing more here."""
        try:
            await self._serve(batch_id, epoch)
        except Exception as exc:
            _log(f"batch {batch_id}: serving session failed: {type(exc).__name__}: {exc}")
        finally:
            self._sessions.pop(batch_id, None)

    async def _serve(self, batch_id: str, epoch: int) -> str:
        """The body of a serving session: claim, run, repeat, until the batch needs nothing more here."""
        if batch_id in self._serving or self._stopping:
            return "already served" if not self._stopping else "stopped"
        info = await self._call(self.queue.serve_info, batch_id)
        if info is None:
            return "missing"
        serving = _Serving(info=info, runner=await self._runner_for(info))
        away = await asyncio.to_thread(_elsewhere, serving.runner, info)
        if away is not None:
            self._elsewhere[batch_id] = info.epoch
            _log(away)
            await self._close(serving.runner)
            return "elsewhere"
        self._serving[batch_id] = serving
        try:
            return await self._serve_loop(serving)
        finally:
            del self._serving[batch_id]
            await self._close(serving.runner)

    async def _close(self, runner: ItemRunner) -> None:
        """Close `runner` if the factory built it for one serving session."""
        if runner is not self._runner:
            close = getattr(runner, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def _serve_loop(self, serving: _Serving) -> str:
        batch_id = serving.info.id
        while not self._stopping:
            serving.wake.clear()
            room = self.concurrency - self._in_flight
            try:
                claim = await self._call(self.queue.claim, batch_id, self.worker_id, room, self.heartbeat_ttl)
            except Exception as exc:  # the database is away for a moment: the running items go on
                _log(f"batch {batch_id}: claiming failed, trying again: {type(exc).__name__}: {exc}")
                await asyncio.sleep(self.poll_interval)
                continue
            if claim.newly_finished:
                self._event(serving.info, "batch.completed", {"batch_id": batch_id})
            for item in claim.items:
                self._in_flight += 1
                task = asyncio.create_task(self._run_item(serving, item), name=f"delegate-batch-item-{item.key}")
                serving.tasks.add(task)
            if claim.state in ("finished", "missing", "cancelled"):
                # Nothing here can be stored any more: stop what still runs (a cancelled batch's items).
                await self._cancel_tasks(serving)
                return claim.state
            if claim.state == "paused" and not serving.tasks:
                with contextlib.suppress(Exception):  # else they stay claimed here, and run after resume
                    await self._call(self.queue.release_waiting, batch_id, self.worker_id)
                return "paused"
            timeout = self.poll_interval
            if claim.next_due is not None:
                timeout = min(timeout, max(0.0, (claim.next_due - datetime.now(UTC)).total_seconds()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(serving.wake.wait(), timeout)
        return "stopped"

    async def _cancel_tasks(self, serving: _Serving) -> None:
        tasks = list(serving.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _runner_for(self, info: ServeInfo) -> ItemRunner:
        if isinstance(self._runner, ItemRunner):
            return self._runner
        # Off the event loop: building a runner reads definition files, and may load a model.
        return await asyncio.to_thread(self._runner, info.user_id, info.model)

    # -- running items --------------------------------------------------------------------------

    async def _run_item(self, serving: _Serving, item: ClaimedItem) -> None:
        current = asyncio.current_task()
        try:
            result = await run_attempt(serving.runner, serving.info, item)
        except asyncio.CancelledError:
            # Cancelled batch (already recorded) or a stopping worker (the item is given back).
            self._in_flight -= 1
            if current is not None:
                serving.tasks.discard(current)
            raise
        self._done.append(_Done(serving=serving, item=item, result=result))
        if current is not None:
            serving.tasks.discard(current)
        self._written.set()

    async def _writer(self) -> None:
        """Store finished attempts in batches, then wake the serving loops to start more."""
        while not self._stopping:
            await self._written.wait()
            self._written.clear()
            try:
                await self._flush()
            except Exception as exc:  # keep the results; try again shortly
                _log(f"batch writer: {type(exc).__name__}: {exc}")
                await asyncio.sleep(self.poll_interval)
                self._written.set()

    async def _flush(self) -> None:
        done, self._done = self._done, []
        if not done:
            return
        try:
            await self._store(done)
            return
        except asyncio.CancelledError:
            self._done[:0] = done
            raise
        except Exception:
            pass
        # Store each alone, so one result the database refuses cannot hold back the others (nor
        # this batch's writer, for ever): it is stored instead as a failed attempt saying why.
        # Only when that fails too is the database itself failing: keep them and try again.
        kept: list[_Done] = []
        error: Exception | None = None
        for entry in done:
            try:
                await self._store([entry])
                continue
            except Exception as exc:
                refused = exc
            try:
                await self._store([_unstorable(entry, refused)])
            except Exception as exc:
                kept.append(entry)
                error = exc
        if error is not None:
            self._done[:0] = kept
            raise error

    async def _store(self, done: list[_Done]) -> None:
        statuses = await self._call(self.queue.finish, self.worker_id, [d.result for d in done], backoff=self._backoff)
        self._in_flight -= len(done)
        for entry, status in zip(done, statuses, strict=True):
            entry.serving.wake.set()
            if status is not None:
                data = {
                    "batch_id": entry.serving.info.id,
                    "key": entry.item.key,
                    "status": "queued" if status == "waiting" else status,
                    "attempt": entry.item.attempt,
                    "retrying": status == "waiting",
                }
                self._event(entry.serving.info, "batch.item", data)
        self._wake.set()

    def _backoff(self, failures: int) -> float:
        return min(self.max_retry_delay, self.retry_delay * 2 ** (failures - 1))

    # -- liveness -------------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        interval = min(self.heartbeat_ttl / 3, 2.0)
        while not self._stopping:
            await asyncio.sleep(interval)
            try:
                if not await self._call(self.queue.heartbeat, self.worker_id, self.concurrency - self._in_flight):
                    await self._lost_lease()
                await self._sweep()
            except Exception as exc:
                _log(f"batch heartbeat: {type(exc).__name__}: {exc}")

    async def _sweep(self) -> None:
        await self._call(self.queue.sweep, self.worker_id, self._host, _process_gone, self.heartbeat_ttl)

    async def _lost_lease(self) -> None:
        """Another worker declared this one dead and took its items: drop them all, start afresh."""
        _log(f"batch worker {self.worker_id} lost its leases (no heartbeat for {self.heartbeat_ttl}s)")
        for serving in list(self._serving.values()):
            await self._cancel_tasks(serving)
        self._in_flight -= len(self._done)
        self._done = []
        self.worker_id = await self._call(self.queue.register_worker, self.name, self._host, os.getpid())

    # -- helpers --------------------------------------------------------------------------------

    async def _call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a store call on this worker's database thread (one, so its writes never contend)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, functools.partial(fn, *args, **kwargs))

    def _event(self, info: ServeInfo, type: EventType, data: dict[str, Any]) -> None:
        if self._emit is None:
            return
        with contextlib.suppress(Exception):
            self._emit(
                Event(type=type, run_id=info.run_id or f"batch-{info.id}", agent_id=f"batch:{info.id}", data=data)
            )


TURN_EVENTS = frozenset({"model.request", "model.response", "tool.started", "tool.completed", "warning", "compaction"})
"""The events an item keeps of its subagent's turns (what the page's drill-down shows of a run's
subagent: each model call with its tokens, cost and time, each tool call with its arguments and
result, bounded as events are)."""
MAX_TURN_EVENTS = 1_000
"""The most of them an attempt keeps (a note says how many more there were)."""


class _Turns:
    """An attempt's sink: keeps the turns of its subagent as their events (`TURN_EVENTS`), each
    `{type, ts, agent_id, tool_call_id, data}`, at most `MAX_TURN_EVENTS` (then a note)."""

    def __init__(self) -> None:
        self.kept: list[dict[str, Any]] = []
        self.left_out = 0

    def __call__(self, event: Event) -> None:
        if event.type not in TURN_EVENTS:
            return
        if len(self.kept) >= MAX_TURN_EVENTS:
            self.left_out += 1
            return
        safe = event.safe()
        self.kept.append(
            {
                "type": safe.type,
                "ts": safe.ts,
                "agent_id": safe.agent_id,
                "tool_call_id": safe.tool_call_id,
                "data": safe.data,
            }
        )

    def turns(self) -> list[dict[str, Any]] | None:
        if not self.kept:
            return None
        if not self.left_out:
            return self.kept
        last = self.kept[-1]
        reason = f"{self.left_out} more events of this attempt are not kept (an item keeps {MAX_TURN_EVENTS})"
        note = {"type": "warning", "ts": last["ts"], "agent_id": last["agent_id"], "data": {"reason": reason}}
        return [*self.kept, note | {"tool_call_id": None}]


async def run_attempt(runner: ItemRunner, info: ServeInfo, item: ClaimedItem) -> AttemptResult:
    """Run one attempt of an item (see `_attempt`), keeping its subagent's turns with its result."""
    turns = _Turns()
    result = await _attempt(runner, info, item, turns)
    return replace(result, turns=turns.turns())


async def _attempt(runner: ItemRunner, info: ServeInfo, item: ClaimedItem, turns: EventSink) -> AttemptResult:
    """Run one attempt of an item as its batch's subagent, and say how it ended (what a worker
    then stores): its record, or why it has none. Every engine's worker runs items through this.

    The runner's crash is this attempt's failure (retried), never the worker's; a `UserError` (an
    unknown type, bad criteria) fails the item at once: no attempt can mend it. A cancellation
    (the batch was cancelled, the worker is stopping) goes through.
    """
    try:
        record = await runner.run_task(
            subagent_type=info.subagent_type,
            prompt=item.prompt,
            description=f"{info.title} [{item.key}]"[:200],
            acceptance_criteria=item.acceptance_criteria,
            run_id=info.run_id or f"batch-{info.id}",
            user_id=info.user_id,
            tool_call_id=f"batch:{info.id}:{item.key}:{item.attempt}",
            limits=item.limits,
            sinks=[turns],
        )
    except UserError as exc:
        return _failed(item, str(exc), retry=False)
    except Exception as exc:
        return _failed(item, f"{type(exc).__name__}: {exc}")
    if isinstance(record, TaskOutput):  # pyright: ignore[reportUnnecessaryIsInstance] - a user's runner
        return AttemptResult(item_id=item.id, attempt=item.attempt, record=record)
    return _failed(item, f"the runner gave back a {type(record).__name__}, not a TaskOutput", retry=False)


def _elsewhere(runner: ItemRunner, info: ServeInfo) -> str | None:
    """Why `runner` may not run the items of `info`'s batch (its folder is another than the one
    the batch was submitted in: `delegate.workspace.reaches`), or None. Blocking: it reads the
    folder's id."""
    if not isinstance(runner, InFolder):
        return None
    root = runner.workspace.root
    if reaches(root, info.workspace, info.workspace_id):
        return None
    host = info.workspace_host or "the host it was submitted on"
    return (
        f"batch {info.id}: left to a worker of its folder: it was submitted in {info.workspace} on {host}, "
        f"and this worker works in {root} on {HOST}, another folder (not the same one on shared storage)"
    )


def _unstorable(done: _Done, exc: BaseException) -> _Done:
    """A failed attempt in place of a result the database refused, saying why (stored once), and
    what its subagent spent (counted in the item's usage all the same)."""
    error = f"the result could not be stored: {type(exc).__name__}: {exc}"[:2000]
    failed = _failed(done.item, error, retry=False, spent=done.result.usage)
    return _Done(serving=done.serving, item=done.item, result=failed)


def _failed(item: ClaimedItem, error: str, *, retry: bool = True, spent: Usage | None = None) -> AttemptResult:
    """An attempt that ended without a subagent's record (the runner failed before, or after)."""
    return AttemptResult(item_id=item.id, attempt=item.attempt, error=safe_text(error), retry=retry, spent=spent)


def _log(message: str) -> None:
    import logging

    logging.getLogger("delegate.batch").warning(message)
