"""Running one run's subagents: `SubagentRunner` builds each subagent (tools, model, system
prompt), runs it under the run's parallel cap, turns whatever happens to it into a `TaskOutput`
kept in the run's `Roster`, and continues a completed one's conversation (a follow-up).

The lead's `task` tool (`_task.py`), a batch item (`Runtime.run_task`) and the lead's
`task_message` (`_background.py`) all start their subagents here, with a `SubagentCall`.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from .._errors import ToolError, WorkspaceError
from .._events import Event, unheard
from .._messages import Message
from .._record import Change, Isolation
from .._usage import Usage
from ..agents import CatalogueWarning, Subagent, tools_for
from ..loop import AgentResult, AgentSpec, Journal, opening_choices, passed_deadline, run_agent
from ..mcp import TOOL_SEARCH
from ..models import FREE_CHOICES, Model, credentials_hint, has_credentials
from ..permissions import HookEvent
from ..tools import HookSet, Tool, ToolContext
from ..workspace import Layer
from ._acceptance import CRITERIA_SYSTEM_NOTE, check_criteria, frame_criteria, snapshot_before
from ._assemble import RunScope, assemble, toolset
from ._complete import Delivery, validate_paths
from ._conversation import Conversation
from ._hooks import run_checked
from ._output import MAX_RESULT_CHARS, RESULTS_DIR, TaskOutput, render_whole
from ._overlay import add_recovered, isolation_for, layer_for, needs_layer, settle
from ._prompts import prompt_shaped
from ._roster import Nest, Roster
from ._snapshot import SNAPSHOT_SYSTEM_NOTE
from ._task_args import Kind, kind

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _no_conversations() -> dict[str, dict[str, Any]]:
    return {}


@dataclass(frozen=True, kw_only=True)
class Keeping:
    """How a run keeps its subagents' work, decided once a run (the defaults: nothing is kept, a
    run without a store). `on_finish` is told of each subagent that ends (with its key, when it
    has one), as it ends, with its conversation when it completed (what a follow-up continues,
    kept for one after a resume); `written` waits until what `on_finish` was told is stored (a
    follow-up changes its subagent's record only once the record as it ended is written);
    `journal_for` gives the journal of the subagent kept as a key (None: subagents keep none);
    `conversations` are those kept before the run was interrupted, by subagent id."""

    on_finish: Callable[[str | None, TaskOutput, Conversation | None], None] | None = None
    written: Callable[[], Awaitable[None]] | None = None
    journal_for: Callable[[str], Journal] | None = None
    conversations: Mapping[str, Mapping[str, Any]] = field(default_factory=_no_conversations)


class SubagentRunner:
    """Runs the subagents of one run (see the module).

    `run` is what the run's agents share (see `RunScope`): its limits cap the subagents running at
    once (`max_parallel`). `roster` keeps their records (and caps how many start in all). `tools`
    are every tool the run knows by name; `parent_tools` the names the lead has (what an
    inheriting subagent gets). `model_for` turns a model string into a model (cached by the
    caller). `uploaded_files` is the parent's uploads state: each subagent gets a deep copy.
    `keeping` says how their work is kept (see `Keeping`). `recovered` is what the merges a
    kill cut short changed, finished as the run resumed, by layer (agent id, `sub1-2` for a
    follow-up's): put in the record of the stretch that runs again (`add_recovered`).
    """

    def __init__(
        self,
        run: RunScope,
        roster: Roster,
        *,
        tools: dict[str, Tool],
        parent_tools: Sequence[str],
        parent_model: Model,
        subagent_model: Model | None,
        model_for: Callable[[str], Model],
        uploaded_files: list[dict[str, Any]] | None = None,
        keeping: Keeping | None = None,
        recovered: Mapping[str, list[Change]] | None = None,
    ) -> None:
        keeping = keeping or Keeping()
        self.scope = run
        self.roster = roster
        self.run_id = run.run_id
        self.workspace = run.workspace
        self.emit = run.emit
        self.tools = tools
        self.parent_tools = list(parent_tools)
        self.parent_model = parent_model
        self.subagent_model = subagent_model
        self.model_for = model_for
        self.budget = run.budget
        self.uploaded_files = uploaded_files
        self.skills = run.skills
        self.keeping = keeping
        self.definitions: dict[str, Subagent] = {}
        self.conversations: dict[str, Conversation] = {}
        """The conversation of each completed subagent, by id: what a follow-up continues."""
        self.recovered = dict(recovered or {})
        """What the merges a kill cut short changed, finished as the run resumed, by layer (agent id,
        `sub1-2` for a follow-up's): put in the record of the stretch that runs again (`add_recovered`)."""
        parallel = run.limits.max_parallel
        self._semaphore = asyncio.Semaphore(parallel) if parallel else None
        self._prepared: dict[Kind, tuple[list[Tool], Model]] = {}
        self._isolations: dict[tuple[Kind, str | None], tuple[Isolation, bool]] = {}
        self._specs: dict[tuple[Kind, tuple[str, ...], bool], AgentSpec] = {}
        self._task: Tool | None = None

    def offer_task(self, task: Tool) -> None:
        """The run's `task` tool, offered to each subagent the run's depth lets delegate (see
        `Nest`): given once, by the lead's assembly, with the types the lead may start."""
        self._task = task

    def place(self, parent: ToolContext, definition: Subagent, agent_id: str, key: str | None) -> Nest:
        """Where a subagent of `definition` started by `parent` stands (kept in the roster): one
        level below its parent, reaching no deeper than its parent does nor than its definition's
        `max_depth` allows below it."""
        above = self.roster.nest(parent.agent_id)
        depth = above.depth + 1
        reach = above.reach if definition.max_depth is None else min(above.reach, depth + definition.max_depth)
        nest = self.roster.nests[agent_id] = Nest(depth, reach, key)
        return nest

    def _with_task(self, definition: Subagent, tools: list[Tool], nest: Nest) -> list[Tool]:
        """`tools` with the `task` tool before `complete` when the subagent may delegate: its
        depth allows it, and its type inherits its tools or names `task` (and does not disallow it)."""
        named = definition.tool_names
        allowed = (named is None or "task" in named) and "task" not in definition.disallowed_tools
        if self._task is None or not nest.delegates or not allowed:
            return tools
        return [*tools[:-1], self._task, tools[-1]]

    async def lending(self, work: Awaitable[list[TaskOutput]]) -> list[TaskOutput]:
        """Run `work` (a subagent's own `task` call) with its place among the run's `max_parallel`
        lent to the subagents it waits for: given back once they end (a parent holding its place
        while its children wait for one would wait for ever under `max_parallel: 1`)."""
        semaphore = self._semaphore
        if semaphore is None:
            return await work
        semaphore.release()
        try:
            return await work
        finally:
            taking = asyncio.ensure_future(semaphore.acquire())
            cancelled = False
            while not taking.done():  # its place is held again before it goes on, however often cancelled
                try:
                    await asyncio.shield(taking)
                except asyncio.CancelledError:
                    cancelled = True
            if cancelled:
                raise asyncio.CancelledError

    @property
    def finished(self) -> dict[str, TaskOutput]:
        """The subagents of an interrupted run that finished, by key (see `Roster.finished`)."""
        return self.roster.finished

    @property
    def usage(self) -> Usage:
        """Usage of every subagent so far (see `Roster.usage`)."""
        return self.roster.usage

    def admit(self, key: str) -> int:
        """Count a workflow's agent against the run's caps, or refuse it (see `Roster.admit`)."""
        return self.roster.admit(key)

    @property
    def agents_left(self) -> int | None:
        """How many more workflow agents the run may start (see `Roster.agents_left`)."""
        return self.roster.agents_left

    def new_id(self, key: str | None) -> str:
        """The id of the next subagent, given out before it runs (see `Roster.new_id`)."""
        return self.roster.new_id(key)

    @property
    def interrupting(self) -> bool:
        """Whether the run is being interrupted, to be resumed (see `Roster.interrupt`)."""
        return self.roster.interrupting

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
        roster = self.roster
        reused = roster.reuse(call.key, numbered=call.agent_id is not None)
        if reused is not None:
            below = roster.reuse_below(call.key) if call.key is not None else []  # its own subagents too
            if self.budget is not None:  # what they spent before the interruption counts against the run's budget
                for record in [reused, *below]:
                    self.budget.spend(record.usage, record.type)
                    self.budget.requests += record.usage.requests
            return reused
        agent_id = call.agent_id or roster.new_id(None)
        self.place(call.parent, call.definition, agent_id, call.key)
        task = asyncio.current_task()
        if task is not None:
            self.roster.tasks[agent_id] = task
        try:
            if agent_id in self.roster.stopping:  # stopped before it began
                return self._never_started(self.roster.stopping.pop(agent_id), call, agent_id)
            if self._semaphore is None:
                return await self._run(call, agent_id)
            try:
                await self._semaphore.acquire()
            except asyncio.CancelledError:
                reason = self.roster.stopped(agent_id)
                if reason is None:
                    raise
                return self._never_started(reason, call, agent_id)
            try:
                return await self._run(call, agent_id)
            finally:
                self._semaphore.release()
        finally:
            self.roster.tasks.pop(agent_id, None)

    def _record(self, call: SubagentCall, agent_id: str, model: Model) -> TaskOutput:
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
            model=model.name,
            pricing=None if model.profile.pricing is None else model.profile.pricing.label,
            seq=call.seq,
            background=call.background,
            depth=self.roster.nest(agent_id).depth if agent_id in self.roster.nests else 1,
        )

    def _never_started(self, reason: str, call: SubagentCall, agent_id: str) -> TaskOutput:
        """The record of a subagent stopped while it waited for a place: it did nothing."""
        _, model = self.prepare(call.definition)
        record = self._record(call, agent_id, model)
        started: dict[str, Any] = {"type": call.definition.name, "description": call.description}
        started |= {"background": call.background, "depth": record.depth}
        if call.phase is not None:
            started["phase"] = call.phase
        self.roster.event(record, "subagent.started", started)
        record.status, record.stop_reason, record.error = "cancelled", "stopped", _stop_note(reason)
        self._finish(record, call.key)
        return record

    async def _run(self, call: SubagentCall, agent_id: str) -> TaskOutput:
        definition = call.definition
        tools, model = self.prepare(definition)
        tools = self._with_task(definition, tools, self.roster.nest(agent_id))
        record = self._record(call, agent_id, model)
        record.isolation, writes = self._isolation(definition, tools, call.isolation)
        layer = self.layer(record, tools) if writes else None
        workspace = self.workspace if layer is None else replace(self.workspace, layer=layer)
        if definition.command_rules:  # its Bash(...) rules, for its commands only
            workspace = replace(workspace, commands=replace(workspace.commands, rules=definition.command_rules))
        ctx = self.context(record, call.parent, call.tool_call_id, workspace)
        record.usage = ctx.usage
        if self.emit is not unheard:
            started: dict[str, Any] = {"type": definition.name, "description": call.description, "depth": record.depth}
            if call.background:
                started["background"] = True
            if call.phase is not None:
                started["phase"] = call.phase
            self.roster.event(record, "subagent.started", started)
        self.roster.live[record.id] = (record, ctx)

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
        journal = self.keeping.journal_for(key) if self.keeping.journal_for is not None and key is not None else None
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
        delegates = self._task is not None and self._task in tools
        spec = self._specs.get((kind(definition), notes, delegates)) if shared else None
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
                self._specs[(kind(definition), notes, delegates)] = spec
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
            reason = self.roster.stopped(record.id)
            if record.status == "completed":  # it had completed (its layer settled, see `settled`): too late
                self._finish(record, key)
                if reason is None:
                    raise
                return record
            record.steps = steps_before + ctx.steps
            again = layer is not None and not record.layer and await self.settled(record, layer, raising=False)
            if reason is None:
                deadline = None if self.roster.interrupting else passed_deadline()
                if deadline is not None:  # the run's deadline, not a person, ended it
                    record.status, record.stop_reason = "timed_out", "run_timeout"
                    record.error = f"the run's deadline ({deadline:g}s) passed while it ran"
                else:
                    why = "interrupted" if self.roster.interrupting else "cancelled"
                    record.status, record.stop_reason = why, why
                self._finish(
                    record, None, stored=not self.roster.interrupting
                )  # not kept for a resume: it starts afresh
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
            self.roster.event(record, event[0], event[1])
        if cancelled and raising:
            raise asyncio.CancelledError
        return cancelled

    def layer(self, record: TaskOutput, tools: Sequence[Tool], stretch: int = 1) -> Layer | None:
        """The layer of one stretch of `record`'s work (its first task, or a follow-up), as its
        isolation says (None: it writes the workspace)."""
        agent = record.id if stretch == 1 else f"{record.id}-{stretch}"
        return layer_for(record.isolation, self.workspace, self.run_id, agent, tools)

    # -- follow-ups -------------------------------------------------------------------------

    @property
    def continuable(self) -> bool:
        """Whether the run has a completed subagent, foreground or background, whose conversation a
        follow-up can continue (kept here, or before the run was interrupted)."""
        return bool(self.conversations) or bool(self.keeping.conversations)

    def conversation(self, record: TaskOutput) -> Conversation | None:
        """What a follow-up to `record` continues: kept in this process, or stored before the
        run was interrupted."""
        kept = self.conversations.get(record.id)
        if kept is not None:
            return kept
        saved = self.keeping.conversations.get(record.id)
        kept = Conversation.restore(saved, self.definitions) if saved is not None else None
        if kept is not None:
            self.conversations[record.id] = kept
        return kept

    async def follow_up(
        self, record: TaskOutput, kept: Conversation, message: str, parent: ToolContext, call_id: str | None
    ) -> TaskOutput:
        """Continue `record`'s conversation with `message` to its end (one more `complete`)."""
        definition = kept.definition
        tools, model = self.prepare(definition)
        nest = self.roster.nests.get(record.id) or self.place(parent, definition, record.id, kept.key)
        tools = self._with_task(definition, tools, nest)
        # kept as its stretch (`<key>+<n>`) when subagents keep a journal: a resume replays what it asked
        stretch = f"{kept.key}+{record.messages + 1}" if kept.key is not None else None
        journal_for = self.keeping.journal_for
        journal = journal_for(stretch) if journal_for is not None and stretch is not None else None
        spec = await assemble(
            definition,
            self.scope,
            model=model,
            tools=tools,
            prompt=message,
            journal=journal,
            compaction_model=self.compaction_model(definition),
        )
        spec.instructions = kept.system  # the very prompt it worked under
        layer = self.layer(record, tools, record.messages + 2)  # an overlay subagent's follow-up: a new layer
        workspace = self.workspace if layer is None else replace(self.workspace, layer=layer)
        ctx = self.context(record, parent, call_id, workspace)
        ctx.usage = record.usage  # its usage grows
        if self.keeping.written is not None:  # the record as it ended is stored before it changes
            await self.keeping.written()
        record.changes, record.conflicts, record.layer = [], [], None
        steps_before = record.steps
        record.status, record.stop_reason, record.error, record.completed_at = "running", None, None, None
        record.messages += 1
        record.artifacts, record.skipped, record.result, record.result_file = [], [], None, None
        roster = self.roster
        roster.live[record.id] = (record, ctx)
        task = asyncio.current_task()
        if task is not None:
            roster.tasks[record.id] = task
        said = {"messages": record.messages, "message": message[:500], "tool_call_id": call_id}
        roster.event(record, "subagent.message", said)
        work = self._follow_up_work(record, kept, message, call_id, spec, ctx, layer)
        try:
            return await self.conclude(record, ctx, kept.key, work, steps_before=steps_before, layer=layer)
        finally:
            roster.tasks.pop(record.id, None)

    async def _follow_up_work(
        self,
        record: TaskOutput,
        kept: Conversation,
        message: str,
        call_id: str | None,
        spec: AgentSpec,
        ctx: ToolContext,
        layer: Layer | None,
    ) -> None:
        steps_before = record.steps
        result = await run_agent(spec, ctx, [*kept.messages, Message.user(message)])
        _fill(record, result)
        record.steps = steps_before + result.steps
        if layer is not None:
            await self.settled(record, layer)
        follow_ups = [*kept.follow_ups, *([call_id] if call_id else [])]
        await self.deliver(record, kept.definition, kept.system, result, kept.key, follow_ups)

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
        self.roster.live.pop(record.id, None)
        if record.id not in self.roster.by_id:
            self.roster.keep(record)
        if self.keeping.on_finish is not None and stored:
            kept = self.conversations.get(record.id) if record.status == "completed" else None
            self.keeping.on_finish(key, record, kept)
        if self.emit is unheard:
            return
        self.roster.event(
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
                "depth": record.depth,
            },
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
