"""The lead's drive: a run of the lead built whole (`open_run`), its tools and spec assembled,
recorded (or claimed, when resumed), then run to its end, or until it is stopped: cancelled (by
its caller, or from another process), taken over by another process, or interrupted
(`Runtime.interrupt`). What `Runtime.run` and `Runtime.resume` both do."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._events import Event
from .._messages import Message
from ..loop import AgentResult, AgentSpec
from ..models import Model
from ..subagents import assemble, background_tools, run_checked, task_tool, toolset, type_listing
from ..tools import Tool
from ..workflows import WORKFLOW, Workflow, WorkflowHost, is_workflow_key, workflow_tool
from ..workflows import drive as drive_workflow
from ._recorder import Recorder
from ._run import Run
from ._run_end import cancelled_result, record_end, release_interrupted, run_result
from ._run_result import RunResult
from ._threads import keep_conversation

if TYPE_CHECKING:
    from .._store import Checkpoint
    from ._runtime import Runtime

Begin = Callable[[list[str]], Awaitable[list["Checkpoint"]]]
"""Records a run with its warnings (a new one), or claims it and reads its checkpoints (a resume)."""


class LeadDrive:
    """One lead's run going in this process: what `Runtime.interrupt` stops and `Runtime.decide`
    finds the approver of (`run.approvals`)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.stopped: list[str] = []
        self._agent: asyncio.Task[Any] | None = None

    def stop(self, why: str) -> None:
        """Stop the lead: `cancel` (asked from elsewhere), `lost` (taken over) or `interrupt`."""
        if not self.stopped:
            self.stopped.append(why)
            if why == "interrupt":
                self.run.roster.interrupt()
            if self._agent is not None:
                self._agent.cancel()

    async def to_end(
        self,
        runtime: Runtime,
        work: Coroutine[Any, Any, AgentResult],
        messages: list[Message],
        recorder: Recorder,
        warnings: list[str],
        instructions: str | None,
    ) -> RunResult:
        """Run the lead (or a workflow: `work`) to its end, or until it is stopped: cancelled (by
        our caller, or from another process), taken over by another process, or interrupted (see
        `Runtime.interrupt`). `messages` and `instructions` are what its conversation is kept with."""
        run = self.run
        ctx = run.context
        agent = asyncio.create_task(work)
        self._agent = agent
        if self.stopped:  # stopped before it began
            agent.cancel()
        recorder.listen(self.stop, run.background.stop_from_outside)
        beat = asyncio.create_task(_heartbeat(run, recorder, runtime.loop.heartbeat_interval))
        try:
            result = await agent
        except asyncio.CancelledError:
            if not agent.done():  # our caller cancelled us (Ctrl-C, a signal)
                agent.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await agent
            await run.background.cancel_all()
            cancelled = run_result(run.id, cancelled_result(ctx), run.roster, warnings, memory=run.scope.memory)
            if self.stopped == ["interrupt"]:
                return await release_interrupted(
                    recorder, replace(cancelled, status="interrupted", stop_reason="interrupted")
                )
            keep_conversation(recorder, cancelled.messages or messages, instructions or "")
            await record_end(recorder, cancelled)
            if not self.stopped:
                raise
            return cancelled  # cancelled from another process, or the run was taken over
        except Exception as exc:  # a bug or the store failing: the run still ends, truthfully
            error = f"{type(exc).__name__}: {ctx.workspace.shown(str(exc))}"
            await recorder.finish("error", "", run.usage, error)
            raise
        else:  # `interrupt` meanwhile finds the run, so it is left to record how it ended
            schema = runtime.lead.output_schema
            typed = schema if isinstance(schema, type) else None
            outcome = run_result(run.id, result, run.roster, warnings, typed, run.scope.memory)
            keep_conversation(recorder, outcome.messages, instructions or "")
            await record_end(recorder, outcome)
            return outcome
        finally:
            beat.cancel()


