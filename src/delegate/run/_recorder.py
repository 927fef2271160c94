"""A run's recorder: what the run does goes to the store as it happens, and its lease is held.

- Events, checkpoints (the lead's model answers and tool results) and finished subagents'
  records (each also its checkpoint) are queued by the event loop and written by one writer
  thread, each batch in one transaction: whatever piled up since the last one (at most
  `FLUSH_INTERVAL` ago) goes in the next, a run's events many to a row. The loop never waits for
  the database, nor for a lock, nor builds a row: the writer does. A checkpoint is on disk within
  `FLUSH_INTERVAL` and a transaction of happening.
- The same thread beats for the run's lease (`Store.heartbeat`) every `RUN_HEARTBEAT` seconds,
  and passes on a cancellation asked from another process (`delegate runs cancel`), or the stop
  of one subagent (`delegate runs stop`).
- A batch that cannot be stored (text that is not UTF-8 was made safe before; a database that
  refuses a row, a full disk) is stored piece by piece: what still fails is dropped with a note
  in the log, once. The writer never retries one transaction for ever.
- `StoredJournal` replays the checkpoints of an interrupted run, so resuming it does not ask the model
  again for an answer it gave, nor run a finished subagent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import TypeAdapter

from .._events import Event, EventSink, unheard
from .._lease import RUN_HEARTBEAT, new_owner
from .._messages import ToolCallPart, ToolResultPart
from .._record import TaskOutput
from .._usage import Usage
from ..loop import on_wait
from ..models import ModelResponse

if TYPE_CHECKING:
    from .._store import Checkpoint, KeptConversation, Store

__all__ = ["REPLAYED_NEVER", "Recorder", "StoredJournal"]

_log = logging.getLogger("delegate.recorder")


@functools.cache
def _response() -> TypeAdapter[ModelResponse]:
    return TypeAdapter(ModelResponse)


@functools.cache
def _tool_result() -> TypeAdapter[ToolResultPart]:
    return TypeAdapter(ToolResultPart)


@functools.cache
def _checkpoint_type() -> type[Checkpoint]:
    """`Checkpoint`, from the store (which a storeless process never imports: SQLAlchemy is 14 MB),
    looked up once, not once a checkpoint."""
    from .._store import Checkpoint

    return Checkpoint


_Subagent = tuple[str, TaskOutput, str | None, "KeptConversation | None"]
"""A finished subagent's record, with its run's id, its key (None: it is not kept for a resume)
and its conversation when it completed, as the store takes it: one row that is also its
checkpoint, and keeps its conversation."""


@dataclass(slots=True)
class _Written:
    """A place in the queue: `done` is set once everything queued before it is written (or the
    writer has ended: nothing waits on a writer that is gone)."""

    done: asyncio.Future[None]


_Item: TypeAlias = "Event | Checkpoint | _Subagent | _Written"

FLUSH_INTERVAL = 0.05
"""Seconds the writer lets pass between two transactions (at most), so that a busy run's events
go in a few large transactions, not many small ones: a transaction costs the writer thread more
than the hundreds of rows in it. What happens after a quiet spell is written at once."""

QUICK_SWITCH = 0.0002
"""The GIL's switch interval (seconds) while a recorder writes. Each SQLite call lets the GIL go,
and taking it back waits until the event loop's thread lets go of it, up to the interval (5 ms by
default): under a busy loop a transaction of a dozen calls took 50-80 ms, the writer fell behind,
and a run's end waited for the rest. With 0.2 ms a transaction takes what its work takes."""


