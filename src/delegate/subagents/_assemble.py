"""One assembler: a definition (the `Lead`, or a `Subagent` type) and the run it belongs to, made
into what the loop runs (`AgentSpec`).

`toolset` makes a definition's tool list whole (the `tool_search` of its deferred tools, its stop
tools, `complete`); `assemble` adds what the run decides for every agent alike: the gates of its
skills and deferred tools, a weak model's opening turns, the system prompt, and the run's loop
settings and budget. The lead and every subagent go through both, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._config import LoopSettings, RunLimits
from .._events import EventSink
from .._record import ResultSchema
from ..agents import Lead, Subagent
from ..loop import AgentSpec, Journal, RunBudget, ToolGate
from ..mcp import DeferredGate, deferred_index, search_tool
from ..memory import RunMemory
from ..models import Model
from ..skills import SkillCatalogue
from ..tools import CallGuard, Tool
from ..workspace import Workspace
from ._background import Background, BackgroundGate, names_background_tools
from ._complete import COMPLETE_TOOL, typed_complete
from ._prompts import LEAD_INSTRUCTIONS, SUBAGENT_INSTRUCTIONS, outputs_note, shaped_opening

TYPED_RESULT_NOTE = (
    "Your task has a typed result: call `complete` with `result` in exactly the shape its schema "
    "requires. A result that does not fit comes back as an error saying what is wrong; fix it and call again."
)


@dataclass(frozen=True, kw_only=True)
class RunScope:
    """What every agent of one run shares: who runs it, where, under which limits and settings,
    with which skills and deferred tools (MCP tools behind `tool_search`), and the workspace's
    project context (AGENTS.md, CLAUDE.md, ARCHITECTURE.md)."""

    run_id: str
    user_id: str
    timezone: str
    workspace: Workspace
    """The run's view of the workspace, its skills mounted."""
    emit: EventSink
    limits: RunLimits
    loop: LoopSettings
    budget: RunBudget | None
    """The run's budget, shared by the lead and its subagents: every model request counts against it."""
    skills: SkillCatalogue
    deferred: Mapping[str, Tool]
    auto_promote: int = 0
    project_context: str = ""
    guard: CallGuard | None = None
    """The run's permission rules, approver and hooks (None: every call runs as it is)."""
    memory: RunMemory | None = None
    """The run's notes and todo lists, and their tools (None: a batch item's, which has neither)."""


def toolset(
    definition: Lead | Subagent, tools: Sequence[Tool], run: RunScope, types: Sequence[tuple[str, str]] = ()
) -> list[Tool]:
    """`tools` made whole for `definition`: `tool_search` when some are deferred (or `types` are
    subagent types to find), its stop tools marked, and `complete` last (a subagent's always, the
    lead's when it has a typed result)."""
    whole = list(tools) if run.memory is None else run.memory.bind(definition, list(tools))
    deferred = [t for t in whole if t.name in run.deferred]
    if deferred or types:
        whole.append(search_tool(deferred, types))
    if isinstance(definition, Subagent) and definition.stop_tools:
        stop = set(definition.stop_tools)
        whole = [_as_stop(t) if t.name in stop else t for t in whole]
    if definition.output_schema is not None:
        whole.append(typed_complete(ResultSchema(definition.output_schema, definition.label)))
    elif isinstance(definition, Subagent):
        whole.append(COMPLETE_TOOL)
    return whole


async def assemble(
    definition: Lead | Subagent,
    run: RunScope,
    *,
    model: Model,
    tools: list[Tool],
    prompt: str,
    notes: Sequence[str] = (),
    journal: Journal | None = None,
    background: Background | None = None,
    compaction_model: Model | None = None,
) -> AgentSpec:
    """What the loop runs for `definition` on `prompt` in `run`, with `tools` (from `toolset`).
    `compaction_model` is its definition's `compaction_model`, resolved.
    `notes` end its system prompt (a snapshot's, acceptance criteria's). `background` is the
    lead's background subagents: news of them comes between its turns, and their tools are
    offered once there are some (from the start when its definition names them). Under the run's
    permission rules, a tool a `deny` rule names whole is not offered, and the calls of one a rule
    or hook may act on are judged first (see `delegate.tools.CallGuard`)."""
    if run.guard is not None:
        if isinstance(definition, Subagent):
            tools = run.guard.tools(tools, mode=definition.permission_mode, agent_type=definition.name)
        else:
            tools = run.guard.tools(tools)
    gates: list[ToolGate] = [g for g in (run.skills.gate(run.workspace, definition.skills),) if g]
    if background is not None:
        background.named = names_background_tools(definition.tool_names)
        if not background.named:
            gates.append(BackgroundGate(background))
    deferred = [t for t in tools if t.name in run.deferred]
    if deferred:
        gates.append(DeferredGate(deferred, auto_promote=run.auto_promote))
    names = [t.name for t in tools]
    finish = "complete" if "complete" in names else "none"
    first, steps = await shaped_opening(
        model, run.workspace, prompt, names, definition.first_tool_choice, finish=finish
    )
    lead = isinstance(definition, Lead)
    outputs = run.workspace.outputs
    where = outputs_note(outputs.as_posix()) if outputs is not None and not outputs.is_absolute() else ""
    if lead:
        head = [LEAD_INSTRUCTIONS, where, definition.instructions, run.project_context]
    else:
        own = (
            f"Instructions for the {definition.name} agent:\n{definition.instructions}"
            if definition.instructions
            else ""
        )
        head = [SUBAGENT_INSTRUCTIONS, where, run.project_context if definition.project_context else "", own]
    parts = [
        *head,
        await run.memory.prompt(definition) if run.memory is not None else "",
        run.skills.index(definition.skills),
        deferred_index(t.name for t in deferred) if deferred else "",
        steps,
        *notes,
        TYPED_RESULT_NOTE if definition.output_schema is not None else "",
    ]
    return AgentSpec(
        name=definition.name,
        instructions="\n\n".join(p for p in parts if p),
        model=model,
        tools=tools,
        max_steps=definition.max_steps,
        timeout=run.limits.timeout if lead else definition.timeout,
        stall_timeout=run.limits.stall_timeout,
        token_budget=None if lead else definition.token_budget,
        cost_budget=None if lead else definition.cost_budget,
        loop=run.loop,
        budget=run.budget,
        gates=gates,
        first_tool_choice=first,
        journal=journal,
        inbox=background,
        compaction_model=compaction_model,
    )


def _as_stop(tool: Tool) -> Tool:
    return Tool(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        function=lambda ctx, args: tool.run(ctx, args),
        stop=True,
        path_params=tool.spec.path_params,
        id_params=tool.spec.id_params,
        one_of=tool.spec.one_of,
        watched=tool.watched,
    )