async def drive_lead(
    runtime: Runtime,
    *,
    prompt: str,
    run: Run,
    model: Model,
    begin: Begin,
    history: Sequence[Message],
    going: MutableMapping[str, LeadDrive],
    said: Sequence[str] = (),
    workflow: Workflow | None = None,
) -> RunResult:
    """Assemble the lead of `run` (or the host of its `workflow`, which runs instead), then
    `begin`, then run it to its end after `history` (the conversation of the run it continues):
    nothing is recorded for a lead that cannot be built. While it runs, `going` holds its drive
    under its id. `said` are warnings of its own (what of a resuming process's rules was not
    applied), recorded with the others."""
    recorder, journal = run.recorder, run.journal
    assert recorder is not None and journal is not None, "a lead's run has a recorder"
    spec = await _lead_spec(runtime, run, model, prompt) if workflow is None else None
    failed = runtime.mcp_failed()
    found = [*runtime.catalogue.warnings, *run.skills.warnings]
    warnings = [*(str(w) for w in found), *(f["warning"] for f in failed), *said]
    checkpoints = await begin(warnings)
    journal.load(checkpoints)
    await _resumed(run, bool(checkpoints))
    recorder.start(run.id)
    slash = run.skills.slash_command(prompt, None)
    started: dict[str, Any] = {"prompt": prompt[:500], "model": model.name}
    if checkpoints:
        started["resumed"] = True
    recorder.emit(Event(type="run.started", run_id=run.id, agent_id="lead", data=started))
    for warning in found:
        recorder.emit(Event(type="warning", run_id=run.id, agent_id="lead", data=warning.to_dict()))
    for layer, changes in run.recovered:  # a merge of this run that a kill cut short, finished now
        if layer.run_id == run.id:
            data = {"changes": [c.to_dict() for c in changes], "recovered": True}
            recorder.emit(Event(type="workspace.merged", run_id=run.id, agent_id=layer.agent_id, data=data))
    for data in failed:
        recorder.emit(Event(type="mcp.server_failed", run_id=run.id, agent_id="lead", data=data))
    for message in said:
        recorder.emit(Event(type="warning", run_id=run.id, agent_id="lead", data={"message": message}))
    drive = LeadDrive(run)
    going[run.id] = drive
    try:
        if spec is None:
            assert workflow is not None
            return await _workflow(runtime, drive, workflow, recorder, warnings)
        opening = [*history, *([slash] if slash else []), Message.user(prompt)]
        lead = run.background.outlast(run_checked(spec, run.context, opening, run.gates.hooks, None))
        return await drive.to_end(runtime, lead, opening, recorder, warnings, spec.instructions)
    finally:
        going.pop(run.id, None)


async def _workflow(
    runtime: Runtime, drive: LeadDrive, workflow: Workflow, recorder: Recorder, warnings: list[str]
) -> RunResult:
    """Run a run that is a workflow: its script, over the run's subagents (see docs/workflows.md)."""
    run = drive.run
    host = WorkflowHost(run.runner, run.context, runtime.delegable(), prefix="", emit=run.emit)
    plan = drive_workflow(workflow, host, functools.partial(recorder.checkpoint, WORKFLOW, "run"))
    result = await drive.to_end(runtime, plan, [], recorder, warnings, None)
    result.workflow = host.record
    return result


async def _lead_spec(runtime: Runtime, run: Run, model: Model, prompt: str) -> AgentSpec:
    """The lead's spec: its tools (delegation and batches with them), system prompt and model."""
    tools, background = await _lead_tools(runtime, run, model, prompt)
    compactor = runtime.lead.compaction_model
    return await assemble(
        runtime.lead,
        run.scope,
        model=model,
        tools=tools,
        prompt=prompt,
        journal=run.journal,
        background=background,
        compaction_model=None if compactor is None else await runtime.model_off_loop(compactor),
    )