class _QuickSwitch:
    """`QUICK_SWITCH` for as long as any recorder of the process writes, the interval before it
    given back when the last one is done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writing = 0
        self._before = sys.getswitchinterval()

    def __enter__(self) -> None:
        with self._lock:
            if self._writing == 0:
                self._before = sys.getswitchinterval()
                sys.setswitchinterval(min(self._before, QUICK_SWITCH))
            self._writing += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._writing -= 1
            if self._writing == 0:
                sys.setswitchinterval(self._before)


_quick_switch = _QuickSwitch()

REPLAYED_NEVER = frozenset({"task", "task_status", "task_wait", "task_stop", "task_message", "workflow"})
"""Tools whose results are not replayed on resume: `task` runs again, and its finished subagents
are reused (unfinished ones start afresh); the background tools run again on what the resumed
run has (a finished follow-up is reused by its call's id, a stop stops the restarted subagent);
`workflow` runs its script again, its finished agents answered from their journal."""


class Recorder:
    """Fans a run's events out to the sinks, and keeps them and its checkpoints in the store."""

    def __init__(self, store: Store | None, sinks: list[EventSink], *, heartbeat: float | None = None) -> None:
        self.store = store
        self.sinks = sinks
        self.run_id = ""
        self.owner = new_owner()
        self.usage = Usage()
        """The run's usage so far: as the loop last told it (`track`, once a beat), and each
        model answer since (`emit`, on the same thread: none is counted twice). Stored with the
        write of that answer's event, so a run killed at any moment reads what it spent up to its
        last answer (it read 0 tokens when killed within its first second)."""
        self._usage_written: Usage | None = None
        self.running: set[str] = set()
        """The subagents started and not ended (by their events): stored with the usage, so a
        listing says how many a live run has at work (`RunSummary.running_subagents`)."""
        self._running_written = 0
        self.heartbeat = heartbeat or RUN_HEARTBEAT
        self._on_stop: Callable[[str], None] | None = None
        """Called on the event loop with `cancel` (asked from elsewhere) or `lost` (another process
        took the run over)."""
        self._on_stop_agent: Callable[[str, str | None], None] | None = None
        """Called on the event loop with a subagent's id and a reason, for each subagent asked to
        stop from elsewhere (`delegate runs stop`, `Store.request_stop`)."""
        self._beats: list[Callable[[], None]] = []
        """Called on the writer thread after each heartbeat: how a waiting call finds a decision
        given by another process (`RunApprovals.poll`), as a cancellation is found."""
        self.dropped = 0
        self._queue: deque[_Item] = deque()
        """What is still to be written, in the order it happened. The loop appends without a lock
        (a deque's append is atomic); it takes `_cond` only to wake a writer that is `_idle`."""
        self._cond = threading.Condition(threading.Lock())
        self._idle = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._ended = False
        """The writer thread has ended: nothing queued now would be written."""

    # -- on the event loop ------------------------------------------------------------------

    def listen(
        self, on_stop: Callable[[str], None], on_stop_agent: Callable[[str, str | None], None] | None = None
    ) -> None:
        """Be told, on the event loop, of stops asked from elsewhere: `on_stop` with `cancel`
        (asked from elsewhere) or `lost` (another process took the run over); `on_stop_agent` with
        a subagent's id and a reason, for each subagent asked to stop (`delegate runs stop`)."""
        self._on_stop, self._on_stop_agent = on_stop, on_stop_agent

    def on_beat(self, beat: Callable[[], None]) -> None:
        """Call `beat` on the writer thread after each heartbeat (it must not raise)."""
        self._beats.append(beat)

    def track(self, usage: Usage) -> None:
        """The run's usage so far as the loop tells it once a beat (see `usage`)."""
        self.usage = usage

    @property
    def sink(self) -> EventSink:
        """Where the run's agents send their events: `emit`, or `unheard` when no store and no sink
        would get them."""
        return self.emit if self.store is not None or self.sinks else unheard

    def emit(self, event: Event) -> None:
        if event.type == "model.response" and isinstance(event.detail, ModelResponse):
            self.usage = self.usage + event.detail.usage
        elif event.type in _RUNNING:
            self.running.add(event.agent_id)
        elif event.type == "subagent.completed":
            self.running.discard(event.agent_id)
        if self.sinks:
            event = event.safe()  # a tool's or a model's lone surrogate reaches no sink (see `Event.safe`)
        else:  # only the store hears it: its writer makes the text safe as it writes (`json_text`,
            event.detail = None  # `safe_text`), and what `detail` holds is let go now, not once written
        if self.store is not None:
            self._queue.append(event)  # `_put`, spelled out: eight events a subagent
            if self._idle:
                with self._cond:
                    self._cond.notify()
        for sink in self.sinks:
            sink(event)

    def _put(self, item: _Item) -> None:
        self._queue.append(item)
        if self._idle:  # read after the append: a writer that went idle before it is woken
            with self._cond:
                self._cond.notify()

    def checkpoint(self, kind: str, key: str, data: dict[str, Any]) -> None:
        if self.store is None:
            return
        self._put(_checkpoint_type()(run_id=self.run_id, kind=kind, key=key, data=data))

    def subagent_finished(
        self, key: str | None, record: TaskOutput, conversation: KeptConversation | None = None
    ) -> None:
        """Store a finished subagent's record now, and (with `key`) keep it for a resume: its
        row is its checkpoint too (see `Store.checkpoints`); with the `conversation` of one that
        completed, what a follow-up continues, in the same row (turned into JSON by the writer:
        neither is changed after)."""
        if self.store is not None:
            self._put((self.run_id, record, key, conversation))

    async def written(self) -> None:
        """Wait until everything queued so far is written: a finished subagent's record about to
        change again (a follow-up) is stored as it ended, never read half-changed by the writer."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._cond:  # the writer ends under this lock too: a place queued here is always settled
            if self.store is None or self._thread is None or self._ended:
                return
            self._queue.append(_Written(done))
            self._cond.notify()
        await done

    def start(self, run_id: str) -> None:
        """Start writing and beating for `run_id` (already created or claimed with `self.owner`)."""
        self.run_id = run_id
        if self.store is None:
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._write_loop, name=f"delegate-recorder-{run_id}", daemon=True)
        self._thread.start()

    async def finish(
        self,
        status: str,
        final: str,
        usage: Usage,
        error: str | None,
        *,
        stop_reason: str = "",
        steps: int = 0,
        result: Any = None,
    ) -> bool:
        """Write what is left, then how the run ended (unless another process holds it now)."""
        store = self.store
        if store is None:
            return True
        await self._stop_writing()
        return await asyncio.to_thread(
            functools.partial(
                store.finish_run,
                self.run_id,
                status,  # type: ignore[arg-type]
                final=final,
                usage=usage,
                error=error,
                owner=self.owner,
                stop_reason=stop_reason,
                steps=steps,
                result=result,
            )
        )

    async def release(self, usage: Usage) -> bool:
        """Write what is left, then let the run's lease go, leaving it `interrupted` (to be resumed)
        with its usage so far; False if another process holds it now."""
        store = self.store
        if store is None:
            return True
        await self._stop_writing()
        return await asyncio.to_thread(store.release_run, self.run_id, self.owner, usage)

    async def _stop_writing(self) -> None:
        """Let the writer write what is queued, and end."""
        thread = self._thread
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if thread is not None:
            await asyncio.to_thread(thread.join)

    # -- on the writer thread ---------------------------------------------------------------

    def _write_loop(self) -> None:
        try:
            self._write_until_stopped()
        finally:  # stopped, or a failure nothing caught: whoever waits for a write waits no more
            with self._cond:
                self._ended = True
                left = [item.done for item in self._queue if isinstance(item, _Written)]
            self._tell_written(left)

    def _write_until_stopped(self) -> None:
        last_beat = time.monotonic()
        last_write = 0.0
        while True:
            with self._cond:
                pause = FLUSH_INTERVAL - (time.monotonic() - last_write)
                if pause > 0 and not self._stopping:
                    self._cond.wait(pause)  # let the next batch gather; only a stop cuts it short
                self._idle = True  # before looking at the queue: see `_put`
                if not (self._queue or self._stopping):
                    self._cond.wait(max(0.0, self.heartbeat - (time.monotonic() - last_beat)))
                self._idle = False
                stopping = self._stopping
            events: list[Event] = []
            checkpoints: list[Checkpoint] = []
            subagents: list[_Subagent] = []
            waiting: list[asyncio.Future[None]] = []
            queue = self._queue
            for _ in range(len(queue)):  # what happened so far, a prefix in order
                item = queue.popleft()
                if isinstance(item, Event):
                    events.append(item)
                elif isinstance(item, tuple):
                    subagents.append(item)
                elif isinstance(item, _Written):
                    waiting.append(item.done)
                else:
                    checkpoints.append(item)
            running = len(self.running)
            changed = self.usage is not self._usage_written or running != self._running_written
            usage = self.usage if changed else None
            if events or checkpoints or subagents or usage is not None:
                last_write = time.monotonic()
                with _quick_switch:
                    self._write(events, checkpoints, subagents, usage, running)
            if waiting:
                self._tell_written(waiting)
            if not (events or checkpoints or subagents or waiting) and stopping:
                return
            if not stopping and time.monotonic() - last_beat >= self.heartbeat:
                last_beat = time.monotonic()
                self._beat()

    def _tell_written(self, waiting: list[asyncio.Future[None]]) -> None:
        loop = self._loop
        assert loop is not None
        for done in waiting:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, done)

    def _write(
        self,
        events: list[Event],
        checkpoints: list[Checkpoint],
        subagents: list[_Subagent],
        usage: Usage | None,
        running: int = 0,
    ) -> None:
        assert self.store is not None
        spent = None if usage is None else (self.run_id, self.owner, usage, running)
        try:
            self.store.record(events, checkpoints, subagents, spent)
            if usage is not None:
                self._usage_written, self._running_written = usage, running
            return
        except Exception as exc:
            _log.warning(
                "run %s: storing %d events failed (%s); storing them one by one", self.run_id, len(events), exc
            )
        pieces: list[tuple[Sequence[Event], Sequence[Checkpoint], Sequence[_Subagent]]] = [
            *(([e], (), ()) for e in events),
            *(((), [c], ()) for c in checkpoints),
            *(((), (), [s]) for s in subagents),
        ]
        for piece in pieces:
            try:
                self.store.record(*piece)
            except Exception as exc:
                self.dropped += 1
                _log.error("run %s: dropped a record that cannot be stored: %s", self.run_id, exc)

    def _beat(self) -> None:
        assert self.store is not None
        try:
            held, cancel, stops = self.store.heartbeat(self.run_id, self.owner, self.usage)
        except Exception as exc:
            _log.warning("run %s: heartbeat failed: %s", self.run_id, exc)
            return
        if held and stops and self._loop is not None and self._on_stop_agent is not None:
            for agent_id, reason in stops.items():
                self._loop.call_soon_threadsafe(self._on_stop_agent, agent_id, reason)
        if (cancel or not held) and self._loop is not None and self._on_stop is not None:
            self._loop.call_soon_threadsafe(self._on_stop, "cancel" if held else "lost")
        for beat in self._beats:
            try:
                beat()
            except Exception as exc:  # one that fails (its store busy) does not end the writer
                _log.warning("run %s: a heartbeat's check failed: %s", self.run_id, exc)


_RUNNING = frozenset({"subagent.started", "subagent.message"})
"""The events after which a subagent is at work (a follow-up sets a finished one going again)."""


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class StoredJournal:
    """The lead's `delegate.loop.Journal`, kept in the store: records answers and tool results
    as checkpoints, and replays those of an interrupted run."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.answers: dict[str, dict[str, Any]] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        self.subagents: dict[str, TaskOutput] = {}
        """Finished subagents by key: the runner takes them from here (the same dict)."""
        self.conversations: dict[str, dict[str, Any]] = {}
        """The kept conversation of each completed subagent, by its id: what a follow-up
        (`task_message`) continues after a resume (see `Store.checkpoints`)."""

    def load(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Take in the checkpoints of the interrupted run being resumed."""
        for c in checkpoints:
            if c.kind == "answer":
                self.answers[c.key] = c.data
            elif c.kind == "tool":
                self.tools[c.key] = c.data
            elif c.kind == "subagent":
                self.subagents[c.key] = TaskOutput.from_dict(c.data["record"], seq=c.data["seq"])
            elif c.kind == "conversation" and "agent_id" in c.data:  # not the lead's (`_threads.keep_conversation`)
                self.conversations[str(c.data["agent_id"])] = c.data

    def answer(self, step: int) -> ModelResponse | None:
        data = self.answers.pop(str(step), None)
        return None if data is None else _response().validate_python(data)

    def record_answer(self, step: int, response: ModelResponse) -> None:
        self.recorder.checkpoint("answer", str(step), _response().dump_python(response, mode="json"))

    def tool_result(self, call: ToolCallPart) -> ToolResultPart | None:
        if call.name in REPLAYED_NEVER:
            return None
        data = self.tools.pop(call.id, None)
        return None if data is None else _tool_result().validate_python(data)

    def record_tool(self, call: ToolCallPart, result: ToolResultPart) -> None:
        if call.name not in REPLAYED_NEVER:
            self.recorder.checkpoint("tool", call.id, asdict(result))

    def scoped(self, key: str) -> _SubagentJournal:
        """The journal of the subagent kept as `key` (its lead's tool call id and prompt's index):
        its answers and tool results, so that a resumed run asks its model nothing again. Kept
        when a subagent may wait for a person (see `delegate.run._approvals`)."""
        return _SubagentJournal(self, key)


class _SubagentJournal:
    """A subagent's `Journal`, in its run's checkpoints under keys that start with its own key.
    `complete` is never replayed: it ends the subagent, which only a call that runs can do.

    What it records is held back (not even serialised) until a call of the subagent starts to
    wait for a person (`delegate.loop.on_wait`), then written, and from then on written as it
    comes: a subagent that never waits costs nothing (it starts afresh on a resume, as before),
    one that waited is replayed to that call and no further model request is made again."""

    def __init__(self, journal: StoredJournal, key: str) -> None:
        self.journal = journal
        self.key = key
        self.held: list[tuple[str, str, ModelResponse | ToolResultPart]] | None = []
        """What it recorded before any call waited (None once written: it writes as it goes)."""

    def flush(self) -> None:
        """Write what was held back, and everything from now on as it comes."""
        held, self.held = self.held, None
        for kind, key, value in held or ():
            self._write(kind, key, value)

    def _write(self, kind: str, key: str, value: ModelResponse | ToolResultPart) -> None:
        if isinstance(value, ToolResultPart):
            self.journal.recorder.checkpoint(kind, key, asdict(value))
        else:
            self.journal.recorder.checkpoint(kind, key, _response().dump_python(value, mode="json"))

    def _record(self, kind: str, key: str, value: ModelResponse | ToolResultPart) -> None:
        if self.held is None:
            self._write(kind, key, value)
            return
        if not self.held and kind == "answer":
            on_wait(self.flush)
        self.held.append((kind, key, value))

    def answer(self, step: int) -> ModelResponse | None:
        data = self.journal.answers.pop(f"{self.key}/{step}", None)
        if data is None:
            return None
        self.held = None  # it waited before it was interrupted: what it does now is written as it comes
        return _response().validate_python(data)

    def record_answer(self, step: int, response: ModelResponse) -> None:
        self._record("answer", f"{self.key}/{step}", response)

    def tool_result(self, call: ToolCallPart) -> ToolResultPart | None:
        if call.name == "complete":
            return None
        data = self.journal.tools.pop(f"{self.key}/{call.id}", None)
        return None if data is None else _tool_result().validate_python(data)

    def record_tool(self, call: ToolCallPart, result: ToolResultPart) -> None:
        if call.name != "complete":
            self._record("tool", f"{self.key}/{call.id}", result)
