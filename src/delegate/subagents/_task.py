"""The `task` tool: start subagents with a fresh context over the shared workspace.

One `SubagentRunner` serves one run: it builds each subagent (tools, model, system prompt), runs
it under the run's parallel cap and total cap, turns whatever happens to it into a `TaskOutput`,
and keeps the records. `task_tool` builds the tool the lead calls, its schema made from the
catalogue.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import itertools
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from time import time
from typing import Any

from .._agents import Catalogue, Subagent, tools_for
from .._errors import ToolError, WorkspaceError
from .._events import Event, unheard
from .._frontmatter import CatalogueWarning
from .._messages import Message
from .._record import Change, Isolation
from .._usage import Usage
from ..loop import AgentResult, AgentSpec, Journal, opening_choices, passed_deadline, run_agent
from ..mcp import TOOL_SEARCH
from ..models import FREE_CHOICES, IdChoice, Model, credentials_hint, has_credentials
from ..permissions import HookEvent
from ..tools import HookSet, Tool, ToolContext, ToolReturn
from ..workspace import Layer
from ._acceptance import CRITERIA_SYSTEM_NOTE, check_criteria, frame_criteria, snapshot_before
from ._assemble import RunScope, assemble, toolset
from ._background import BACKGROUND_HINT, Background, Conversation
from ._complete import Delivery, validate_paths
from ._hooks import run_checked
from ._output import MAX_RESULT_CHARS, RESULTS_DIR, TaskOutput, kept, read, render_whole
from ._overlay import add_recovered, check_asked, isolation_for, layer_for, needs_layer, settle
from ._prompts import prompt_shaped, task_description
from ._snapshot import SNAPSHOT_SYSTEM_NOTE, build_snapshot
from ._task_args import Kind, kind, task_schema, validate

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

MAX_KEPT_CHARS = 4_000
"""A `task` call's results longer than this keep only status lines and artifact lists in compaction."""


