"""`Runtime`: owns the workspace, the models, the subagent catalogue, the store and the event sinks,
and runs a lead agent that can delegate."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import Extensions, LoopSettings, RunLimits
from .._errors import ToolError, UserError
from .._events import Event, EventSink
from .._messages import Message
from .._text import safe_text
from ..agents import Catalogue, CatalogueWarning, Lead, Subagent
from ..mcp import MCPTools
from ..models import Model, ModelAliases, ModelPrices, resolve_model
from ..skills import SkillCatalogue
from ..subagents import SubagentCall, TaskOutput, parse_criteria, project_context, recover_merges, sweep_layers
from ..tools import Tool, sweep_scratch, uploads_state
from ..workflows import Workflow
from ..workspace import HOST, CommandPolicy, Home, Workspace
from . import _tracing  # pyright: ignore[reportPrivateUsage]  # the module: bench_tracing.py swaps its sinks
from ._approvals import decide_call, prompt_hooks
from ._gates import Gates, tightened
from ._home import check_home
from ._lead import Begin, LeadDrive, drive_lead
from ._memory import run_skills
from ._open import open_store
from ._pool import inline_servers, inside, lead_tool_names, local_timezone, mcp_failed, tool_pool, unknown_tools
from ._recorder import Recorder
from ._run import open_run
from ._run_result import RunResult
from ._settings import user_level
from ._threads import Thread, continued, history_of, open_thread, thread_uploads

if TYPE_CHECKING:
    from .._record import ApprovalRow, Change
    from .._store import Checkpoint, Store
    from ..batch import Batches
    from ..workspace import Layer


class Runtime:
    """Runs lead agents that delegate to subagents over one workspace.

    `model` is a `provider:name` string or a `Model` (default: `DELEGATE_MODEL`, else a provider
    with a key in the environment, else `local`): the model of every agent whose definition says
    `inherit`. `workspace` is the folder the agents work in (created if missing). `store` is a
    `Store`, a database URL, `None` for `<workspace>/.delegate/delegate.db`, or `False` to keep
    nothing.

    `lead` is what runs for each prompt (a `Lead`: its instructions, tools, max steps, the types
    it may delegate to, ...); `subagents` are types given in code, over the built-in ones and those
    of the workspace's definition files (see `delegate.agents`).

    `limits` caps every run (a `RunLimits`: its time, budgets and subagents; `run` may give
    others for one run). `loop` says how every agent's loop runs (`LoopSettings`: compaction, the
    context window, the loop guard). `extensions` says what else it loads (`Extensions`: folders of
    definitions and skills, MCP servers, model aliases). `commands` lets agents run shell commands,
    under that `CommandPolicy` (default None: no commands).

    With a store, every run holds a lease and checkpoints what its lead did as it happens, so a
    run whose process died reads `interrupted` and `resume` continues it (see docs/guarantees.md).
    `sinks` get every event of every run. `user_id` owns the runs in the store (None for local
    use); `timezone` is the agents' (default: this machine's).
    """

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        workspace: str | PathLike[str] = ".",
        lead: Lead | None = None,
        subagents: Iterable[Subagent] = (),
        limits: RunLimits | None = None,
        loop: LoopSettings | None = None,
        extensions: Extensions | None = None,
        commands: CommandPolicy | None = None,
        store: Store | str | bool | None = None,
        sinks: Iterable[EventSink] = (),
        user_id: str | None = None,
        timezone: str | None = None,
    ) -> None:
        self.lead = lead or Lead()
        self.limits = limits or RunLimits()
        self.loop = loop or LoopSettings()
        self.extensions = extensions or Extensions()
        ext = self.extensions
        opened = Workspace.open(workspace, allow_commands=commands is not None, commands=commands, create=True)
        self._shared = Path(ext.shared).expanduser().resolve() if ext.shared is not None else None
        read_only = (*opened.read_only, *inside(opened.root, ext.agents_dirs, ext.skills_dirs))
        self.workspace = replace(opened, read_only=read_only, outputs=Path(ext.outputs))
        """The agents' view of the workspace: see `Workspace` (definition folders inside it are read-only)."""
        self._model_spec = model
        self._models: dict[str, Model] = {}
        self.aliases = ModelAliases.load(self._shared or self.workspace.root, ext.model_aliases)
        self.prices = ModelPrices.load(ext.model_prices)
        """How the models this runtime builds from strings are priced (`Extensions.model_prices`)."""
        given = list(subagents)
        self.catalogue = Catalogue.build(
            workspace=self._shared or self.workspace.root,
            agent_dirs=[Path(d) for d in ext.agents_dirs],
            own=self.workspace.root if self._shared is not None else None,
            subagents=given,
            builtins=ext.builtin_subagents,
            aliases=self.aliases,
            user=user_level(ext),
        )
        self.gates = Gates.build(
            ext.permissions, self._shared or self.workspace.root, self.catalogue, self._shared, self.workspace
        )
        """What can stop a call of every run: the permission rules (`Extensions.permissions` and the
        operator's settings files), the permission mode, and the hooks (see docs/approvals.md)."""
        self.tools = tool_pool(self.lead, given, allow_commands=commands is not None)
        """Every tool a definition may name: the built-in ones and those given in code."""
        self.catalogue = self.catalogue.with_warnings(unknown_tools(self.catalogue, self.tools))
        self.lead_tool_names = lead_tool_names(self.lead, self.tools)
        """The names of the lead's own tools (before `task`, the background and batch tools)."""
        if self.offers("batch_task") is True and store is False:
            raise UserError("the lead's tools name batch_task, which needs a store: drop store=False")
        self.mcp_workspaces = [self.workspace.root, *([self._shared] if self._shared is not None else [])]
        """Folders no MCP server may be given (their `.delegate/` would be in its reach: see `exposed_state`)."""
        self.mcp = MCPTools(ext.mcp_servers, workspaces=self.mcp_workspaces) if ext.mcp_servers else None
        self._own_mcp, problems = inline_servers(self.catalogue, self.mcp_workspaces)
        """Per type, the MCP servers its definition defines inline (started at a run's start)."""
        self.catalogue = self.catalogue.with_warnings(problems)
        self._own_mcp_tools: list[Tool] | None = None
        """The MCP servers' tools: loaded on first use; deferred behind `tool_search` when it is on,
        with the `auto_promote` that best match a task loaded from its first turn."""
        self._mcp_tools: list[Tool] | None = None
        self.sinks = list(sinks)
        self.user_id = user_id
        """The owner of this runtime's runs in the store; None for local use (the CLI)."""
        self.timezone = timezone or local_timezone()
        self._store_option = store
        self._going: dict[str, LeadDrive] = {}
        """Each lead's run of this runtime that is going: what `interrupt` stops, `decide` decides in."""
        self._store: Store | None = None
        self._owns_store = False
        self._batches: Batches | None = None

    def offers(self, capability: str) -> bool | None:
        """Whether the lead's definition gives it `task` or `batch_task`: None when it does not
        say (its `tools` is the default set)."""
        names = self.lead.tool_names
        return None if names is None else capability in names

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
            model = self._models[key] = resolve_model(spec, self.prices)
        return model

    async def model_off_loop(self, spec: str | Model | None) -> Model:
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
            from .._store import Store

            option = self._store_option
            self._owns_store = not isinstance(option, Store)
            if isinstance(option, Store):
                self._store = option
            else:
                self._store = open_store(option if isinstance(option, str) else None, self.workspace.root)
        return self._store

    # -- running ----------------------------------------------------------------------------

    def run_sync(self, prompt: str, **kwargs: Any) -> RunResult:  # the keywords of `run`
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
        going = list(self._going.values())
        for drive in going:
            drive.stop("interrupt")
        return len(going)

    async def decide(
        self, run_id: str, call_id: str, *, approve: bool, reason: str = "", always: bool = False
    ) -> ApprovalRow:
        """Decide a call of `run_id` that waits for a person: stored first, then given to the call
        at once when the run goes on in this process (another process finds it at its next beat).
        `always` (with `approve`) approves the calls of the same rule for the rest of the run.
        Raises `UserError` for an unknown run or call, or one decided already."""
        drive = self._going.get(run_id)
        live = drive.run.approvals if drive is not None else None
        return await decide_call(self.store, live, run_id, call_id, approve, reason, always, self.user_id)

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
        limits: RunLimits | None = None,
        continue_from: str | None = None,
        workflow: Workflow | str | None = None,
        eval_tag: dict[str, Any] | None = None,
        gates: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run the lead agent on `prompt` to its final answer; or run a `workflow` (a `Workflow`, a
        script; `prompt` says what it is for) instead of the lead: see docs/workflows.md.

        `limits` are this run's, instead of the runtime's (`replace(runtime.limits, token_budget=...)`
        changes one of them).

        `uploaded_files` are files the user uploaded earlier in the conversation: entries with a
        `filename` (and `path`, `size`, `content_type` when known). With them (an empty list too),
        the lead and its subagents get `list_uploaded_files`; a malformed list is treated as none.

        `continue_from` (a run id) continues that run's thread: the lead starts from the
        conversation that run's lead ended with, in the same workspace, with the thread's uploads
        and these (see `delegate.run._threads`). `UserError` if that run is unknown (or another
        user's), has not ended (`running`, `waiting`, `interrupted`), or was continued already.

        `eval_tag` marks the run as an attempt of an evaluation (`eval_id`, `arm`, `task`,
        `attempt`), kept in its record: `delegate eval` starts its attempts so (docs/eval.md).

        `gates` are those of the process that asked for the run (its `Gates.stored()`): a run
        started elsewhere and executed here (a Temporal worker's) runs under them, with this
        runtime's `ask` and `deny` rules, hooks and a stricter mode added, as a resume does
        (`UserError` for gates that cannot be read back).
        """
        workflow = Workflow(script=workflow, description=prompt) if isinstance(workflow, str) else workflow
        if workflow is not None and continue_from is not None:
            raise UserError("a workflow starts a thread of its own: drop continue_from")
        prompt = prompt or (workflow.title if workflow is not None else "")
        if not prompt.strip():
            raise UserError("the prompt is empty: say what the agent should do")
        prompt = safe_text(prompt)  # an argument `delegate run $'\xff'` holds a lone surrogate
        run_gates: tuple[Gates, list[str]] = tightened(self.gates, gates) if gates is not None else (self.gates, [])
        if run_gates[0].hooks is not None:  # UserPromptSubmit: refuse it (a UserError), or add context
            prompt = await prompt_hooks(run_gates[0].hooks, prompt, self.workspace, [*self.sinks, *sinks])
        limits = limits or self.limits
        uploaded_files = uploads_state(uploaded_files)
        history: list[Message] = []
        if continue_from is not None:
            previous, history = await asyncio.to_thread(continued, self, continue_from)
            uploaded_files = thread_uploads(previous.uploaded_files, uploaded_files)
        run_id = run_id or f"run_{uuid.uuid4().hex[:12]}"
        recorder = Recorder(self.store, [*self.sinks, *sinks, *_tracing.sinks()])
        lead_model = await self.model_off_loop(model or self._model_spec)
        thread_id = [run_id]

        async def begin(warnings: list[str]) -> list[Checkpoint]:
            if recorder.store is not None:
                home = await asyncio.to_thread(Home.of, self.workspace.root)
                row = await asyncio.to_thread(
                    functools.partial(
                        recorder.store.create_run,
                        run_id=run_id,
                        user_id=self.user_id,
                        prompt=prompt,
                        model=lead_model.name,
                        workspace=home.path,
                        workspace_host=home.host,
                        workspace_id=home.id,
                        owner=recorder.owner,
                        uploaded_files=uploaded_files,
                        limits=limits.to_dict(),
                        gates=run_gates[0].stored(),
                        warnings=warnings,
                        previous_run_id=continue_from,
                        workflow=workflow.to_dict() if workflow is not None else None,
                        eval_tag=eval_tag,
                    )
                )
                thread_id[0] = row.thread_id or run_id
            return []

        result = await self._lead(
            prompt, run_id, recorder, lead_model, uploaded_files, begin, limits, history, run_gates, workflow
        )
        result.thread_id, result.previous_run_id, result.eval = thread_id[0], continue_from, eval_tag
        return result

    def thread(self, continue_from: str | None = None) -> Thread:
        """A conversation (see `Thread`): a new one, or the thread of the stored run
        `continue_from`, whose next `send` continues that run."""
        return open_thread(self, continue_from)

    async def resume(
        self,
        run_id: str,
        *,
        sinks: Iterable[EventSink] = (),
        model: str | Model | None = None,
        limits: RunLimits | None = None,
        workflow: Workflow | None = None,
        gates: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Continue an interrupted run (its process died) from its checkpoints (a workflow: its
        script, or a changed `workflow`, again, answered from its journal).

        The lead's answers and tool results recorded before are replayed, not asked or run again;
        subagents that finished are reused, the others start afresh; usage counts each answer
        once. The model is `model`, else this runtime's, else the one the run was started with; the
        uploaded files and the limits (`RunLimits`: time, budgets, subagents) are the ones it was
        started with (a run stored before its limits were kept: its budgets, over this runtime's),
        unless `limits` gives others (`runtime.limits.over(stored.limits).over({...})` changes some).
        Its gates (the permission rules, mode and hooks that can stop a call) are the ones it was
        started with, with this runtime's `ask` and `deny` rules, hooks and a stricter mode added:
        what would loosen them is not applied, and said in the run's warnings (see `run/_gates.py`).
        `gates` (a `Gates.stored()` of the process that asked for the resume, executed here on a
        Temporal worker) are added to this runtime's the same way.
        Raises `UserError` if the run is unknown, still running, or ended, or its stored gates
        cannot be read back.
        """
        store = self.store
        if store is None:
            raise UserError("resuming a run needs the store it was recorded in (store=False keeps nothing)")
        recorder = Recorder(store, [*self.sinks, *sinks, *_tracing.sinks()])
        run = await asyncio.to_thread(store.get_run, run_id, self.user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        here = self.workspace.root
        # Its files (finished subagents' work, its layers) are in its own folder: run here, it would
        # go on without them and write where nobody looks. A server or worker that cannot reach
        # that folder leaves the run to one that can (the takeover says why).
        await asyncio.to_thread(check_home, run, here, served=self.user_id is not None)
        lead_model = await self.model_off_loop(model or self._model_spec or run.model)

        async def begin(warnings: list[str]) -> list[Checkpoint]:
            await asyncio.to_thread(
                functools.partial(
                    store.claim_run, run_id, recorder.owner, self.user_id, warnings=warnings, at=(HOST, str(here))
                )
            )
            return await asyncio.to_thread(store.checkpoints, run_id)

        limits = limits or self.limits.over(run.limits or {})
        mine = tightened(self.gates, gates)[0] if gates is not None else self.gates
        run_gates, said = tightened(mine, run.gates) if run.gates is not None else (mine, [])
        previous = run.previous_run_id
        history = await asyncio.to_thread(history_of, store, previous) if previous is not None else []
        if workflow is not None and run.workflow is None:
            raise UserError(f"run {run_id} is not a workflow: resume it without one")
        workflow = workflow or (Workflow.from_dict(run.workflow) if run.workflow is not None else None)
        result = await self._lead(
            run.prompt,
            run_id,
            recorder,
            lead_model,
            run.uploaded_files,
            begin,
            limits,
            history,
            (run_gates, said),
            workflow,
        )
        result.thread_id, result.previous_run_id = run.thread_id, previous
        return result

    async def _lead(
        self,
        prompt: str,
        run_id: str,
        recorder: Recorder,
        lead_model: Model,
        uploaded_files: list[dict[str, Any]] | None,
        begin: Begin,
        limits: RunLimits,
        history: Sequence[Message] = (),
        gates: tuple[Gates, list[str]] | None = None,
        workflow: Workflow | None = None,
    ) -> RunResult:
        """Build the run whole, then drive its lead, or its `workflow` instead (see `_lead.py`).
        `gates` are a resumed run's (its stored ones, tightened by this runtime's), with what of
        this runtime's was not applied."""
        run_gates, said = gates or (self.gates, [])
        run = await open_run(
            self,
            run_id=run_id,
            limits=limits,
            gates=run_gates,
            model=lead_model,
            emit=recorder.sink,
            recorder=recorder,
            uploaded_files=uploaded_files,
        )
        return await drive_lead(
            self,
            prompt=prompt,
            run=run,
            model=lead_model,
            begin=begin,
            history=history,
            going=self._going,
            workflow=workflow,
            said=said,
        )

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
        limits: Mapping[str, Any] | None = None,
    ) -> TaskOutput:
        """Run one subagent directly, with no lead: what a batch worker does for each item.

        `limits` (`RunLimits` fields by name: a batch item's) tighten the runtime's for it, never
        loosen them (`RunLimits.under`): its cost budget, tokens, requests, time... Raises
        `UserError` for an unknown type, bad criteria or a bad limit; anything that happens to the
        subagent itself is in the returned `TaskOutput`.
        """
        held = self.limits.under(RunLimits.given(limits or {}))
        visible = self.catalogue.visible(allow_commands=self.workspace.allow_commands)
        definition = visible.get(subagent_type)
        if definition is None:
            raise UserError(f"unknown subagent type {subagent_type!r}; available: {', '.join(visible.names())}")
        fan_out = [*self.sinks, *sinks, *_tracing.sinks()]
        task_id = run_id or f"task_{uuid.uuid4().hex[:12]}"
        emit: EventSink = functools.partial(_fan, fan_out)
        model = await self.model_off_loop(self._model_spec)
        run = await open_run(
            self, run_id=task_id, limits=held, model=model, emit=emit, user_id=user_id, agent_id="batch"
        )
        for data in self.mcp_failed():
            emit(Event(type="mcp.server_failed", run_id=task_id, agent_id="batch", data=data))
        runner, ctx = run.runner, run.context
        try:
            criteria = parse_criteria(acceptance_criteria) if acceptance_criteria else None
            runner.prepare(definition)
        except ToolError as exc:
            raise UserError(str(exc)) from None
        call = SubagentCall(
            definition=definition,
            prompt=prompt,
            description=description or subagent_type,
            parent=ctx,
            tool_call_id=tool_call_id,
            criteria=criteria,
        )
        return await runner.run(call)

    def prepare_workspace(self) -> tuple[str, list[tuple[Layer, list[Change]]]]:
        """What a lead's run and a batch item do first in the workspace: clear what killed writes
        left in its scratch folder (a killed `delegate run`, server or worker), make its outputs folder,
        finish the merges that a kill interrupted and sweep old layers (`workspace/_merge.py`), and
        read its project context. Returns the context, and the merges finished now."""
        sweep_scratch(self.workspace)
        self.workspace.make_outputs()
        recovered = recover_merges(self.workspace)
        sweep_layers(self.workspace, self.limits.layers_kept)
        return project_context(self.workspace), recovered

    def skills(self) -> SkillCatalogue:
        """The skills of a run (see `run_skills`)."""
        return run_skills(self.extensions, self.workspace.root, self._shared, self.store, self.user_id)

    async def own_mcp_tools(self) -> list[Tool]:
        """The tools of the types' own servers, listed once; a server that cannot be used is left
        out (see `mcp_failed`), and its type runs without its tools."""
        if self._own_mcp_tools is None:
            self._own_mcp_tools = []
            for servers in self._own_mcp.values():
                self._own_mcp_tools += await servers.load()
        return self._own_mcp_tools

    async def mcp_tools(self) -> list[Tool]:
        """The MCP servers' tools, listed once; a server that cannot be used is left out (see
        `mcp_failed`), and the run goes on without its tools."""
        if self.mcp is None:
            return []
        if self._mcp_tools is None:
            self._mcp_tools = await self.mcp.load()
        return self._mcp_tools

    def delegable(self) -> Catalogue:
        """The types the lead may start: those its definition permits that this workspace can run."""
        return self.catalogue.visible(allow_commands=self.workspace.allow_commands, permitted=self.lead.subagents)

    def mcp_failed(self) -> list[dict[str, Any]]:
        """The MCP servers the last loads left out, as `mcp.server_failed` data (see `_pool.mcp_failed`)."""
        return mcp_failed(self.mcp, self._own_mcp)

    @property
    def batches(self) -> Batches | None:
        """The batches the lead's `batch_task` submits to (None until a run offers the tool)."""
        return self._batches

    def lead_batches(self) -> Batches | None:
        """The batches the lead's batch tools submit to, opened on first use; None when the lead
        is not offered them (its tools leave `batch_task` out, or the store is off)."""
        offered = self.offers("batch_task")
        wanted = offered if offered is not None else self._store_option is not False
        store = self.store if wanted else None
        if store is None:
            return None
        if self._batches is None:
            from ..batch import Batches  # the batch layer, on first use: most runs never load it

            self._batches = Batches(store)
        return self._batches

    def subagent_model(self) -> Model | None:
        """The model of subagents whose definition says `inherit`, when the lead's definition
        names one (None: the lead's own)."""
        spec = self.lead.subagent_model
        return self.model_for(spec) if spec else None

    def warnings(self) -> list[CatalogueWarning]:
        """What is wrong with the definition and skill files this runtime reads: what
        `delegate agents list` prints and each run's `warning` events carry."""
        return [*self.catalogue.warnings, *self.skills().warnings]


def _fan(sinks: list[EventSink], event: Event) -> None:
    for sink in sinks:
        sink(event)