async def _resumed(run: Run, resumed: bool) -> None:
    """What a resumed run takes in once claimed: the rules a person approved "always" in it, and
    the stops asked of the process that died."""
    store = run.recorder.store if run.recorder is not None else None
    if store is None:
        return
    if resumed and run.journal is not None:  # its workflows' agents so far count against its caps
        run.roster.count_stored(k for k in run.journal.subagents if is_workflow_key(k))
    if run.approvals is not None:
        run.approvals.load(await asyncio.to_thread(store.approvals, run.id))
    if resumed:
        owner = run.recorder.owner if run.recorder is not None else ""
        _, _, stops = await asyncio.to_thread(store.heartbeat, run.id, owner)
        ended = {r.id for r in (run.journal.subagents.values() if run.journal is not None else ())}
        run.roster.stop_when_started({a: r or "stopped by the operator" for a, r in stops.items() if a not in ended})


async def _lead_tools(runtime: Runtime, run: Run, model: Model, prompt: str) -> tuple[list[Tool], Any]:
    """The lead's tools made whole (`toolset`), and its background set when it may delegate."""
    lead_tools = list(run.lead_tools)
    offers_task = runtime.offers("task") is not False and len(runtime.catalogue)
    if offers_task:
        visible = runtime.delegable()
        allow = runtime.workspace.allow_commands
        hidden = [] if allow else [d.name for d in runtime.catalogue.definitions.values() if d.requires_commands]
        task = task_tool(
            run.runner, run.background, visible, max_parallel=run.limits.max_parallel, command_types=hidden
        )
        lead_tools += [task, *background_tools(run.background)]
        if run.limits.max_depth > 1:  # nested subagents (docs/subagents.md): the same tool, the same types
            run.runner.offer_task(task)
        if runtime.offers("workflow") is not False and run.recorder is not None:  # plans in code: docs/workflows.md
            keep = functools.partial(run.recorder.checkpoint, WORKFLOW)
            lead_tools.append(workflow_tool(run.runner, visible, keep=keep))
    lead_tools += await asyncio.to_thread(_batch_tools, runtime, model, prompt)
    types = _searchable_types(runtime) if offers_task else []
    return toolset(runtime.lead, lead_tools, run.scope, types), run.background if offers_task else None


def _searchable_types(runtime: Runtime) -> list[tuple[str, str]]:
    """The lead's types, for `tool_search`, when the `task` tool shortens their descriptions."""
    types = [(d.name, d.description) for d in runtime.delegable().definitions.values()]
    return types if type_listing(types)[1] else []


_ASKS_FOR_BATCH = re.compile(r"\bbatch", re.IGNORECASE)


def _batch_tools(runtime: Runtime, lead_model: Model, prompt: str) -> list[Tool]:
    """The lead's batch tools. A weak model (one that grounds its calls) is offered them only
    when the task asks for a batch or one exists: otherwise it calls them for nothing."""
    batches = runtime.lead_batches()
    if batches is None:
        return []
    from ..batch import batch_tools  # the batch layer, on first use: most runs never load it

    existing = [b.id for b in batches.list_batches(runtime.user_id or "default", limit=20)]
    if lead_model.profile.grounds_paths and not existing and not _ASKS_FOR_BATCH.search(prompt):
        return []
    visible = runtime.delegable()
    spec = runtime.lead.subagent_model
    model = spec if isinstance(spec, str) else (spec.name if spec is not None else lead_model.name)
    return batch_tools(batches, known_types=visible.names(), model=model, known_batches=existing)


async def _heartbeat(run: Run, recorder: Recorder, interval: float) -> None:
    """Tell the recorder the usage so far (stored with its next write: see `Recorder.usage`) and,
    every `interval`, emit each live subagent's heartbeat event."""
    beat = min(interval, recorder.heartbeat)
    waited = 0.0
    while True:
        await asyncio.sleep(beat)
        recorder.track(run.usage)
        waited += beat
        if waited >= interval:
            waited = 0.0
            run.roster.heartbeat()