class SubagentRunner:
    """Runs the subagents of one run and keeps their records.

    `run` is what the run's agents share (see `RunScope`): its limits cap the subagents running at
    once (`max_parallel`) and in all (`max_subagents`). `tools` are every tool the run knows by
    name; `parent_tools` the names the lead has (what an inheriting subagent gets). `model_for`
    turns a model string into a model (cached by the caller). `uploaded_files` is the parent's
    uploads state: each subagent gets a deep copy.
    """

    def __init__(
        self,
        run: RunScope,
        *,
        tools: dict[str, Tool],
        parent_tools: Sequence[str],
        parent_model: Model,
        subagent_model: Model | None,
        model_for: Callable[[str], Model],
        uploaded_files: list[dict[str, Any]] | None = None,
        finished: dict[str, TaskOutput] | None = None,
        on_finish: Callable[[str | None, TaskOutput, Conversation | None], None] | None = None,
    ) -> None:
        self.scope = run
        self.run_id = run.run_id
        self.workspace = run.workspace
        self.emit = run.emit
        self.tools = tools
        self.parent_tools = list(parent_tools)
        self.parent_model = parent_model
        self.subagent_model = subagent_model
        self.model_for = model_for
        self.max_total = run.limits.max_subagents
        self.budget = run.budget
        self.uploaded_files = uploaded_files
        self.skills = run.skills
        self.finished = finished or {}
        """Subagents of an interrupted run that finished, by key: reused, not run again."""
        self.on_finish = on_finish
        """Told of each subagent that ends (with its key, when it has one), as it ends, with its
        conversation when it completed (what a follow-up continues, kept for one after a resume)."""
        self.written: Callable[[], Awaitable[None]] | None = None
        """Waits until what `on_finish` was told is stored (`Recorder.written`): a follow-up
        changes its subagent's record only once the record as it ended is written."""
        self.journal_for: Callable[[str], Journal] | None = None
        """The journal of the subagent kept as a key (None: subagents keep none; see `StoredJournal.scoped`)."""
        self.records: list[TaskOutput] = []
        """The records of the subagents that ended, in the order they were called (`seq`)."""
        self.live: dict[str, tuple[TaskOutput, ToolContext]] = {}
        self.interrupting = False
        """Set when the run is stopped to be resumed later (`Runtime.interrupt`): a subagent
        cancelled then ends `interrupted`, and is not recorded, as if its process had died."""
        self.started = 0
        self.by_id: dict[str, TaskOutput] = {}
        """Every record kept (`records`), by its subagent's id."""
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        """The task each subagent runs in while it runs (waiting for a place too): what `stop` cancels."""
        self.stopping: dict[str, str] = {}
        """Subagents asked to stop, and why, until their task sees it."""
        self.definitions: dict[str, Subagent] = {}
        self.conversations: dict[str, Conversation] = {}
        """The conversation of each completed subagent, by id: what a follow-up continues."""
        self.saved_conversations: dict[str, dict[str, Any]] = {}
        """Conversations kept before the run was interrupted (see `StoredJournal`)."""
        self.recovered: dict[str, list[Change]] = {}
        """What the merges a kill cut short changed, finished as the run resumed, by layer (agent id,
        `sub1-2` for a follow-up's): put in the record of the stretch that runs again (`add_recovered`)."""
        self.background = Background(self)
        parallel = run.limits.max_parallel
        self._semaphore = asyncio.Semaphore(parallel) if parallel else None
        self._ids = itertools.count(1)
        self._prepared: dict[Kind, tuple[list[Tool], Model]] = {}
        self._isolations: dict[tuple[Kind, str | None], tuple[Isolation, bool]] = {}
        self._specs: dict[tuple[Kind, tuple[str, ...]], AgentSpec] = {}

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

    @staticmethod
    def fill(record: TaskOutput, result: AgentResult) -> None:
        """Put what the agent's loop ended with into `record`."""
        _fill(record, result)

    def reserve(self, count: int, *, capped: bool = True) -> int:
        """Count `count` subagents against the run's total, or refuse them all; return the `seq`
        of the first (the lead's calls reserve in the order it made them; a workflow's, uncapped, its own)."""
        if capped and self.max_total is not None and self.started + count > self.max_total:
            left = max(0, self.max_total - self.started)
            raise ToolError(
                f"this run may start at most {self.max_total} subagents and has started {self.started}; "
                f"{left} more can start. Do the rest of the work yourself or with fewer subagents."
            )
        self.started += count
        return self.started - count

    def prepare(self, definition: Subagent) -> tuple[list[Tool], Model]:
        """The tools and model of `definition`'s subagents; a `ToolError` if it cannot run."""
        prepared = self._prepared.get(kind(definition))
        if prepared is None:
            inherited = [n for n in self.parent_tools if not getattr(self.tools.get(n), "talks_to_user", False)]
            names = tools_for(definition, inherited, list(self.tools))
            tools = [self.tools[n] for n in names if n not in ("complete", TOOL_SEARCH)]
            for first in opening_choices(definition.first_tool_choice):
                if first not in FREE_CHOICES and first not in names and first != "complete":
                    raise ToolError(
                        f"subagent type {definition.name!r} must call {first!r} first but does not have that tool "
                        f"(its tools: {', '.join([*names, 'complete'])}); fix its definition"
                    )
            prepared = (toolset(definition, tools, self.scope), self._model(definition))
            self._prepared[kind(definition)] = prepared
            self.definitions[definition.name] = definition
        return prepared

    def compaction_model(self, definition: Subagent) -> Model | None:
        """The model that compacts `definition`'s subagents' conversations (None: the run's)."""
        spec = definition.compaction_model
        return None if spec is None else spec if not isinstance(spec, str) else self.model_for(spec)

    def command_refusal(self, command: str) -> str | None:
        """Why the run's permission rules would not let a `bash` call of `command` run without
        asking (None: they would): an acceptance check then reads the subagent's own run of it."""
        guard = self.scope.guard
        if guard is None:
            return None
        verdict = guard.policy.verdict("bash", {"command": command})
        return None if verdict.kind == "allow" else verdict.reason

    def new_id(self, key: str | None) -> str:
        """The id of the next subagent: `sub<n>` in call order (a reused one keeps its own)."""
        n = next(self._ids)
        reused = self.finished.get(key) if key is not None else None
        return reused.id if reused is not None else f"sub{n}"

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

    def _stopped(self, agent_id: str) -> str | None:
        """Why `agent_id` was stopped, when the cancellation being handled is that stop alone
        (None: the run itself is cancelled, or nobody stopped it)."""
        reason = self.stopping.pop(agent_id, None)
        task = asyncio.current_task()
        if reason is None or task is None:
            return None
        return reason if task.uncancel() == 0 else None

    def _model(self, definition: Subagent) -> Model:
        """The model of `definition`'s subagents. A model that came through the alias table and
        whose provider has no key runs on the lead's model, with a `warning` event."""
        spec = definition.model
        if isinstance(spec, str) and definition.model_fallback and not has_credentials(spec):
            written = definition.written_model or spec
            reason = (
                f"model {written!r} ({spec}) has no {credentials_hint(spec)} set: type {definition.name!r} "
                f"runs on the lead's model {self.parent_model.name}"
            )
            warning = CatalogueWarning(definition.source, reason)
            self.emit(
                Event(
                    type="warning",
                    run_id=self.run_id,
                    agent_id="lead",
                    data=warning.to_dict() | {"subagent_type": definition.name},
                )
            )
            return self.parent_model
        return _resolve(definition, self.subagent_model, self.parent_model, self.model_for)

    async def run(self, call: SubagentCall) -> TaskOutput:
        """Run one subagent to its end. Only cancellation of the caller escapes (a `stop` of this
        subagent does not: it ends it); anything else that happens to the subagent becomes its
        `TaskOutput`. A subagent of `call.key` that finished before the run was interrupted is
        given back as it was, not run again."""
        reused = self.finished.pop(call.key, None) if call.key is not None else None
        if reused is not None:
            if call.agent_id is None:
                next(self._ids)  # keep the numbering of the subagents started after it
            if self.budget is not None:  # what it spent before the interruption counts against the run's budget
                self.budget.spend(reused.usage, reused.type)
                self.budget.requests += reused.usage.requests
            self._keep(reused)
            return reused
        agent_id = call.agent_id or self.new_id(None)
        task = asyncio.current_task()
        if task is not None:
            self.tasks[agent_id] = task
        try:
            if agent_id in self.stopping:  # stopped before it began
                return self._never_started(self.stopping.pop(agent_id), call, agent_id)
            if self._semaphore is None:
                return await self._run(call, agent_id)
            try:
                await self._semaphore.acquire()
            except asyncio.CancelledError:
                reason = self._stopped(agent_id)
                if reason is None:
                    raise
                return self._never_started(reason, call, agent_id)
            try:
                return await self._run(call, agent_id)
            finally:
                self._semaphore.release()
        finally:
            self.tasks.pop(agent_id, None)

    def _record(self, call: SubagentCall, agent_id: str, model: str) -> TaskOutput:
        return TaskOutput(
            id=agent_id,
            type=call.definition.name,
            description=call.description,
            tool_call_id=call.tool_call_id,
            parent_agent_id=call.parent.agent_id,
            status="running",
            stop_reason=None,
            summary="",
            started_at=datetime.now(UTC),
            model=model,
            seq=call.seq,
            background=call.background,
        )

    def _never_started(self, reason: str, call: SubagentCall, agent_id: str) -> TaskOutput:
        """The record of a subagent stopped while it waited for a place: it did nothing."""
        _, model = self.prepare(call.definition)
        record = self._record(call, agent_id, model.name)
        started = {"type": call.definition.name, "description": call.description, "background": call.background}
        if call.phase is not None:
            started["phase"] = call.phase
        self.event(record, "subagent.started", started)
        record.status, record.stop_reason, record.error = "cancelled", "stopped", _stop_note(reason)
        self._finish(record, call.key)
        return record

    async def _run(self, call: SubagentCall, agent_id: str) -> TaskOutput:
        definition = call.definition
        tools, model = self.prepare(definition)
        record = self._record(call, agent_id, model.name)
        record.isolation, writes = self._isolation(definition, tools, call.isolation)
        layer = self.layer(record, tools) if writes else None
        workspace = self.workspace if layer is None else replace(self.workspace, layer=layer)
        if definition.command_rules:  # its Bash(...) rules, for its commands only
            workspace = replace(workspace, commands=replace(workspace.commands, rules=definition.command_rules))
        ctx = self.context(record, call.parent, call.tool_call_id, workspace)
        record.usage = ctx.usage
        if self.emit is not unheard:
            started: dict[str, Any] = {"type": definition.name, "description": call.description}
            if call.background:
                started["background"] = True
            if call.phase is not None:
                started["phase"] = call.phase
            self.event(record, "subagent.started", started)
        self.live[record.id] = (record, ctx)

        work = self._work(call, record, ctx, tools, model, layer)
        return await self.conclude(record, ctx, call.key, work, steps_before=0, layer=layer)

    async def _work(
        self,
        call: SubagentCall,
        record: TaskOutput,
        ctx: ToolContext,
        tools: list[Tool],
        model: Model,
        layer: Layer | None,
    ) -> None:
        """A subagent's work, from its opening to its delivered result (a method, not a closure:
        a fan-out of thousands keeps each subagent's state in one coroutine, not a function and
        its cells, for the garbage collector to walk)."""
        definition, prompt, criteria, snapshot, key = (
            call.definition,
            call.prompt,
            call.criteria,
            call.snapshot,
            call.key,
        )
        baseline = snapshot_before(criteria, self.workspace) if criteria else None
        journal = self.journal_for(key) if self.journal_for is not None and key is not None else None
        spec = await self._spec(definition, model, tools, prompt, _notes(snapshot, criteria), journal)
        kickoff = prompt if not criteria else f"{prompt}\n\n{frame_criteria(criteria)}"
        slash = self.skills.slash_command(prompt, definition.skills)
        messages = [m for m in (snapshot, slash) if m is not None] + [Message.user(kickoff)]
        hooks = self.scope.guard.hooks if self.scope.guard is not None else None
        if hooks is not None and (refused := await _refused(hooks, ctx, definition, prompt)) is not None:
            record.status, record.stop_reason, record.error = "aborted", "refused", refused  # nothing ran
            if layer is not None:
                await self.settled(record, layer)
            return
        result = await (
            run_agent(spec, ctx, messages)
            if hooks is None
            else run_checked(spec, ctx, messages, hooks, definition.name)
        )
        _fill(record, result)
        if layer is not None:
            await self.settled(record, layer)
        if criteria and baseline is not None:
            verdicts = await check_criteria(
                criteria, self.workspace, baseline, transcript=result.messages, refusal=self.command_refusal
            )
            record.acceptance = [asdict(v) for v in verdicts]
        await self.deliver(record, definition, spec.instructions, result, key, [])

    def _isolation(self, definition: Subagent, tools: list[Tool], asked: str | None) -> tuple[Isolation, bool]:
        """How `definition`'s subagents run when the lead asked for `asked` (`isolation_for`), and
        whether that needs a layer (`needs_layer`): decided once a type, not once a subagent."""
        found = self._isolations.get((kind(definition), asked))
        if found is None:
            isolation = isolation_for(definition, tools, asked)
            found = self._isolations[(kind(definition), asked)] = (isolation, needs_layer(isolation, tools))
        return found

    async def _spec(
        self,
        definition: Subagent,
        model: Model,
        tools: list[Tool],
        prompt: str,
        notes: tuple[str, ...],
        journal: Journal | None,
    ) -> AgentSpec:
        """What the loop runs for a subagent of `definition` (`assemble`). The same for every
        subagent of a type with the same notes when it keeps no journal, has no gates (a gate
        follows one agent's conversation) and its opening does not depend on its prompt: then
        assembled once and shared (the loop does not change a spec)."""
        shared = journal is None and not prompt_shaped(model, definition.first_tool_choice)
        spec = self._specs.get((kind(definition), notes)) if shared else None
        if spec is None:
            scope = self.scope
            spec = await assemble(
                definition,
                scope,
                model=model,
                tools=tools,
                prompt=prompt,
                notes=notes,
                journal=journal,
                compaction_model=self.compaction_model(definition),
            )
            if shared and not spec.gates:
                self._specs[(kind(definition), notes)] = spec
        return spec

    def context(
        self, record: TaskOutput, parent: ToolContext, tool_call_id: str | None, workspace: Any = None
    ) -> ToolContext:
        """A fresh context for one stretch of `record`'s work (its first task, or a follow-up)."""
        return ToolContext(
            run_id=self.run_id,
            agent_id=record.id,
            workspace=workspace or self.workspace,
            emit=self.emit,
            parent_agent_id=parent.agent_id,
            parent_tool_call_id=tool_call_id,
            user_id=self.scope.user_id,
            timezone=self.scope.timezone,
            uploaded_files=None if self.uploaded_files is None else copy.deepcopy(self.uploaded_files),
        )

    async def deliver(
        self,
        record: TaskOutput,
        definition: Subagent,
        system: str,
        result: AgentResult,
        key: str | None,
        follow_ups: list[str],
    ) -> None:
        """After a stretch of work: write a result too long for the lead, and keep a completed
        subagent's conversation for a follow-up (stored with its record as it ends, `_finish`,
        for one after a resume)."""
        whole = render_whole(record)
        if len(whole) > MAX_RESULT_CHARS:  # too long for the lead: written whole for it to read
            await asyncio.to_thread(self._write_whole, record, whole)
        if record.status != "completed":
            self.conversations.pop(record.id, None)
            return
        self.conversations[record.id] = Conversation(definition, system, result.messages, key, follow_ups)

    async def conclude(
        self,
        record: TaskOutput,
        ctx: ToolContext,
        key: str | None,
        work: Awaitable[None],
        *,
        steps_before: int,
        layer: Layer | None = None,
    ) -> TaskOutput:
        """Run `work` (which fills `record`), and end `record` whatever happens to it: stopped, a
        crash (its own result, never its siblings'), or cancelled with the run (raised on). Its
        `layer`, if it writes in one and `work` did not settle it, is settled as it ends (in a
        thread, to its end: a cancellation meanwhile is raised once the record is finished)."""
        again = False  # cancelled again while its layer settled
        try:
            await work
        except asyncio.CancelledError:
            reason = self._stopped(record.id)
            if record.status == "completed":  # it had completed (its layer settled, see `settled`): too late
                self._finish(record, key)
                if reason is None:
                    raise
                return record
            record.steps = steps_before + ctx.steps
            again = layer is not None and not record.layer and await self.settled(record, layer, raising=False)
            if reason is None:
                deadline = None if self.interrupting else passed_deadline()
                if deadline is not None:  # the run's deadline, not a person, ended it
                    record.status, record.stop_reason = "timed_out", "run_timeout"
                    record.error = f"the run's deadline ({deadline:g}s) passed while it ran"
                else:
                    why = "interrupted" if self.interrupting else "cancelled"
                    record.status, record.stop_reason = why, why
                self._finish(record, None, stored=not self.interrupting)  # not kept for a resume: it starts afresh
                raise
            record.status, record.stop_reason, record.error = "cancelled", "stopped", _stop_note(reason)
            self.conversations.pop(record.id, None)
        except Exception as exc:  # a crash of this subagent is its own result, never its siblings'
            record.status, record.stop_reason, record.steps = "error", "crash", steps_before + ctx.steps
            record.error = f"{type(exc).__name__}: {self.workspace.shown(str(exc))}"
            self.conversations.pop(record.id, None)
            again = layer is not None and not record.layer and await self.settled(record, layer, raising=False)
        self._finish(record, key)
        if again:
            raise asyncio.CancelledError
        return record

    async def settled(self, record: TaskOutput, layer: Layer, *, raising: bool = True) -> bool:
        """Merge (or keep) the layer of a subagent that ended a stretch of work (`_overlay.settle`),
        in a thread and to its end however often a stop or a cancel comes meanwhile: its record
        settled (`workspace.merged` / `workspace.conflict` emitted), that is raised (or said: True)."""
        merging = asyncio.ensure_future(asyncio.to_thread(settle, record, layer, self.workspace))
        cancelled = False
        while not merging.done():
            try:
                await asyncio.shield(merging)
            except asyncio.CancelledError:
                cancelled = True
        add_recovered(record, self.recovered.pop(layer.agent_id, None))
        if (event := merging.result()) is not None:
            self.event(record, event[0], event[1])
        if cancelled and raising:
            raise asyncio.CancelledError
        return cancelled

    def layer(self, record: TaskOutput, tools: Sequence[Tool], stretch: int = 1) -> Layer | None:
        """The layer of one stretch of `record`'s work (its first task, or a follow-up), as its
        isolation says (None: it writes the workspace)."""
        agent = record.id if stretch == 1 else f"{record.id}-{stretch}"
        return layer_for(record.isolation, self.workspace, self.run_id, agent, tools)

    def _write_whole(self, record: TaskOutput, text: str) -> None:
        """Write a result too long for the lead to `RESULTS_DIR/<run>/<agent>.md`, and list that
        file first among its artifacts (if it cannot be written, the lead reads it shortened).
        Written through the workspace's view from a handle, as a tool writes: the folder is the
        agents' to change, and a link they put there leads nowhere the view does not."""
        folder = f"{RESULTS_DIR}/{re.sub(r'[^A-Za-z0-9_.-]', '_', self.run_id)}"
        data = (text + "\n").encode("utf-8", "replace")
        name = ""
        try:
            for n in itertools.count(1):
                with self.workspace.shared.locate(
                    f"{folder}/{record.id}{'' if n == 1 else f'-{n}'}.md", write=True, create=True
                ) as at:
                    try:
                        fd = os.open(at.name, _NEW_FILE, 0o666, dir_fd=at.folder)
                    except FileExistsError:
                        continue
                    name = at.rel
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                break
        except (OSError, WorkspaceError):
            return
        artifacts, _ = validate_paths(self.workspace, [name])
        record.artifacts = artifacts + record.artifacts
        record.result_file = name

    def _finish(self, record: TaskOutput, key: str | None, *, stored: bool = True) -> None:
        record.completed_at = datetime.now(UTC)
        self.live.pop(record.id, None)
        if record.id not in self.by_id:
            self._keep(record)
        if self.on_finish is not None and stored:
            kept = self.conversations.get(record.id) if record.status == "completed" else None
            self.on_finish(key, record, kept)
        if self.emit is unheard:
            return
        self.event(
            record,
            "subagent.completed",
            {
                "type": record.type,
                "status": record.status,
                "stop_reason": record.stop_reason,
                "steps": record.steps,
                "usage": record.usage.to_dict(),
                "artifacts": [a.relative_path for a in record.artifacts],
                "error": record.error,
                "background": record.background,
                "messages": record.messages,
            },
        )

    def _keep(self, record: TaskOutput) -> None:
        """Keep `record` in `records`, in call order (most end in it: appended)."""
        self.by_id[record.id] = record
        if not self.records or self.records[-1].seq <= record.seq:
            self.records.append(record)
        else:
            bisect.insort(self.records, record, key=_seq)

    def event(self, record: TaskOutput, type: Any, data: dict[str, Any]) -> None:
        if self.emit is not unheard:  # by position, as `ToolContext.event` (see `Event`)
            self.emit(Event(type, self.run_id, record.id, record.parent_agent_id, record.tool_call_id, data, time()))

    def heartbeat(self) -> None:
        """One `subagent.heartbeat` per live subagent, with its steps and tokens so far."""
        for record, ctx in list(self.live.values()):
            self.event(
                record,
                "subagent.heartbeat",
                {"usage": ctx.usage.to_dict(), "elapsed": _elapsed(record)},
            )


