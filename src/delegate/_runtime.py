"""`Runtime`: owns the workspace, the models, the subagent catalogue, the store and the event sinks,
and runs a lead agent that can delegate."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _tracing
from ._agents import Catalogue, Subagent
from ._errors import ToolError, UserError
from ._events import Event, EventSink
from ._frontmatter import CatalogueWarning
from ._guard import LoopGuard
from ._loop import (
    DEFAULT_GUARD,
    AgentSpec,
    Compaction,
    RunBudget,
    ToolGate,
    run_agent,
)
from ._messages import Message
from ._recorder import Recorder, StoredJournal
from ._run_result import RunResult, cancelled_result, record_end, release_interrupted, run_result
from ._text import safe_text
from ._workspace import CommandPolicy, Workspace
from .mcp import DeferredGate, MCPServerConfig, MCPTools, deferred_index, search_tool, server_config
from .models import Model, ModelAliases, ToolChoice, resolve_model
from .skills import SkillCatalogue
from .subagents import LEAD_INSTRUCTIONS, SubagentRunner, TaskOutput, project_context, task_tool
from .subagents._acceptance import parse_criteria
from .subagents._prompts import shaped_opening, type_listing
from .tools import Tool, ToolContext, builtin_tools, list_uploaded_files, sweep_scratch, uploads_state

if TYPE_CHECKING:
    from ._store import Checkpoint, Store
    from .batch import Batches


DEFAULT_RUN_TIMEOUT = 3600.0
"""Seconds a lead may run before it ends `timed_out` (subagents included), unless told otherwise."""


class Runtime:
    """Runs lead agents that delegate to subagents over one workspace.

    `model` is a `provider:name` string or a `Model` (default: `DELEGATE_MODEL`, else a provider
    with a key in the environment, else `local`). `subagent_model` is used by subagents whose
    definition says `model: inherit` (default: the lead's). `store` is a `Store`, a database URL,
    `None` for `<workspace>/.delegate/delegate.db`, or `False` to keep nothing.

    `model_aliases` overrides the table that resolves `sonnet`, `opus`, `haiku` and Claude model ids
    (a mapping, or `alias=provider:model` strings), over `DELEGATE_MODEL_ALIASES` and
    `<workspace>/.delegate/models.toml` (see `delegate.models`).

    `shared` is the operator's folder when `workspace` is one user's (in `delegate serve`):
    definitions are read from it first, and the workspace's own shadow them by name.

    `builtin` names the built-in tools the lead gets (default: all), and `tools` adds your own.
    Subagents whose definition lists no tools inherit the lead's; a definition's list may name any
    built-in tool or tool of yours, whether or not the lead has it. `first_tool_choice` is `auto`,
    `required`, or the name of the tool the lead's first turn must call (or a list: one per turn).

    `timeout` is how long a run may take, its subagents included (default `DEFAULT_RUN_TIMEOUT`,
    an hour; None for no deadline). With a store, every run holds a lease and checkpoints what its
    lead did as it happens, so a run whose process died reads `interrupted` and `resume` continues
    it (see docs/guarantees.md).
    `token_budget` and `max_requests` cap what each run spends, the lead and all its subagents
    together (`run` may set them per run): once spent, no new model request starts and the run
    ends `aborted`, its stop reason `run_token_budget` or `run_max_requests`.

    `context_window` overrides every model's context window (default: what each model says, see
    `delegate.models.context_window`): compaction starts from it. `loop_guard` ends an agent that
    goes round in circles (the same call failing 3 times, or 10 turns without progress; None: never).
    """

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        workspace: str | PathLike[str] = ".",
        shared: str | PathLike[str] | None = None,
        subagents: Iterable[Subagent] = (),
        tools: Iterable[Tool] = (),
        builtin: Sequence[str] | None = None,
        agents_dirs: Sequence[str | PathLike[str]] = (),
        skills_dirs: Sequence[str | PathLike[str]] = (),
        mcp_servers: Sequence[MCPServerConfig] = (),
        tool_search: bool = True,
        auto_promote: int = 3,
        allow_commands: bool = False,
        commands: CommandPolicy | None = None,
        instructions: str | None = None,
        subagent_model: str | Model | None = None,
        model_aliases: Mapping[str, str] | Sequence[str] = (),
        max_steps: int = 50,
        timeout: float | None = DEFAULT_RUN_TIMEOUT,
        token_budget: int | None = None,
        max_requests: int | None = None,
        max_parallel: int | None = 16,
        max_subagents: int | None = 100,
        permitted_subagents: Sequence[str] | None = None,
        builtin_subagents: bool = True,
        task_tool: bool = True,
        batch_tools: bool | None = None,
        compaction: Compaction | None = None,
        context_window: int | None = None,
        loop_guard: LoopGuard | None = DEFAULT_GUARD,
        first_tool_choice: ToolChoice | Sequence[ToolChoice] = "auto",
        store: Store | str | bool | None = None,
        sinks: Iterable[EventSink] = (),
        user_id: str | None = None,
        timezone: str | None = None,
        heartbeat_interval: float = 5.0,
    ) -> None:
        opened = Workspace.open(workspace, allow_commands=allow_commands, commands=commands)
        self._shared = Path(shared).expanduser().resolve() if shared is not None else None
        self.skills_dirs = [Path(d) for d in skills_dirs]
        """Folders of skills besides the `.claude/skills` and `.delegate/skills` of the workspace
        (and of `shared`): see `delegate.skills`."""
        self.workspace = replace(opened, read_only=(*opened.read_only, *_inside(opened.root, agents_dirs, skills_dirs)))
        """The agents' view of the workspace: see `Workspace` (definition folders inside it are read-only)."""
        self._model_spec = model
        self._models: dict[str, Model] = {}
        self._subagent_model_spec = subagent_model
        self.aliases = ModelAliases.load(self._shared or self.workspace.root, model_aliases)
        self.catalogue = Catalogue.build(
            workspace=self._shared or self.workspace.root,
            agent_dirs=[Path(d) for d in agents_dirs],
            own=self.workspace.root if self._shared is not None else None,
            subagents=subagents,
            builtins=builtin_subagents,
            aliases=self.aliases,
        )
        self.tools: dict[str, Tool] = {t.name: t for t in builtin_tools(builtin, allow_commands=allow_commands)}
        for extra in tools:
            self.tools[extra.name] = extra
        self.instructions = instructions
        self.mcp_workspaces = [self.workspace.root, *([self._shared] if self._shared is not None else [])]
        """Folders no MCP server may be given (their `.delegate/` would be in its reach: see `exposed_state`)."""
        self.mcp = MCPTools(mcp_servers, workspaces=self.mcp_workspaces) if mcp_servers else None
        self._own_mcp = self._inline_servers()
        """Per type, the MCP servers its definition defines inline (started at a run's start)."""
        self._own_mcp_tools: list[Tool] | None = None
        """The MCP servers' tools: loaded on first use; deferred behind `tool_search` when it is on,
        with the `auto_promote` that best match a task loaded from its first turn."""
        self.tool_search = tool_search
        self.auto_promote = auto_promote
        self._mcp_tools: list[Tool] | None = None
        self.max_steps = max_steps
        self.timeout = timeout
        RunBudget.of(token_budget, max_requests)  # refuse bad limits now
        self.token_budget = token_budget
        self.max_requests = max_requests
        if max_parallel is not None and max_parallel < 1:
            raise UserError("max_parallel must be at least 1 (or None for no cap)")
        self.max_parallel = max_parallel
        self.max_subagents = max_subagents
        self.permitted_subagents = permitted_subagents
        self.task_tool = task_tool
        self.batch_tools = batch_tools
        """Offer the lead `batch_task`, `batch_status`, `cancel_batch`: None means when there is a store."""
        self.compaction = compaction
        if context_window is not None and context_window < 1024:
            raise UserError(f"context_window={context_window}: give the model's window in tokens, at least 1024")
        self.context_window = context_window
        """Tokens every agent's model reads at once, over what each model says (None: theirs)."""
        self.loop_guard = loop_guard
        """Ends an agent that goes round in circles (see `delegate._guard`); None: never."""
        self.first_tool_choice = first_tool_choice
        """The tool choice of the lead's first turn, or of its first turns (see `AgentSpec`)."""
        self.sinks = list(sinks)
        self.user_id = user_id
        """The owner of this runtime's runs in the store; None for local use (the CLI)."""
        self.timezone = timezone or _local_timezone()
        self.heartbeat_interval = heartbeat_interval
        self._store_option = store
        self._stops: dict[str, Callable[[str], None]] = {}
        """How to stop each run of this runtime that is going: see `interrupt`."""
        self._store: Store | None = None
        self._owns_store = False
        self._batches: Batches | None = None

    # -- models and store -------------------------------------------------------------------

    def model_for(self, spec: str | Model | None) -> Model:
        """Resolve and cache a model, so every agent of this runtime shares its client. An alias
        (`sonnet`, a Claude model id) is resolved through the runtime's table first."""
        if spec is not None and not isinstance(spec, str):
            return spec
        if spec:
            with contextlib.suppress(UserError):  # not an alias: resolve_model says what is wrong
                spec = self.aliases.resolve(spec)[0]
        key = spec or ""
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = resolve_model(spec)
        return model

    async def _model_off_loop(self, spec: str | Model | None) -> Model:
        """`model_for`, in a thread the first time: building a model may fetch and load weights."""
        if spec is None or isinstance(spec, str):
            cached = self._models.get(spec or "")
            return cached if cached is not None else await asyncio.to_thread(self.model_for, spec)
        return spec

    @property
    def model(self) -> Model:
        return self.model_for(self._model_spec)

    @property
    def store(self) -> Store | None:
        if self._store is None and self._store_option is not False:
            from ._store import Store

            option = self._store_option
            self._owns_store = not isinstance(option, Store)
            if isinstance(option, Store):
                self._store = option
            elif isinstance(option, str):
                self._store = Store.open(option)
            else:
                self._store = Store.for_workspace(self.workspace.root)
        return self._store

    # -- running ----------------------------------------------------------------------------

    def run_sync(self, prompt: str, **kwargs: Any) -> RunResult:
        """`run` for code that is not async (closes the model clients it opened when done)."""

        async def go() -> RunResult:
            try:
                return await self.run(prompt, **kwargs)
            finally:
                await self.aclose()

        return asyncio.run(go())

    async def aclose(self) -> None:
        """Close the HTTP clients of the models this runtime built from model strings, the MCP
        sessions of this event loop, and the store it opened (a `Store` given to it stays open).
        All open again when next needed."""
        for model in self._models.values():
            await model.aclose()
        if self.mcp is not None:
            await self.mcp.aclose()
        for servers in self._own_mcp.values():
            await servers.aclose()
        self._own_mcp_tools = None
        if self._store is not None and self._owns_store:
            self._store.close()
            self._store, self._batches = None, None

    def interrupt(self) -> int:
        """Stop every run of this runtime that is going, leaving each `interrupted`, to be resumed
        (what `delegate serve` and `delegate batch worker` do when they are stopped: nobody
        cancelled those runs). What each did so far is stored, and its lease let go, so it reads
        `interrupted` at once everywhere and the next server or worker resumes it; its subagents
        that had not finished start afresh then. Each such `run` returns with status
        `interrupted`. Returns how many runs it stopped."""
        stops = list(self._stops.values())
        for stop in stops:
            stop("interrupt")
        return len(stops)

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def stream(self, prompt: str, **kwargs: Any) -> AsyncIterator[Event]:
        """Run and yield every event as it happens; the last one is `run.completed`."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        task = asyncio.create_task(self.run(prompt, sinks=[queue.put_nowait], **kwargs))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def run(
        self,
        prompt: str,
        *,
        run_id: str | None = None,
        sinks: Iterable[EventSink] = (),
        model: str | Model | None = None,
        uploaded_files: list[dict[str, Any]] | None = None,
        token_budget: int | None = None,
        max_requests: int | None = None,
    ) -> RunResult:
        """Run the lead agent on `prompt` to its final answer.

        `token_budget` and `max_requests` override the runtime's run-wide limits for this run.

        `uploaded_files` are files the user uploaded earlier in the conversation: entries with a
        `filename` (and `path`, `size`, `content_type` when known). With them (an empty list too),
        the lead and its subagents get `list_uploaded_files`; a malformed list is treated as none.
        """
        if not prompt.strip():
            raise UserError("the prompt is empty: say what the agent should do")
        prompt = safe_text(prompt)  # an argument `delegate run $'\xff'` holds a lone surrogate
        budget = self._budget(token_budget, max_requests)
        uploaded_files = uploads_state(uploaded_files)
        run_id = run_id or f"run_{uuid.uuid4().hex[:12]}"
        recorder = Recorder(self.store, [*self.sinks, *sinks, *_tracing.sinks()])
        lead_model = await self._model_off_loop(model or self._model_spec)

        async def begin(warnings: list[str]) -> list[Checkpoint]:
            if recorder.store is not None:
                await asyncio.to_thread(
                    functools.partial(
                        recorder.store.create_run,
                        run_id=run_id,
                        user_id=self.user_id,
                        prompt=prompt,
                        model=lead_model.name,
                        workspace=str(self.workspace.root),
                        owner=recorder.owner,
                        uploaded_files=uploaded_files,
                        token_budget=token_budget,
                        max_requests=max_requests,
                        warnings=warnings,
                    )
                )
            return []

        return await self._lead(prompt, run_id, recorder, lead_model, uploaded_files, begin, budget)

    async def resume(
        self, run_id: str, *, sinks: Iterable[EventSink] = (), model: str | Model | None = None
    ) -> RunResult:
        """Continue an interrupted run (its process died) from its checkpoints.

        The lead's answers and tool results recorded before are replayed, not asked or run again;
        subagents that finished are reused, the others start afresh; usage counts each answer
        once. The model is `model`, else this runtime's, else the one the run was started with; the
        uploaded files and the run-wide budgets given to `run` are the ones it was started with
        (a budget it was not given is this runtime's, as for `run`).
        Raises `UserError` if the run is unknown, still running, or ended.
        """
        store = self.store
        if store is None:
            raise UserError("resuming a run needs the store it was recorded in (store=False keeps nothing)")
        recorder = Recorder(store, [*self.sinks, *sinks, *_tracing.sinks()])
        run = await asyncio.to_thread(store.get_run, run_id, self.user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        lead_model = await self._model_off_loop(model or self._model_spec or run.model)

        async def begin(warnings: list[str]) -> list[Checkpoint]:
            await asyncio.to_thread(
                functools.partial(store.claim_run, run_id, recorder.owner, self.user_id, warnings=warnings)
            )
            return await asyncio.to_thread(store.checkpoints, run_id)

        budget = self._budget(run.token_budget, run.max_requests)
        return await self._lead(run.prompt, run_id, recorder, lead_model, run.uploaded_files, begin, budget)

    async def _lead(
        self,
        prompt: str,
        run_id: str,
        recorder: Recorder,
        lead_model: Model,
        uploaded_files: list[dict[str, Any]] | None,
        begin: Callable[[list[str]], Awaitable[list[Checkpoint]]],
        budget: RunBudget | None,
    ) -> RunResult:
        """Build the lead, then `begin` (record the run with its warnings, or claim it and read its
        checkpoints), then run it under `budget`: nothing is recorded for a lead that cannot be built."""
        journal = StoredJournal(recorder)
        skills = await asyncio.to_thread(self._skills)
        ctx = self._context(run_id, "lead", recorder.emit, self.user_id, skills)
        ctx.uploaded_files = uploads_state(uploaded_files)
        context = await asyncio.to_thread(self._prepare_workspace)
        mcp_tools = await self._load_mcp()
        lead_tools = [t for name, t in self.tools.items() if name != "complete"] + mcp_tools
        if ctx.uploaded_files is not None:
            lead_tools.append(list_uploaded_files)
        own = await self._load_own_mcp()
        runner = self._runner(ctx, lead_model, [t.name for t in lead_tools], skills, mcp_tools, context, own, budget)
        runner.finished, runner.on_finish = journal.subagents, recorder.subagent_finished
        deferred = mcp_tools if self.tool_search else []
        task = self._task_tool(runner) if self.task_tool and len(self.catalogue) else None
        types = self._searchable_types() if task is not None else []
        if deferred or types:
            lead_tools.append(search_tool(deferred, types))
        if task is not None:
            lead_tools.append(task)
        lead_tools += await asyncio.to_thread(self._batch_tools, lead_model, prompt)
        gates: list[ToolGate] = [g for g in (skills.gate(ctx.workspace, None),) if g]
        if deferred:
            gates.append(DeferredGate(deferred, auto_promote=self.auto_promote))
        index = deferred_index(t.name for t in deferred) if deferred else ""
        names = [t.name for t in lead_tools]
        first, steps = await shaped_opening(lead_model, ctx.workspace, prompt, names, self.first_tool_choice)
        spec = AgentSpec(
            name="lead",
            instructions="\n\n".join(
                p for p in (self._lead_instructions(), context, skills.index(None), index, steps) if p
            ),
            model=lead_model,
            tools=lead_tools,
            max_steps=self.max_steps,
            timeout=self.timeout,
            compaction=self.compaction,
            context_window=self.context_window,
            guard=self.loop_guard,
            budget=budget,
            gates=gates,
            first_tool_choice=first,
            journal=journal,
        )
        failed = self._mcp_failed()
        found = [*self.catalogue.warnings, *skills.warnings]
        checkpoints = await begin([*(str(w) for w in found), *(f["warning"] for f in failed)])
        journal.load(checkpoints)
        recorder.start(run_id)
        slash = skills.slash_command(prompt, None)
        started: dict[str, Any] = {"prompt": prompt[:500], "model": lead_model.name}
        if checkpoints:
            started["resumed"] = True
        recorder.emit(Event(type="run.started", run_id=run_id, agent_id="lead", data=started))
        for warning in found:
            recorder.emit(Event(type="warning", run_id=run_id, agent_id="lead", data=warning.to_dict()))
        for data in failed:
            recorder.emit(Event(type="mcp.server_failed", run_id=run_id, agent_id="lead", data=data))
        warnings = [*(str(w) for w in found), *(f["warning"] for f in failed)]
        opening = [*([slash] if slash else []), Message.user(prompt)]
        return await self._drive(spec, ctx, opening, recorder, runner, warnings)

    async def _drive(
        self,
        spec: AgentSpec,
        ctx: ToolContext,
        messages: list[Message],
        recorder: Recorder,
        runner: SubagentRunner,
        warnings: list[str],
    ) -> RunResult:
        """Run the lead to its end, or until it is stopped: cancelled (by our caller, or from
        another process), taken over by another process, or interrupted (see `interrupt`)."""
        run_id = ctx.run_id
        agent = asyncio.create_task(run_agent(spec, ctx, messages))
        stopped: list[str] = []

        def stop(why: str) -> None:
            if not stopped:
                stopped.append(why)
                runner.interrupting = why == "interrupt"
                agent.cancel()

        recorder.on_stop = stop
        self._stops[run_id] = stop
        beat = asyncio.create_task(_heartbeat(runner, recorder, ctx, self.heartbeat_interval))
        try:
            result = await agent
        except asyncio.CancelledError:
            if not agent.done():  # our caller cancelled us (Ctrl-C, a signal)
                agent.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await agent
            cancelled = run_result(run_id, cancelled_result(ctx), runner, warnings)
            if stopped == ["interrupt"]:
                return await release_interrupted(
                    recorder, replace(cancelled, status="interrupted", stop_reason="interrupted")
                )
            await record_end(recorder, cancelled)
            if not stopped:
                raise
            return cancelled  # cancelled from another process, or the run was taken over
        except Exception as exc:  # a bug or the store failing: the run still ends, truthfully
            await recorder.finish("error", "", ctx.usage + runner.usage, f"{type(exc).__name__}: {exc}")
            raise
        else:  # `interrupt` meanwhile finds the run, so it is left to record how it ended
            outcome = run_result(run_id, result, runner, warnings)
            await record_end(recorder, outcome)
            return outcome
        finally:
            beat.cancel()
            self._stops.pop(run_id, None)

    async def run_task(
        self,
        *,
        subagent_type: str,
        prompt: str,
        description: str = "",
        acceptance_criteria: list[str] | None = None,
        run_id: str | None = None,
        user_id: str | None = None,
        tool_call_id: str | None = None,
        sinks: Iterable[EventSink] = (),
        token_budget: int | None = None,
        max_requests: int | None = None,
    ) -> TaskOutput:
        """Run one subagent directly, with no lead: what a batch worker does for each item.

        `token_budget` and `max_requests` (default: the runtime's) cap what it spends. Raises
        `UserError` for an unknown type, bad criteria or a bad limit; anything that happens to the
        subagent itself is in the returned `TaskOutput`.
        """
        budget = self._budget(token_budget, max_requests)
        visible = self.catalogue.visible(allow_commands=self.workspace.allow_commands)
        definition = visible.get(subagent_type)
        if definition is None:
            raise UserError(f"unknown subagent type {subagent_type!r}; available: {', '.join(visible.names())}")
        fan_out = [*self.sinks, *sinks, *_tracing.sinks()]
        skills = await asyncio.to_thread(self._skills)
        task_id = run_id or f"task_{uuid.uuid4().hex[:12]}"
        ctx = self._context(task_id, "batch", lambda e: _fan(fan_out, e), user_id, skills)
        inherited = [name for name in self.tools if name != "complete"]
        mcp_tools = await self._load_mcp()
        own = await self._load_own_mcp()
        for data in self._mcp_failed():
            ctx.emit(Event(type="mcp.server_failed", run_id=ctx.run_id, agent_id="batch", data=data))
        context = await asyncio.to_thread(self._prepare_workspace)
        model = await self._model_off_loop(self._model_spec)
        runner = self._runner(ctx, model, inherited, skills, mcp_tools, context, own, budget)
        try:
            criteria = parse_criteria(acceptance_criteria) if acceptance_criteria else None
            runner.prepare(definition)
        except ToolError as exc:
            raise UserError(str(exc)) from None
        return await runner.run(
            definition,
            prompt,
            description=description or subagent_type,
            parent=ctx,
            tool_call_id=tool_call_id,
            criteria=criteria,
        )

    def _budget(self, token_budget: int | None, max_requests: int | None) -> RunBudget | None:
        return RunBudget.of(
            self.token_budget if token_budget is None else token_budget,
            self.max_requests if max_requests is None else max_requests,
        )

    def _prepare_workspace(self) -> str:
        """What a lead's run and a batch item do first in the workspace: clear what killed writes
        left in its scratch folder (a killed `delegate run`, server or worker), and read its project
        context."""
        sweep_scratch(self.workspace)
        return project_context(self.workspace)

    def _skills(self) -> SkillCatalogue:
        """The skills of a run: the operator's, shadowed by the workspace's own when it is a user's."""
        if self._shared is None:
            return SkillCatalogue.build(self.workspace.root, dirs=self.skills_dirs)
        return SkillCatalogue.build(self._shared, dirs=self.skills_dirs, own=self.workspace.root)

    def _context(
        self, run_id: str, agent_id: str, emit: EventSink, user_id: str | None, skills: SkillCatalogue
    ) -> ToolContext:
        """The lead's (or a batch item's) context, over the workspace with the run's skills mounted."""
        return ToolContext(
            run_id=run_id,
            agent_id=agent_id,
            workspace=self.workspace.with_mounts(skills.mounts()),
            emit=emit,
            user_id=user_id or self.user_id or "default",
            timezone=self.timezone,
        )

    def _runner(
        self,
        parent: ToolContext,
        model: Model,
        parent_tools: list[str],
        skills: SkillCatalogue,
        mcp_tools: list[Tool],
        context: str = "",
        own_tools: Sequence[Tool] = (),
        budget: RunBudget | None = None,
    ) -> SubagentRunner:
        subagent_model = self.model_for(self._subagent_model_spec) if self._subagent_model_spec else None
        return SubagentRunner(
            run_id=parent.run_id,
            user_id=parent.user_id,
            timezone=self.timezone,
            workspace=parent.workspace,
            emit=parent.emit,
            tools=self._subagent_tools(uploads=parent.uploaded_files is not None)
            | {t.name: t for t in [*mcp_tools, *own_tools]},
            parent_tools=parent_tools,
            parent_model=model,
            subagent_model=subagent_model,
            model_for=self.model_for,
            max_parallel=self.max_parallel,
            max_total=self.max_subagents,
            compaction=self.compaction,
            context_window=self.context_window,
            guard=self.loop_guard,
            budget=budget,
            uploaded_files=parent.uploaded_files,
            skills=skills,
            deferred=mcp_tools if self.tool_search else (),
            auto_promote=self.auto_promote,
            project_context=context,
        )

    def _inline_servers(self) -> dict[str, MCPTools]:
        """The servers definitions define inline, per type; a bad entry is a catalogue warning."""
        found: dict[str, MCPTools] = {}
        problems: list[CatalogueWarning] = []
        for definition in self.catalogue.definitions.values():
            if not definition.mcp_inline:
                continue
            try:
                configs = [server_config(n, e, definition.source) for n, e in definition.mcp_inline.items()]
                found[definition.name] = MCPTools(configs, workspaces=self.mcp_workspaces)
            except UserError as exc:
                problems.append(CatalogueWarning(definition.source, f"{exc}; it runs without these servers"))
        self.catalogue = self.catalogue.with_warnings(problems)
        return found

    async def _load_own_mcp(self) -> list[Tool]:
        """The tools of the types' own servers, listed once; a server that cannot be used is left
        out (see `_mcp_failed`), and its type runs without its tools."""
        if self._own_mcp_tools is None:
            self._own_mcp_tools = []
            for servers in self._own_mcp.values():
                self._own_mcp_tools += await servers.load()
        return self._own_mcp_tools

    async def _load_mcp(self) -> list[Tool]:
        """The MCP servers' tools, listed once; a server that cannot be used is left out (see
        `_mcp_failed`), and the run goes on without its tools."""
        if self.mcp is None:
            return []
        if self._mcp_tools is None:
            self._mcp_tools = await self.mcp.load()
        return self._mcp_tools

    def _mcp_failed(self) -> list[dict[str, Any]]:
        """The MCP servers the last loads left out, as `mcp.server_failed` data: `server`, `reason`,
        `type` (the subagent type whose own server it is; None: the runtime's, for every agent),
        and `warning`, the line the run's `warnings` and the CLI show."""
        found: list[dict[str, Any]] = []
        groups = [(None, self.mcp), *self._own_mcp.items()]
        for type_name, servers in groups:
            for server, reason in (servers.failed if servers is not None else {}).items():
                without = (
                    "the run goes on without its tools"
                    if type_name is None
                    else f"type {type_name!r} runs without its tools"
                )
                found.append({"server": server, "reason": reason, "type": type_name, "warning": f"{reason}; {without}"})
        return found

    def _subagent_tools(self, *, uploads: bool) -> dict[str, Tool]:
        """What a definition's tool list may name: every built-in tool (`bash` only when commands
        are allowed), whether or not the lead has it, the runtime's own tools, and
        `list_uploaded_files` when the run has uploads."""
        pool = {t.name: t for t in builtin_tools(None, allow_commands=self.workspace.allow_commands)} | self.tools
        if uploads:
            pool[list_uploaded_files.name] = list_uploaded_files
        return pool

    def _task_tool(self, runner: SubagentRunner) -> Tool:
        allow = self.workspace.allow_commands
        visible = self.catalogue.visible(allow_commands=allow, permitted=self.permitted_subagents)
        hidden = [] if allow else [d.name for d in self.catalogue.definitions.values() if d.requires_commands]
        return task_tool(runner, visible, max_parallel=self.max_parallel, command_types=hidden)

    def _searchable_types(self) -> list[tuple[str, str]]:
        """The lead's types, for `tool_search`, when the `task` tool shortens their descriptions."""
        visible = self.catalogue.visible(
            allow_commands=self.workspace.allow_commands, permitted=self.permitted_subagents
        )
        types = [(d.name, d.description) for d in visible.definitions.values()]
        return types if type_listing(types)[1] else []

    @property
    def batches(self) -> Batches | None:
        """The batches the lead's `batch_task` submits to (None until a run offers the tool)."""
        return self._batches

    def _batch_tools(self, lead_model: Model, prompt: str) -> list[Tool]:
        """The lead's batch tools. A weak model (one that grounds its calls) is offered them only
        when the task asks for a batch or one exists: otherwise it calls them for nothing."""
        wanted = self.batch_tools if self.batch_tools is not None else self._store_option is not False
        store = self.store if wanted else None
        if store is None:
            return []
        from .batch import Batches, batch_tools

        if self._batches is None:
            self._batches = Batches(store)
        existing = [b.id for b in self._batches.list_batches(self.user_id or "default", limit=20)]
        if lead_model.profile.grounds_paths and not existing and not _ASKS_FOR_BATCH.search(prompt):
            return []
        visible = self.catalogue.visible(
            allow_commands=self.workspace.allow_commands, permitted=self.permitted_subagents
        )
        spec = self._subagent_model_spec
        model = spec if isinstance(spec, str) else (spec.name if spec is not None else lead_model.name)
        return batch_tools(self._batches, known_types=visible.names(), model=model, known_batches=existing)

    def warnings(self) -> list[CatalogueWarning]:
        """What is wrong with the definition and skill files this runtime reads: what
        `delegate agents list` prints and each run's `warning` events carry."""
        return [*self.catalogue.warnings, *self._skills().warnings]

    def _lead_instructions(self) -> str:
        if self.instructions:
            return f"{LEAD_INSTRUCTIONS}\n\n{self.instructions}"
        return LEAD_INSTRUCTIONS


_ASKS_FOR_BATCH = re.compile(r"\bbatch", re.IGNORECASE)


def _fan(sinks: list[EventSink], event: Event) -> None:
    for sink in sinks:
        sink(event)


async def _heartbeat(runner: SubagentRunner, recorder: Recorder, ctx: ToolContext, interval: float) -> None:
    """Tell the recorder the usage so far (stored with its lease's beats) and, every `interval`,
    emit each live subagent's heartbeat event."""
    beat = min(interval, recorder.heartbeat)
    waited = 0.0
    while True:
        await asyncio.sleep(beat)
        recorder.usage = ctx.usage + runner.usage
        waited += beat
        if waited >= interval:
            waited = 0.0
            runner.heartbeat()


def _inside(root: Path, *folders: Sequence[str | PathLike[str]]) -> list[str]:
    """The folders that lie inside `root`, relative to it (definitions: read-only to agents)."""
    found: list[str] = []
    for group in folders:
        for folder in group:
            real = Path(folder).expanduser().resolve()
            if real != root and real.is_relative_to(root):
                found.append(real.relative_to(root).as_posix())
    return found


def _local_timezone() -> str:
    name = datetime.now(UTC).astimezone().tzname()
    return name or time.tzname[0] or "UTC"
