"""The roster of one run's subagents: who was started, who runs now, who ended, and who is asked
to stop.

One `Roster` per run, built with the run (`delegate.run.Run`) and shared by what reads or changes
those facts: the runner that runs each subagent (`SubagentRunner`), the lead's background set
(`Background`: what ended, what is still running), the run's approver (a request names its
subagent's type) and the lead's heartbeat. Each of them takes the roster whole; none reads another's
attributes.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from time import time
from typing import Any

from .._errors import ToolError
from .._events import Event, EventSink, unheard
from .._record import TaskOutput
from .._usage import Usage
from ..tools import ToolContext


@dataclass(slots=True)
class Nest:
    """Where one agent stands in its run's tree: its `depth` below the lead (the lead's is 0), the
    deepest level its subagents may reach (`reach`: the run's `max_depth`, or less where a
    definition's `max_depth` says so; it may delegate while `depth < reach`), the `key` that names
    it within its run (None: it has none, and its subagents are not kept for a resume), and how
    many `task` calls it made so far (what names its subagents' keys)."""

    depth: int
    reach: int
    key: str | None = None
    calls: int = 0

    @property
    def delegates(self) -> bool:
        return self.depth < self.reach


class Roster:
    """The subagents of one run (see the module). `max_total` caps how many it may start in all
    (`RunLimits.max_subagents`: the lead's `task` calls and its workflows' agents alike),
    `max_workflow` how many of them its workflows may start (`RunLimits.workflow_agents`, across
    every workflow of the run); `max_depth` how many levels deep they may go
    (`RunLimits.max_depth`); `finished` are the subagents of an interrupted run that finished, by
    key: reused, not run again (a resumed run's; none for a new one)."""

    def __init__(
        self,
        run_id: str,
        emit: EventSink,
        *,
        max_total: int | None,
        max_workflow: int | None = None,
        finished: dict[str, TaskOutput] | None = None,
        max_depth: int = 1,
    ) -> None:
        self.run_id = run_id
        self.emit = emit
        self.max_total = max_total
        self.max_workflow = max_workflow
        self.max_depth = max_depth
        self.nests: dict[str, Nest] = {}
        """Where each subagent stands in the run's tree, by id (see `Nest`); the lead is in none."""
        self.finished = finished if finished is not None else {}
        """Subagents of an interrupted run that finished, by key, until each is given back (`reuse`):
        a resumed run's journal's own (`StoredJournal.subagents`), filled once the run is claimed."""
        self.records: list[TaskOutput] = []
        """The records of the subagents that ended, in the order they were called (`seq`)."""
        self.by_id: dict[str, TaskOutput] = {}
        """Every record kept (`records`), by its subagent's id."""
        self.live: dict[str, tuple[TaskOutput, ToolContext]] = {}
        """Each subagent running now, with its context (its steps and usage so far)."""
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        """The task each subagent runs in while it runs (waiting for a place too): what `stop` cancels."""
        self.stopping: dict[str, str] = {}
        """Subagents asked to stop, and why, until their task sees it."""
        self.interrupting = False
        """Set when the run is stopped to be resumed later (`Runtime.interrupt`): a subagent
        cancelled then ends `interrupted`, and is not recorded, as if its process had died."""
        self.started = 0
        self.workflow_keys: set[str] = set()
        """The workflow agents counted against `max_workflow`, by key: those of every workflow of
        the run, and, once a resumed run is claimed, those its store holds (`count_stored`)."""
        self._ids = itertools.count(1)

    @property
    def usage(self) -> Usage:
        """Usage of every subagent so far, the live ones included."""
        total = Usage()
        for record in self.records:
            total.add(record.usage)
        for record, ctx in self.live.values():
            if record.id not in self.by_id:  # a follow-up's usage is its record's, counted above
                total.add(ctx.usage)
        return total

    def nest(self, agent_id: str) -> Nest:
        """Where `agent_id` stands: a subagent's own `Nest`, the lead's (depth 0) for any other."""
        return self.nests.get(agent_id) or Nest(0, self.max_depth)

    def reserve(self, count: int) -> int:
        """Count `count` subagents against the run's total, or refuse them all; return the `seq`
        of the first (the lead's calls reserve in the order it made them; a workflow's agents as
        each starts: `admit`)."""
        if self.max_total is not None and self.started + count > self.max_total:
            left = max(0, self.max_total - self.started)
            raise ToolError(
                f"this run may start at most {self.max_total} subagents and has started {self.started}; "
                f"{left} more can start. Do the rest of the work yourself or with fewer subagents."
            )
        self.started += count
        return self.started - count

    def admit(self, key: str) -> int:
        """Count the workflow agent kept as `key` against the run's caps, or refuse it (a
        `ToolError` that says which cap): `max_total` as a `task` call's subagent is (`reserve`),
        and `max_workflow` by key, so that an agent answered from a resumed run's journal counts
        once. Its `seq`."""
        if (
            key not in self.workflow_keys
            and self.max_workflow is not None
            and len(self.workflow_keys) >= self.max_workflow
        ):
            raise ToolError(
                f"this run may start at most {self.max_workflow} workflow agents (workflow_agents), "
                "across all its workflows, and has started them"
            )
        seq = self.reserve(1)
        self.workflow_keys.add(key)
        return seq

    def count_stored(self, keys: Iterable[str]) -> None:
        """Count the workflow agents a resumed run's store holds (by key) against `max_workflow`:
        a resume never gives a run's workflows a fresh allowance, even where a changed script runs
        other agents than the journal's."""
        self.workflow_keys.update(keys)

    @property
    def agents_left(self) -> int | None:
        """How many more workflow agents may start (None: no cap)."""
        left = [
            *([self.max_total - self.started] if self.max_total is not None else []),
            *([self.max_workflow - len(self.workflow_keys)] if self.max_workflow is not None else []),
        ]
        return max(0, min(left)) if left else None

    def new_id(self, key: str | None) -> str:
        """The id of the next subagent: `sub<n>` in call order (a reused one keeps its own)."""
        n = next(self._ids)
        reused = self.finished.get(key) if key is not None else None
        return reused.id if reused is not None else f"sub{n}"

    def reuse(self, key: str | None, *, numbered: bool) -> TaskOutput | None:
        """The subagent of `key` that finished before the run was interrupted, kept again (None:
        it runs). `numbered`: its id was given out already (else its number is passed over, so
        that the subagents started after it keep theirs)."""
        reused = self.finished.pop(key, None) if key is not None else None
        if reused is not None:
            if not numbered:
                next(self._ids)
            self.keep(reused)
        return reused

    def reuse_below(self, key: str) -> list[TaskOutput]:
        """The nested subagents below the finished one of `key`, kept again with it: they finished
        before it did (their keys begin with its own, see `_task._keys`)."""
        below = [k for k in self.finished if k.startswith(f"{key}>")]
        records = [self.finished.pop(k) for k in below]
        for record in records:
            self.keep(record)
        return records

    def keep(self, record: TaskOutput) -> None:
        """Keep `record` in `records`, in call order (most end in it: appended)."""
        self.by_id[record.id] = record
        if not self.records or self.records[-1].seq <= record.seq:
            self.records.append(record)
        else:
            bisect.insort(self.records, record, key=_seq)

    def stop(self, agent_id: str, reason: str) -> bool:
        """Stop one running subagent (foreground or background, waiting for a place or not): it
        ends `cancelled`, stop reason `stopped`, its usage kept, and its caller gets that result.
        False if no subagent of that id runs."""
        task = self.tasks.get(agent_id)
        if task is None or agent_id in self.stopping or task.done():
            return False
        self.stopping[agent_id] = reason
        task.cancel()
        return True

    def stop_when_started(self, stops: Mapping[str, str]) -> None:
        """Stop these subagents as soon as they start: stops asked of a process that died."""
        self.stopping.update(stops)

    def stopped(self, agent_id: str) -> str | None:
        """Why `agent_id` was stopped, when the cancellation being handled is that stop alone
        (None: the run itself is cancelled, or nobody stopped it)."""
        reason = self.stopping.pop(agent_id, None)
        task = asyncio.current_task()
        if reason is None or task is None:
            return None
        return reason if task.uncancel() == 0 else None

    def interrupt(self) -> None:
        """The run is stopped to be resumed later: what is cancelled now ends `interrupted`."""
        self.interrupting = True

    def event(self, record: TaskOutput, type: Any, data: dict[str, Any]) -> None:
        if self.emit is not unheard:  # by position, as `ToolContext.event` (see `Event`)
            self.emit(Event(type, self.run_id, record.id, record.parent_agent_id, record.tool_call_id, data, time()))

    def heartbeat(self) -> None:
        """One `subagent.heartbeat` per live subagent, with its steps and tokens so far."""
        for record, ctx in list(self.live.values()):
            self.event(record, "subagent.heartbeat", {"usage": ctx.usage.to_dict(), "elapsed": elapsed(record)})


def elapsed(record: TaskOutput) -> float:
    """Seconds since `record`'s subagent started."""
    return (datetime.now(UTC) - record.started_at).total_seconds() if record.started_at else 0.0


def _seq(record: TaskOutput) -> int:
    return record.seq