async def _refused(hooks: HookSet | None, ctx: ToolContext, definition: Subagent, prompt: str) -> str | None:
    """Why the `SubagentStart` hooks refuse this delegation (None: they let it start)."""
    if hooks is None:
        return None
    event = HookEvent(
        name="SubagentStart", run_id=ctx.run_id, agent_id=ctx.agent_id, agent_type=definition.name, prompt=prompt
    )
    why = await hooks.blocked(ctx, event)
    return None if why is None else f"a SubagentStart hook refused this delegation: {why}"


def _notes(snapshot: Message | None, criteria: list[str] | None) -> tuple[str, ...]:
    """What ends a subagent's system prompt: a snapshot's note, acceptance criteria's."""
    if snapshot is None and not criteria:
        return ()
    return (SNAPSHOT_SYSTEM_NOTE if snapshot is not None else "", CRITERIA_SYSTEM_NOTE if criteria else "")


def _stop_note(reason: str) -> str:
    return f"stopped: {reason}" if reason else "stopped"


def _elapsed(record: TaskOutput) -> float:
    return (datetime.now(UTC) - record.started_at).total_seconds() if record.started_at else 0.0


def _fill(record: TaskOutput, result: AgentResult) -> None:
    record.status = result.status
    record.stop_reason = result.stop_reason
    record.steps = result.steps
    record.error = result.error
    delivered = result.stop_return.data if result.stop_return is not None else None
    if isinstance(delivered, Delivery):
        record.summary = delivered.summary
        record.artifacts = delivered.artifacts
        record.skipped = delivered.skipped
        record.result = delivered.result
        if delivered.invalid is not None:
            record.status, record.stop_reason, record.error = "error", "invalid_result", delivered.invalid
    else:
        record.summary = result.final


