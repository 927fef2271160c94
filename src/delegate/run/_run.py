"""`Run`: the state of one run, built whole by `open_run` and passed whole.

A `Runtime` holds what every run shares (the workspace, the models, the catalogue, the tool pool,
the MCP servers, the gates); a `Run` holds what one run has of its own. The lead's drive
(`_lead.py`), a batch item (`Runtime.run_task`), the approver and the assembly of each agent read
from it, and nothing is assigned onto a built part from another module: each part is given what it
needs when it is built. The work that comes next (workflows, a distributed engine) extends `Run`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._config import RunLimits
from .._events import EventSink
from .._record import Change
from .._usage import Usage
from ..loop import RunBudget
from ..models import Model
from ..skills import SkillCatalogue
from ..subagents import Background, Keeping, Roster, RunScope, SubagentRunner
from ..tools import CallGuard, Tool, ToolContext, list_uploaded_files, uploads_state
from ..workspace import Workspace
from ._approvals import NEVER_WAIT, RunApprovals
from ._gates import Gates
from ._memory import run_memory
from ._recorder import Recorder, StoredJournal
from ._settings import LOCAL_USER

if TYPE_CHECKING:
    from ..workspace import Layer
    from ._runtime import Runtime


@dataclass(frozen=True, kw_only=True, eq=False)
class Run:
    """One run (the lead's, or a batch item's): what it owns, built whole by `open_run`.

    - `id`, `user_id`, `limits` (`RunLimits`: time, budgets, subagents, approval timeout) and
      `gates` (the rules and hooks that can stop its calls: `Gates`);
    - `recorder` (its store handle: events, checkpoints, lease; None for a batch item, whose
      record the batch keeps) and `journal` (what a resume replays);
    - `approvals` (its approver: calls under an `ask` rule wait for a person; None when no gate
      may ask, and for a batch item, whose calls never wait);
    - `scope` (what each of its agents shares: the workspace view, events, budget, skills,
      deferred tools, the call guard, its memory: notes and todo lists), `context` (the lead's,
      or the item's), `pool` (every tool its agents may be given, by name, and the names its lead
      has);
    - `roster` (its subagents' records), `runner` (what runs them) and `background` (the lead's
      background subagents);
    - `recovered`: the merges of its overlay subagents that a kill cut short, finished as it began.
    """

    id: str
    user_id: str
    limits: RunLimits
    gates: Gates
    recorder: Recorder | None
    journal: StoredJournal | None
    approvals: RunApprovals | None
    scope: RunScope
    context: ToolContext
    pool: dict[str, Tool]
    lead_tools: list[Tool]
    """The lead's own tools (before `task`, the background and batch tools are added)."""
    roster: Roster
    runner: SubagentRunner
    background: Background
    recovered: Sequence[tuple[Layer, list[Change]]] = ()

    @property
    def workspace(self) -> Workspace:
        """The run's view of the workspace, its skills mounted."""
        return self.scope.workspace

    @property
    def skills(self) -> SkillCatalogue:
        return self.scope.skills

    @property
    def emit(self) -> EventSink:
        return self.scope.emit

    @property
    def usage(self) -> Usage:
        """What the run used so far: its lead (or item) and every subagent."""
        return self.context.usage + self.roster.usage


