"""`Runtime`: owns the workspace, the models, the subagent catalogue, the store and the event sinks,
and runs a lead agent that can delegate."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _tracing
from .._agents import Catalogue, Lead, Subagent
from .._config import Extensions, LoopSettings, RunLimits
from .._errors import ToolError, UserError
from .._events import Event, EventSink
from .._frontmatter import CatalogueWarning
from .._messages import Message
from .._text import safe_text
from ..loop import AgentResult, AgentSpec, RunBudget
from ..mcp import MCPTools
from ..memory import RunMemory
from ..models import Model, ModelAliases, resolve_model
from ..permissions import CallPolicy
from ..skills import SkillCatalogue
from ..subagents import (
    RunScope,
    SubagentCall,
    SubagentRunner,
    TaskOutput,
    assemble,
    background_tools,
    parse_criteria,
    project_context,
    recover_merges,
    run_checked,
    sweep_layers,
    task_tool,
    toolset,
    type_listing,
)
from ..tools import (
    CallGuard,
    Tool,
    ToolContext,
    list_uploaded_files,
    sweep_scratch,
    uploads_state,
)
from ..workflows import WORKFLOW, Workflow, WorkflowHost, drive, workflow_tool
from ..workspace import CommandPolicy, Workspace
from ._approvals import NEVER_WAIT, RunApprovals, build_hooks, decide_call, load_permissions, prompt_hooks
from ._memory import run_memory, run_skills
from ._pool import inline_servers, inside, lead_tool_names, local_timezone, mcp_failed, tool_pool, unknown_tools
from ._recorder import Recorder, StoredJournal, beat_for
from ._run_result import RunResult, cancelled_result, record_end, release_interrupted, run_result
from ._settings import open_store, user_level
from ._threads import Thread, continued, history_of, keep_conversation, open_thread, thread_uploads

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
    of the workspace's definition files (see `delegate._agents`).

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
        self.permissions, self.hook_settings = load_permissions(ext.permissions, self._shared or self.workspace.root)
        """The permission rules of every run (`Extensions.permissions` and the operator's settings
        files), and the command hooks of those files (see docs/approvals.md)."""
        self._policy = CallPolicy.compile(self.permissions)
        self.hooks = build_hooks(self.permissions, self.hook_settings, self.catalogue, self._shared, self.workspace)
        """The hooks of every run: Python hooks, and the commands of the operator's files (None: none)."""
        self.tools = tool_pool(self.lead, given, allow_commands=commands is not None)
        """Every tool a definition may name: the built-in ones and those given in code."""
        self.catalogue = self.catalogue.with_warnings(unknown_tools(self.catalogue, self.tools))
        self._lead_tools = lead_tool_names(self.lead, self.tools)
        if self._offers("batch_task") is True and store is False:
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
        self._stops: dict[str, Callable[[str], None]] = {}
        """How to stop each run of this runtime that is going: see `interrupt`."""
        self._approvals: dict[str, RunApprovals] = {}
        """The approver of each run of this runtime that is going: see `decide`."""
        self._store: Store | None = None
        self._owns_store = False
        self._batches: Batches | None = None

    def _offers(self, capability: str) -> bool | None:
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
        stops = list(self._stops.values())
        for stop in stops:
            stop("interrupt")
        return len(stops)

    @property
    def _may_guard(self) -> bool:
        """Whether any rule, mode or hook may act on a call (else no tool is wrapped at all)."""
        return bool(self.permissions) or self.hooks is not None

    async def decide(
        self, run_id: str, call_id: str, *, approve: bool, reason: str = "", always: bool = False
    ) -> ApprovalRow:
        """Decide a call of `run_id` that waits for a person: stored first, then given to the call
        at once when the run goes on in this process (another process finds it at its next beat).
        `always` (with `approve`) approves the calls of the same rule for the rest of the run.
        Raises `UserError` for an unknown run or call, or one decided already."""
        live = self._approvals.get(run_id)
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
        """
        workflow = Workflow(script=workflow, description=prompt) if isinstance(workflow, str) else workflow
        if workflow is not None and continue_from is not None:
            raise UserError("a workflow starts a thread of its own: drop continue_from")
        prompt = prompt or (workflow.title if workflow is not None else "")
        if not prompt.strip():
            raise UserError("the prompt is empty: say what the agent should do")
        prompt = safe_text(prompt)  # an argument `delegate run $'\xff'` holds a lone surrogate
        if self.hooks is not None:  # UserPromptSubmit: refuse it (a UserError), or add context
            prompt = await prompt_hooks(self.hooks, prompt, self.workspace, [*self.sinks, *sinks])
        limits = limits or self.limits
        uploaded_files = uploads_state(uploaded_files)
        history: list[Message] = []
        if continue_from is not None:
            previous, history = await asyncio.to_thread(continued, self, continue_from)
            uploaded_files = thread_uploads(previous.uploaded_files, uploaded_files)
        run_id = run_id or f"run_{uuid.uuid4().hex[:12]}"
        recorder = Recorder(self.store, [*self.sinks, *sinks, *_tracing.sinks()])
        lead_model = await self._model_off_loop(model or self._model_spec)
        thread_id = [run_id]

        async def begin(warnings: list[str]) -> list[Checkpoint]:
            if recorder.store is not None:
                row = await asyncio.to_thread(
                    functools.partial(
                        recorder.store.create_run,
                        run_id=run_id,
                        user_id=self.user_id,
                        prompt=prompt,
                        model=lead_model.name,
                        workspace=str(self.workspace.root),
                        owner=recorder.owner,
                        uploaded_files=uploaded_files,
                        limits=limits.to_dict(),
                        warnings=warnings,
                        previous_run_id=continue_from,
                        workflow=workflow.to_dict() if workflow is not None else None,
                        eval_tag=eval_tag,
                    )
                )
                thread_id[0] = row.thread_id or run_id
            return []

        result = await self._lead(
            prompt, run_id, recorder, lead_model, uploaded_files, begin, limits, history, workflow
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
    ) -> RunResult:
        """Continue an interrupted run (its process died) from its checkpoints (a workflow: its
        script, or a changed `workflow`, again, answered from its journal).

        The lead's answers and tool results recorded before are replayed, not asked or run again;
        subagents that finished are reused, the others start afresh; usage counts each answer
        once. The model is `model`, else this runtime's, else the one the run was started with; the
        uploaded files and the limits (`RunLimits`: time, budgets, subagents) are the ones it was
        started with (a run stored before its limits were kept: its budgets, over this runtime's),
        unless `limits` gives others (`runtime.limits.over(stored.limits).over({...})` changes some).
        Raises `UserError` if the run is unknown, still running, or ended.
        """
        store = self.store
        if store is None:
            raise UserError("resuming a run needs the store it was recorded in (store=False keeps nothing)")
        recorder = Recorder(store, [*self.sinks, *sinks, *_tracing.sinks()])
        run = await asyncio.to_thread(store.get_run, run_id, self.user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        here = str(self.workspace.root)
        if run.workspace is not None and run.workspace != here:
            # Its files (finished subagents' work, its layers) are in its own folder: run here, it
            # would go on without them and write where nobody looks. A server or worker that cannot
            # reach that folder leaves the run to one that can (the takeover logs this reason).
            where = "another workspace than this server's" if self.user_id is not None else run.workspace
            raise UserError(
                f"run {run_id} works in {where}, not {here if self.user_id is None else 'here'}: resume it "
                "where its files are (--workspace of that folder; servers sharing one store share their folder: "
                "docs/http.md)"
            )
        lead_model = await self._model_off_loop(model or self._model_spec or run.model)

        async def begin(warnings: list[str]) -> list[Checkpoint]:
            await asyncio.to_thread(
                functools.partial(store.claim_run, run_id, recorder.owner, self.user_id, warnings=warnings)
            )
            return await asyncio.to_thread(store.checkpoints, run_id)

        limits = limits or self.limits.over(run.limits or {})
        previous = run.previous_run_id
        history = await asyncio.to_thread(history_of, store, previous) if previous is not None else []
        if workflow is not None and run.workflow is None:
            raise UserError(f"run {run_id} is not a workflow: resume it without one")
        workflow = workflow or (Workflow.from_dict(run.workflow) if run.workflow is not None else None)
        result = await self._lead(
            run.prompt, run_id, recorder, lead_model, run.uploaded_files, begin, limits, history, workflow
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
        begin: Callable[[list[str]], Awaitable[list[Checkpoint]]],
        limits: RunLimits,
        history: Sequence[Message] = (),
        workflow: Workflow | None = None,
    ) -> RunResult:
        """Build the lead (or a `workflow`'s host, which runs instead), then `begin` (record the
        run with its warnings, or claim it and read its checkpoints), then run it under `limits`,
        after `history` (the conversation of the run it continues): nothing is recorded for a lead
        that cannot be built."""
        journal = StoredJournal(recorder)
        skills = await asyncio.to_thread(self._skills)
        context, recovered = await asyncio.to_thread(self._prepare_workspace)
        mcp_tools = await self._load_mcp()
        own = await self._load_own_mcp()
        approvals = RunApprovals(recorder, limits.approval_timeout) if self._may_guard else None
        guard = CallGuard(self._policy, approvals, self.hooks) if approvals is not None else None
        memory = await asyncio.to_thread(run_memory, run_id, self.user_id, self.workspace.root, recorder.store)
        scope = self._scope(run_id, recorder.sink, self.user_id, skills, limits, mcp_tools, context, guard, memory)
        ctx = self._context(scope, "lead")
        ctx.uploaded_files = uploads_state(uploaded_files)
        lead_tools = [self.tools[name] for name in self._lead_tools] + mcp_tools + memory.for_lead(self.lead.tool_names)
        if ctx.uploaded_files is not None:
            lead_tools.append(list_uploaded_files)
        runner = self._runner(scope, ctx, lead_model, [t.name for t in lead_tools], mcp_tools, own)
        runner.finished, runner.saved_conversations = journal.subagents, journal.conversations
        if recorder.store is not None:  # what nothing stores is not handed over at all (decided once a run)
            runner.on_finish, runner.written = recorder.subagent_finished, recorder.written
        if approvals is not None:
            keep = self._policy.ask and recorder.store is not None  # subagents may wait: a resume replays them
            self._approvals[run_id] = approvals.attach(runner, journal.scoped if keep else None)
        spec = await self._lead_spec(runner, scope, lead_model, lead_tools, prompt, journal) if not workflow else None
        failed = self._mcp_failed()
        found = [*self.catalogue.warnings, *skills.warnings]
        checkpoints = await begin([*(str(w) for w in found), *(f["warning"] for f in failed)])
        journal.load(checkpoints)
        if approvals is not None and recorder.store is not None:  # a resumed run's rules approved "always"
            approvals.load(await asyncio.to_thread(recorder.store.approvals, run_id))
        if checkpoints and recorder.store is not None:  # resumed: stops asked of the process that died
            _, _, stops = await asyncio.to_thread(recorder.store.heartbeat, run_id, recorder.owner)
            ended = {r.id for r in journal.subagents.values()}
            runner.stopping.update({a: r or "stopped by the operator" for a, r in stops.items() if a not in ended})
        recorder.start(run_id)
        slash = skills.slash_command(prompt, None)
        started: dict[str, Any] = {"prompt": prompt[:500], "model": lead_model.name}
        if checkpoints:
            started["resumed"] = True
        recorder.emit(Event(type="run.started", run_id=run_id, agent_id="lead", data=started))
        for warning in found:
            recorder.emit(Event(type="warning", run_id=run_id, agent_id="lead", data=warning.to_dict()))
        for layer, changes in recovered:  # a merge of this run that a kill cut short, finished now
            if layer.run_id == run_id:
                runner.recovered[layer.agent_id] = changes
                data = {"changes": [c.to_dict() for c in changes], "recovered": True}
                recorder.emit(Event(type="workspace.merged", run_id=run_id, agent_id=layer.agent_id, data=data))
        for data in failed:
            recorder.emit(Event(type="mcp.server_failed", run_id=run_id, agent_id="lead", data=data))
        warnings = [*(str(w) for w in found), *(f["warning"] for f in failed)]
        if spec is None:
            assert workflow is not None
            return await self._workflow(workflow, ctx, recorder, runner, warnings)
        opening = [*history, *([slash] if slash else []), Message.user(prompt)]
        lead = runner.background.outlast(run_checked(spec, ctx, opening, self.hooks, None))
        return await self._drive(lead, ctx, opening, recorder, runner, warnings, spec.instructions)

    async def _workflow(
        self, workflow: Workflow, ctx: ToolContext, recorder: Recorder, runner: SubagentRunner, warnings: list[str]
    ) -> RunResult:
        """Run a run that is a workflow: its script, over the run's subagents (see docs/workflows.md)."""
        cap = runner.scope.limits.workflow_agents
        host = WorkflowHost(runner, ctx, self._delegable(), prefix="", cap=cap, emit=runner.emit)
        plan = drive(workflow, host, functools.partial(recorder.checkpoint, WORKFLOW, "run"))
        result = await self._drive(plan, ctx, [], recorder, runner, warnings, None)
        result.workflow = host.record
        return result

    async def _lead_spec(
        self,
        runner: SubagentRunner,
        scope: RunScope,
        lead_model: Model,
        lead_tools: list[Tool],
        prompt: str,
        journal: StoredJournal,
    ) -> AgentSpec:
        """The lead's spec: its tools (delegation and batches with them), system prompt and model."""
        task = self._task_tool(runner) if self._offers("task") is not False and len(self.catalogue) else None
        if task is not None:
            lead_tools += [task, *background_tools(runner.background)]
        if task is not None and self._offers("workflow") is not False:  # workflows: plans in code, see docs
            keep = functools.partial(journal.recorder.checkpoint, WORKFLOW)
            lead_tools.append(workflow_tool(runner, self._delegable(), cap=scope.limits.workflow_agents, keep=keep))
        lead_tools += await asyncio.to_thread(self._batch_tools, lead_model, prompt)
        types = [(d.name, d.description) for d in self._delegable().definitions.values()] if task is not None else []
        tools = toolset(self.lead, lead_tools, scope, types if type_listing(types)[1] else [])  # for tool_search
        background = runner.background if task is not None else None
        compactor = self.lead.compaction_model
        return await assemble(
            self.lead,
            scope,
            model=lead_model,
            tools=tools,
            prompt=prompt,
            journal=journal,
            background=background,
            compaction_model=None if compactor is None else await self._model_off_loop(compactor),
        )

    async def _drive(
        self,
        work: Coroutine[Any, Any, AgentResult],
        ctx: ToolContext,
        messages: list[Message],
        recorder: Recorder,
        runner: SubagentRunner,
        warnings: list[str],
        instructions: str | None,
    ) -> RunResult:
        """Run the lead (or a workflow) to its end, or until it is stopped: cancelled (by our
        caller, or from another process), taken over by another process, or interrupted (see
        `interrupt`)."""
        run_id = ctx.run_id
        agent = asyncio.create_task(work)
        stopped: list[str] = []

        def stop(why: str) -> None:
            if not stopped:
                stopped.append(why)
                runner.interrupting = why == "interrupt"
                agent.cancel()

        recorder.on_stop = stop
        recorder.on_stop_agent = runner.background.stop_from_outside
        self._stops[run_id] = stop
        beat = asyncio.create_task(beat_for(runner, recorder, ctx, self.loop.heartbeat_interval))
        try:
            result = await agent
        except asyncio.CancelledError:
            if not agent.done():  # our caller cancelled us (Ctrl-C, a signal)
                agent.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await agent
            await runner.background.cancel_all()
            cancelled = run_result(run_id, cancelled_result(ctx), runner, warnings)
            if stopped == ["interrupt"]:
                return await release_interrupted(
                    recorder, replace(cancelled, status="interrupted", stop_reason="interrupted")
                )
            keep_conversation(recorder, cancelled.messages or messages, instructions or "")
            await record_end(recorder, cancelled)
            if not stopped:
                raise
            return cancelled  # cancelled from another process, or the run was taken over
        except Exception as exc:  # a bug or the store failing: the run still ends, truthfully
            error = f"{type(exc).__name__}: {ctx.workspace.shown(str(exc))}"
            await recorder.finish("error", "", ctx.usage + runner.usage, error)
            raise
        else:  # `interrupt` meanwhile finds the run, so it is left to record how it ended
            schema = self.lead.output_schema
            outcome = run_result(run_id, result, runner, warnings, schema if isinstance(schema, type) else None)
            keep_conversation(recorder, outcome.messages, instructions or "")
            await record_end(recorder, outcome)
            return outcome
        finally:
            beat.cancel()
            self._stops.pop(run_id, None)
            self._approvals.pop(run_id, None)

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

        `token_budget` and `max_requests` (default: the runtime's limits) cap what it spends. Raises
        `UserError` for an unknown type, bad criteria or a bad limit; anything that happens to the
        subagent itself is in the returned `TaskOutput`.
        """
        given = {"token_budget": token_budget, "max_requests": max_requests}
        limits = self.limits.over({name: value for name, value in given.items() if value is not None})
        visible = self.catalogue.visible(allow_commands=self.workspace.allow_commands)
        definition = visible.get(subagent_type)
        if definition is None:
            raise UserError(f"unknown subagent type {subagent_type!r}; available: {', '.join(visible.names())}")
        fan_out = [*self.sinks, *sinks, *_tracing.sinks()]
        skills = await asyncio.to_thread(self._skills)
        task_id = run_id or f"task_{uuid.uuid4().hex[:12]}"
        mcp_tools = await self._load_mcp()
        emit: EventSink = functools.partial(_fan, fan_out)
        own = await self._load_own_mcp()
        for data in self._mcp_failed():
            emit(Event(type="mcp.server_failed", run_id=task_id, agent_id="batch", data=data))
        context, _ = await asyncio.to_thread(self._prepare_workspace)
        model = await self._model_off_loop(self._model_spec)
        guard = CallGuard(self._policy, never_wait=NEVER_WAIT, hooks=self.hooks) if self._may_guard else None
        scope = self._scope(task_id, emit, user_id, skills, limits, mcp_tools, context, guard)
        ctx = self._context(scope, "batch")
        runner = self._runner(scope, ctx, model, self._lead_tools, mcp_tools, own)
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

    def _prepare_workspace(self) -> tuple[str, list[tuple[Layer, list[Change]]]]:
        """What a lead's run and a batch item do first in the workspace: clear what killed writes
        left in its scratch folder (a killed `delegate run`, server or worker), make its outputs folder,
        finish the merges that a kill interrupted and sweep old layers (`workspace/_merge.py`), and
        read its project context. Returns the context, and the merges finished now."""
        sweep_scratch(self.workspace)
        self.workspace.make_outputs()
        recovered = recover_merges(self.workspace)
        sweep_layers(self.workspace, self.limits.layers_kept)
        return project_context(self.workspace), recovered

    def _skills(self) -> SkillCatalogue:
        """The skills of a run (see `run_skills`)."""
        return run_skills(self.extensions, self.workspace.root, self._shared, self.store, self.user_id)

    def _scope(
        self,
        run_id: str,
        emit: EventSink,
        user_id: str | None,
        skills: SkillCatalogue,
        limits: RunLimits,
        mcp_tools: list[Tool],
        context: str,
        guard: CallGuard | None = None,
        memory: RunMemory | None = None,
    ) -> RunScope:
        """What every agent of one run (or batch item) shares."""
        ext = self.extensions
        return RunScope(
            run_id=run_id,
            user_id=user_id or self.user_id or "default",
            timezone=self.timezone,
            workspace=self.workspace.with_mounts(skills.mounts()),
            emit=emit,
            limits=limits,
            loop=self.loop,
            budget=RunBudget.of(limits),
            skills=skills,
            deferred={t.name: t for t in mcp_tools} if ext.tool_search else {},
            auto_promote=ext.auto_promote,
            project_context=context,
            guard=guard,
            memory=memory,
        )

    def _context(self, scope: RunScope, agent_id: str) -> ToolContext:
        """The lead's (or a batch item's) context, over the run's workspace."""
        return ToolContext(
            run_id=scope.run_id,
            agent_id=agent_id,
            workspace=scope.workspace,
            emit=scope.emit,
            user_id=scope.user_id,
            timezone=scope.timezone,
        )

    def _runner(
        self,
        scope: RunScope,
        parent: ToolContext,
        model: Model,
        parent_tools: list[str],
        mcp_tools: list[Tool],
        own_tools: Sequence[Tool] = (),
    ) -> SubagentRunner:
        spec = self.lead.subagent_model
        pool = dict(self.tools)
        if parent.uploaded_files is not None:
            pool[list_uploaded_files.name] = list_uploaded_files
        return SubagentRunner(
            scope,
            tools=pool | (scope.memory.tools() if scope.memory else {}) | {t.name: t for t in [*mcp_tools, *own_tools]},
            parent_tools=parent_tools,
            parent_model=model,
            subagent_model=self.model_for(spec) if spec else None,
            model_for=self.model_for,
            uploaded_files=parent.uploaded_files,
        )

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

    def _delegable(self) -> Catalogue:
        """The types the lead may start: those its definition permits that this workspace can run."""
        return self.catalogue.visible(allow_commands=self.workspace.allow_commands, permitted=self.lead.subagents)

    def _mcp_failed(self) -> list[dict[str, Any]]:
        return mcp_failed(self.mcp, self._own_mcp)

    def _task_tool(self, runner: SubagentRunner) -> Tool:
        allow = self.workspace.allow_commands
        visible = self._delegable()
        hidden = [] if allow else [d.name for d in self.catalogue.definitions.values() if d.requires_commands]
        return task_tool(runner, visible, max_parallel=runner.scope.limits.max_parallel, command_types=hidden)

    @property
    def batches(self) -> Batches | None:
        """The batches the lead's `batch_task` submits to (None until a run offers the tool)."""
        return self._batches

    def _batch_tools(self, lead_model: Model, prompt: str) -> list[Tool]:
        """The lead's batch tools. A weak model (one that grounds its calls) is offered them only
        when the task asks for a batch or one exists: otherwise it calls them for nothing."""
        offered = self._offers("batch_task")
        wanted = offered if offered is not None else self._store_option is not False
        store = self.store if wanted else None
        if store is None:
            return []
        from ..batch import Batches, batch_tools

        if self._batches is None:
            self._batches = Batches(store)
        existing = [b.id for b in self._batches.list_batches(self.user_id or "default", limit=20)]
        if lead_model.profile.grounds_paths and not existing and not _ASKS_FOR_BATCH.search(prompt):
            return []
        visible = self._delegable()
        spec = self.lead.subagent_model
        model = spec if isinstance(spec, str) else (spec.name if spec is not None else lead_model.name)
        return batch_tools(self._batches, known_types=visible.names(), model=model, known_batches=existing)

    def warnings(self) -> list[CatalogueWarning]:
        """What is wrong with the definition and skill files this runtime reads: what
        `delegate agents list` prints and each run's `warning` events carry."""
        return [*self.catalogue.warnings, *self._skills().warnings]


_ASKS_FOR_BATCH = re.compile(r"\bbatch", re.IGNORECASE)


def _fan(sinks: list[EventSink], event: Event) -> None:
    for sink in sinks:
        sink(event)