def _resolve(
    definition: Subagent, subagent_model: Model | None, parent_model: Model, model_for: Callable[[str], Model]
) -> Model:
    if not isinstance(definition.model, str):
        return definition.model
    if definition.model != "inherit":
        return model_for(definition.model)
    return subagent_model or parent_model


def task_tool(
    runner: SubagentRunner, catalogue: Catalogue, *, max_parallel: int | None, command_types: Sequence[str] = ()
) -> Tool:
    """The lead's `task` tool over the types in `catalogue` (already filtered by caller policy).

    `command_types` are the types hidden because the workspace does not allow commands, so a call
    naming one says why instead of calling it unknown.
    """
    types = [(d.name, d.description) for d in catalogue.definitions.values()]
    schema = task_schema(types)

    async def run_task(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        definition, prompts, description, mode, criteria = validate(args, catalogue, command_types)
        asked = check_asked(args.get("isolation"))
        runner.prepare(definition)
        first = runner.reserve(len(prompts))
        snapshot = None
        if mode == "snapshot":
            snapshot = build_snapshot(ctx.conversation, pending_tool_call_id=ctx.tool_call_id)
        background = args.get("run_in_background", False)
        if not isinstance(background, bool):
            raise ToolError("run_in_background must be true or false")
        labels = [
            description if len(prompts) == 1 else f"{description} [{i + 1}/{len(prompts)}]" for i in range(len(prompts))
        ]
        keys = [f"{ctx.tool_call_id}#{i}" for i in range(len(prompts))]
        ids = [runner.new_id(key) for key in keys]
        runs = [
            runner.run(
                SubagentCall(
                    definition=definition,
                    prompt=prompt,
                    description=labels[i],
                    parent=ctx,
                    tool_call_id=ctx.tool_call_id,
                    criteria=criteria,
                    snapshot=snapshot,
                    seq=first + i,
                    key=keys[i],
                    agent_id=ids[i],
                    background=background,
                    isolation=asked,
                )
            )
            for i, prompt in enumerate(prompts)
        ]
        if background:
            for agent_id, work in zip(ids, runs, strict=True):
                runner.background.start(agent_id, work)
            lines = [
                f"Started {a} ({definition.name}: {label}) in the background."
                for a, label in zip(ids, labels, strict=True)
            ]
            lines.append(BACKGROUND_HINT)
            return ToolReturn(content="\n".join(lines))
        outputs = list(await asyncio.gather(*runs))  # each in a task of its own: one can be stopped
        texts, shortened = zip(*map(read, outputs), strict=True)
        if len(outputs) == 1:
            text = texts[0]
        else:
            text = f"{len(outputs)} subagents finished; results in prompt order.\n\n" + "\n\n".join(
                f"## {i + 1}/{len(outputs)}\n{t}" for i, t in enumerate(texts)
            )
        # What compaction keeps: all of it while short, else each result's status, summary and artifacts.
        keep = text if len(text) <= MAX_KEPT_CHARS else kept(outputs, MAX_KEPT_CHARS, shortened)
        delivered = any(o.status == "completed" and o.artifacts for o in outputs)
        return ToolReturn(content=text, keep=keep, data=outputs, progress=delivered)

    return Tool(
        name="task",
        description=task_description(types, max_parallel=max_parallel),
        parameters=schema,
        function=run_task,
        one_of=("prompts", "prompt"),
        id_params={"subagent_type": IdChoice(known=tuple(name for name, _ in types))},
        watched=False,  # it runs subagents: each of their calls is watched itself
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentCall:
    """One subagent asked for (by the lead's `task` call, or a batch item): what
    `SubagentRunner.run` takes whole, and what runs it, or records it as never started."""

    definition: Subagent
    prompt: str
    description: str
    parent: ToolContext
    tool_call_id: str | None
    criteria: list[str] | None = None
    """Acceptance criteria, checked when it ends."""
    snapshot: Message | None = None
    """A read-only copy of the lead's conversation, put before its task (`context_mode: snapshot`)."""
    seq: int = 0
    """Its place in call order."""
    key: str | None = None
    """What names it within its run (the lead's tool call id and the prompt's index): one that
    finished before the run was interrupted is given back as it was."""
    agent_id: str | None = None
    """Its id, when given out before (a background subagent's: see `new_id`)."""
    background: bool = False
    isolation: str | None = None
    """What the lead asked for (`overlay`: a private layer; see `_overlay.py`)."""
    phase: str | None = None
    """The workflow phase it belongs to: said in its `subagent.started` event (the live tree and
    the trace group a workflow's agents by it)."""


def _seq(record: TaskOutput) -> int:
    return record.seq