async def open_run(
    runtime: Runtime,
    *,
    run_id: str,
    limits: RunLimits,
    model: Model,
    emit: EventSink,
    gates: Gates | None = None,
    recorder: Recorder | None = None,
    user_id: str | None = None,
    uploaded_files: list[dict[str, Any]] | None = None,
    agent_id: str = "lead",
) -> Run:
    """Build the run `run_id` of `runtime` whole, its lead on `model`, its events heard by `emit`:
    with a `recorder` a lead's run (kept, resumable, its calls may wait for a person), else a batch
    item's (a call that would wait is refused). Nothing is recorded yet: the lead's drive records
    the run once its lead is built (see `_lead.py`). `gates` are what can stop its calls (default:
    the runtime's; a resumed run's own, see `tightened`)."""
    gates = gates or runtime.gates
    skills = await asyncio.to_thread(runtime.skills)
    context, recovered = await asyncio.to_thread(runtime.prepare_workspace)
    mcp_tools = await runtime.mcp_tools()
    own = await runtime.own_mcp_tools()
    journal = StoredJournal(recorder) if recorder is not None else None
    roster = Roster(
        run_id,
        emit,
        max_total=limits.max_subagents,
        max_workflow=limits.workflow_agents,
        finished=journal.subagents if journal is not None else None,
        max_depth=limits.max_depth,
    )
    approvals = None
    if recorder is not None and gates.active:
        approvals = RunApprovals(recorder, limits.approval_timeout, roster)
        guard = CallGuard(gates.policy, approvals, gates.hooks)
    else:
        guard = CallGuard(gates.policy, never_wait=NEVER_WAIT, hooks=gates.hooks) if gates.active else None
    memory = None
    if recorder is not None:  # a lead's run: its notes and todo lists (a batch item has none)
        memory = await asyncio.to_thread(run_memory, run_id, runtime.user_id, runtime.workspace.root, recorder.store)
    ext = runtime.extensions
    scope = RunScope(
        run_id=run_id,
        user_id=user_id or runtime.user_id or LOCAL_USER,
        timezone=runtime.timezone,
        workspace=runtime.workspace.with_mounts(skills.mounts()),
        emit=emit,
        limits=limits,
        loop=runtime.loop,
        budget=RunBudget.of(limits),
        skills=skills,
        deferred={t.name: t for t in mcp_tools} if ext.tool_search else {},
        auto_promote=ext.auto_promote,
        project_context=context,
        guard=guard,
        memory=memory,
    )
    ctx = ToolContext(
        run_id=run_id,
        agent_id=agent_id,
        workspace=scope.workspace,
        emit=emit,
        user_id=scope.user_id,
        timezone=scope.timezone,
        uploaded_files=uploads_state(uploaded_files) if recorder is not None else None,
    )
    lead_tools = [runtime.tools[name] for name in runtime.lead_tool_names]
    if recorder is not None:
        lead_tools += mcp_tools + (memory.for_lead(runtime.lead.tool_names) if memory is not None else [])
        if ctx.uploaded_files is not None:
            lead_tools.append(list_uploaded_files)
    pool = dict(runtime.tools)
    if ctx.uploaded_files is not None:
        pool[list_uploaded_files.name] = list_uploaded_files
    pool |= (memory.tools() if memory is not None else {}) | {t.name: t for t in [*mcp_tools, *own]}
    runner = SubagentRunner(
        scope,
        roster,
        tools=pool,
        parent_tools=[t.name for t in lead_tools],
        parent_model=model,
        subagent_model=runtime.subagent_model(),
        model_for=runtime.model_for,
        uploaded_files=ctx.uploaded_files,
        keeping=_keeping(recorder, journal, gates),
        recovered={layer.agent_id: changes for layer, changes in recovered if layer.run_id == run_id},
    )
    return Run(
        id=run_id,
        user_id=scope.user_id,
        limits=limits,
        gates=gates,
        recorder=recorder,
        journal=journal,
        approvals=approvals,
        scope=scope,
        context=ctx,
        pool=pool,
        lead_tools=lead_tools,
        roster=roster,
        runner=runner,
        background=Background(roster, runner),
        recovered=recovered,
    )


def _keeping(recorder: Recorder | None, journal: StoredJournal | None, gates: Gates) -> Keeping:
    """How a run keeps its subagents' work: nothing without a store (decided once a run); with
    one, each finished subagent as it ends, and the answers of each while its calls may wait for a
    person (an `ask` rule), so that a resume replays them."""
    if recorder is None or journal is None or recorder.store is None:
        return Keeping()
    return Keeping(
        on_finish=recorder.subagent_finished,
        written=recorder.written,
        journal_for=journal.scoped if gates.policy.ask else None,
        conversations=journal.conversations,
    )
