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
import difflib
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast

from .._agents import Catalogue, Subagent, tools_for
from .._errors import ToolError
from .._events import Event, unheard
from .._frontmatter import CatalogueWarning
from .._messages import Message
from .._usage import Usage
from ..loop import AgentResult, Journal, opening_choices, passed_deadline, run_agent
from ..mcp import TOOL_SEARCH
from ..models import FREE_CHOICES, IdChoice, Model, credentials_hint, has_credentials
from ..tools import Tool, ToolContext, ToolReturn
from ._acceptance import CRITERIA_SYSTEM_NOTE, check_criteria, frame_criteria, parse_criteria, snapshot_before
from ._assemble import RunScope, assemble, toolset
from ._complete import Delivery, validate_paths
from ._output import MAX_RESULT_CHARS, RESULTS_DIR, TaskOutput, kept, read, render_whole
from ._overlay import check_asked, isolation_for, layer_for, settle
from ._prompts import task_description, type_listing
from ._snapshot import SNAPSHOT_SYSTEM_NOTE, build_snapshot

ContextMode = Literal["isolated", "snapshot"]
CONTEXT_MODES: tuple[ContextMode, ...] = ("isolated", "snapshot")
MAX_PROMPTS = 100
MAX_KEPT_CHARS = 4_000
"""A `task` call's results longer than this keep only status lines and artifact lists in compaction."""
_ARGUMENTS = frozenset(
    {"subagent_type", "description", "prompt", "prompts", "context_mode", "acceptance_criteria", "isolation"}
)


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
        on_finish: Callable[[str | None, TaskOutput], None] | None = None,
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
        """Told of each subagent that ends (with its key, when it has one), as it ends."""
        self.journal_for: Callable[[str], Journal] | None = None
        """The journal of the subagent kept as a key (None: subagents keep none; see `StoredJournal.scoped`)."""
        self.records: list[TaskOutput] = []
        """The records of the subagents that ended, in the order they were called (`seq`)."""
        self.live: dict[str, tuple[TaskOutput, ToolContext]] = {}
        self.interrupting = False
        """Set when the run is stopped to be resumed later (`Runtime.interrupt`): a subagent
        cancelled then ends `interrupted`, and is not recorded, as if its process had died."""
        self.started = 0
        parallel = run.limits.max_parallel
        self._semaphore = asyncio.Semaphore(parallel) if parallel else None
        self._ids = itertools.count(1)
        self._prepared: dict[str, tuple[list[Tool], Model]] = {}

    @property
    def usage(self) -> Usage:
        """Usage of every subagent so far, the live ones included."""
        total = Usage()
        for record in self.records:
            total.add(record.usage)
        for _, ctx in self.live.values():
            total.add(ctx.usage)
        return total

    def reserve(self, count: int) -> int:
        """Count `count` subagents against the run's total, or refuse them all; return the `seq`
        of the first (the lead's calls reserve in the order it made them)."""
        if self.max_total is not None and self.started + count > self.max_total:
            left = max(0, self.max_total - self.started)
            raise ToolError(
                f"this run may start at most {self.max_total} subagents and has started {self.started}; "
                f"{left} more can start. Do the rest of the work yourself or with fewer subagents."
            )
        self.started += count
        return self.started - count

    def prepare(self, definition: Subagent) -> tuple[list[Tool], Model]:
        """The tools and model of `definition`'s subagents; a `ToolError` if it cannot run."""
        prepared = self._prepared.get(definition.name)
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
            self._prepared[definition.name] = prepared
        return prepared

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

    async def run(
        self,
        definition: Subagent,
        prompt: str,
        *,
        description: str,
        parent: ToolContext,
        tool_call_id: str | None,
        criteria: list[str] | None = None,
        snapshot: Message | None = None,
        seq: int = 0,
        key: str | None = None,
        isolation: str | None = None,
    ) -> TaskOutput:
        """Run one subagent to its end. Only cancellation of the caller escapes; anything else
        that happens to the subagent becomes its `TaskOutput`. `seq` is its place in call order.

        `key` names the subagent within its run (the lead's tool call id and the prompt's index):
        one that finished before the run was interrupted is given back as it was, not run again.
        `isolation` is what the lead asked for (`overlay`: a private layer; see `_overlay.py`).
        """
        reused = self.finished.pop(key, None) if key is not None else None
        if reused is not None:
            next(self._ids)  # keep the numbering of the subagents started after it
            if self.budget is not None:  # what it spent before the interruption counts against the run's budget
                self.budget.spend(reused.usage, reused.type)
                self.budget.requests += reused.usage.requests
            self._keep(reused)
            return reused
        args = (definition, prompt, description, parent, tool_call_id, criteria, snapshot, seq, key, isolation)
        if self._semaphore is None:
            return await self._run(*args)
        async with self._semaphore:
            return await self._run(*args)

    async def _run(
        self,
        definition: Subagent,
        prompt: str,
        description: str,
        parent: ToolContext,
        tool_call_id: str | None,
        criteria: list[str] | None,
        snapshot: Message | None,
        seq: int,
        key: str | None,
        isolation: str | None = None,
    ) -> TaskOutput:
        tools, model = self.prepare(definition)
        agent_id = f"sub{next(self._ids)}"
        record = TaskOutput(
            id=agent_id,
            type=definition.name,
            description=description,
            tool_call_id=tool_call_id,
            parent_agent_id=parent.agent_id,
            status="running",
            stop_reason=None,
            summary="",
            started_at=datetime.now(UTC),
            model=model.name,
            seq=seq,
        )
        record.isolation = isolation_for(definition, tools, isolation)
        layer = layer_for(record.isolation, self.workspace, self.run_id, agent_id, tools)
        workspace = self.workspace if layer is None else replace(self.workspace, layer=layer)
        if definition.command_rules:  # its Bash(...) rules, for its commands only
            workspace = replace(workspace, commands=replace(workspace.commands, rules=definition.command_rules))
        ctx = ToolContext(
            run_id=self.run_id,
            agent_id=agent_id,
            workspace=workspace,
            emit=self.emit,
            parent_agent_id=parent.agent_id,
            parent_tool_call_id=tool_call_id,
            user_id=self.scope.user_id,
            timezone=self.scope.timezone,
            uploaded_files=None if self.uploaded_files is None else copy.deepcopy(self.uploaded_files),
        )
        record.usage = ctx.usage
        self._event(record, "subagent.started", {"type": definition.name, "description": description})
        self.live[agent_id] = (record, ctx)
        try:
            baseline = snapshot_before(criteria, self.workspace) if criteria else None
            notes = [SNAPSHOT_SYSTEM_NOTE if snapshot is not None else "", CRITERIA_SYSTEM_NOTE if criteria else ""]
            journal = self.journal_for(key) if self.journal_for is not None and key is not None else None
            spec = await assemble(
                definition, self.scope, model=model, tools=tools, prompt=prompt, notes=notes, journal=journal
            )
            kickoff = prompt if not criteria else f"{prompt}\n\n{frame_criteria(criteria)}"
            slash = self.skills.slash_command(prompt, definition.skills)
            messages = [m for m in (snapshot, slash) if m is not None] + [Message.user(kickoff)]
            result = await run_agent(spec, ctx, messages)
            _fill(record, result)
            if layer is not None:
                self._settle(record, await asyncio.to_thread(settle, record, layer, self.workspace))
            if criteria and baseline is not None:
                verdicts = await check_criteria(criteria, self.workspace, baseline)
                record.acceptance = [asdict(v) for v in verdicts]
            whole = render_whole(record)
            if len(whole) > MAX_RESULT_CHARS:  # too long for the lead: written whole for it to read
                await asyncio.to_thread(self._write_whole, record, whole)
        except asyncio.CancelledError:
            deadline = None if self.interrupting else passed_deadline()
            if deadline is not None:  # the run's deadline, not a person, ended it
                record.status, record.stop_reason, record.steps = "timed_out", "run_timeout", ctx.steps
                record.error = f"the run's deadline ({deadline:g}s) passed while it ran"
            else:
                why = "interrupted" if self.interrupting else "cancelled"
                record.status, record.stop_reason, record.steps = why, why, ctx.steps
            if layer is not None and not record.layer:
                self._settle(record, settle(record, layer, self.workspace))
            self._finish(record, ctx, None, stored=not self.interrupting)  # not kept for a resume: it starts afresh
            raise
        except Exception as exc:  # a crash of this subagent is its own result, never its siblings'
            record.status, record.stop_reason, record.steps = "error", "crash", ctx.steps
            record.error = f"{type(exc).__name__}: {exc}"
            if layer is not None and not record.layer:
                self._settle(record, settle(record, layer, self.workspace))
        self._finish(record, ctx, key)
        return record

    def _settle(self, record: TaskOutput, event: tuple[str, dict[str, Any]] | None) -> None:
        """Emit what settling a subagent's layer said (`workspace.merged` / `workspace.conflict`)."""
        if event is not None:
            self._event(record, event[0], event[1])

    def _write_whole(self, record: TaskOutput, text: str) -> None:
        """Write a result too long for the lead to `RESULTS_DIR/<run>/<agent>.md`, and list that
        file first among its artifacts (if it cannot be written, the lead reads it shortened)."""
        folder = f"{RESULTS_DIR}/{re.sub(r'[^A-Za-z0-9_.-]', '_', self.run_id)}"
        name = ""
        try:
            (self.workspace.root / folder).mkdir(parents=True, exist_ok=True)
            for n in itertools.count(1):
                name = f"{folder}/{record.id}{'' if n == 1 else f'-{n}'}.md"
                try:
                    with open(self.workspace.root / name, "x", encoding="utf-8") as out:
                        out.write(text + "\n")
                    break
                except FileExistsError:
                    continue
        except OSError:
            return
        artifacts, _ = validate_paths(self.workspace, [name])
        record.artifacts = artifacts + record.artifacts
        record.result_file = name

    def _finish(self, record: TaskOutput, ctx: ToolContext, key: str | None, *, stored: bool = True) -> None:
        record.completed_at = datetime.now(UTC)
        self.live.pop(record.id, None)
        self._keep(record)
        if self.on_finish is not None and stored:
            self.on_finish(key, record)
        if self.emit is unheard:
            return
        self._event(
            record,
            "subagent.completed",
            {
                "type": record.type,
                "status": record.status,
                "stop_reason": record.stop_reason,
                "steps": record.steps,
                "usage": ctx.usage.to_dict(),
                "artifacts": [a.relative_path for a in record.artifacts],
                "error": record.error,
            },
        )

    def _keep(self, record: TaskOutput) -> None:
        """Keep `record` in `records`, in call order (most end in it: appended)."""
        if not self.records or self.records[-1].seq <= record.seq:
            self.records.append(record)
        else:
            bisect.insort(self.records, record, key=_seq)

    def _event(self, record: TaskOutput, type: Any, data: dict[str, Any]) -> None:
        if self.emit is unheard:
            return
        self.emit(
            Event(
                type=type,
                run_id=self.run_id,
                agent_id=record.id,
                parent_agent_id=record.parent_agent_id,
                tool_call_id=record.tool_call_id,
                data=data,
            )
        )

    def heartbeat(self) -> None:
        """One `subagent.heartbeat` per live subagent, with its steps and tokens so far."""
        for record, ctx in list(self.live.values()):
            self._event(
                record,
                "subagent.heartbeat",
                {"usage": ctx.usage.to_dict(), "elapsed": _elapsed(record)},
            )


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
    listing, short = type_listing(types)
    # The prompts come before the label: models that write arguments in schema order (small ones
    # under a grammar do) put their care into the first free text they write. A large catalogue is
    # listed once, in the tool's description, without the enum (names are checked in code).
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "subagent_type": {
                "type": "string",
                **({"enum": [name for name, _ in types]} if types and not short else {}),
                "description": (
                    "The type of subagent to start: one of the types listed in this tool's description."
                    if short
                    else f"The type of subagent to start. Available types:\n{listing}"
                ),
            },
            "prompt": {
                "type": "string",
                "description": (
                    "Self-contained delegation: the goal, all the context it needs (it has no conversation "
                    "history), the files to write, and scope boundaries."
                ),
            },
            "prompts": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": MAX_PROMPTS,
                "description": (
                    "One subagent per prompt, run in parallel, results in order. With `prompts`, `prompt` "
                    "(optional) is context shared by all of them, put before each."
                ),
            },
            "description": {
                "type": "string",
                "maxLength": 80,
                "description": "Short label (3-7 words) for the progress view and logs. Not the task itself.",
            },
            "context_mode": {
                "type": "string",
                "enum": list(CONTEXT_MODES),
                "default": "isolated",
                "description": (
                    "isolated (default): the subagent sees only its prompt. snapshot: it also gets a read-only "
                    "copy of this conversation, for requirements or failed attempts scattered across it."
                ),
            },
            "isolation": {
                "type": "string",
                "enum": ["overlay", "shared"],
                "description": (
                    "overlay: the subagent writes into a private layer over the workspace, merged all or nothing "
                    "when it completes (a conflict if the workspace changed the same files meanwhile); use it for "
                    "parallel subagents that may edit the same files. shared (default): it writes the workspace."
                ),
            },
            "acceptance_criteria": {
                "type": "array",
                "items": {"type": "string", "maxLength": 500},
                "maxItems": 20,
                "description": (
                    "Completion conditions, checked in code when the subagent ends where they take one of "
                    "the forms 'file:<path> exists', 'file:<path> non-empty', 'file_written:<path>', "
                    "'tests_passed:<command>'; any other wording is passed on as UNVERIFIED."
                ),
            },
        },
        "required": ["subagent_type", "description"],
        "additionalProperties": False,
    }

    async def run_task(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        definition, prompts, description, mode, criteria = _validate(args, catalogue, command_types)
        asked = check_asked(args.get("isolation"))
        runner.prepare(definition)
        first = runner.reserve(len(prompts))
        snapshot = None
        if mode == "snapshot":
            snapshot = build_snapshot(ctx.conversation, pending_tool_call_id=ctx.tool_call_id)
        runs = [
            runner.run(
                definition,
                prompt,
                description=description if len(prompts) == 1 else f"{description} [{i + 1}/{len(prompts)}]",
                parent=ctx,
                tool_call_id=ctx.tool_call_id,
                criteria=criteria,
                snapshot=snapshot,
                seq=first + i,
                key=f"{ctx.tool_call_id}#{i}",
                isolation=asked,
            )
            for i, prompt in enumerate(prompts)
        ]
        outputs = [await runs[0]] if len(runs) == 1 else list(await asyncio.gather(*runs))
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
    )


def _validate(
    args: dict[str, Any], catalogue: Catalogue, command_types: Sequence[str]
) -> tuple[Subagent, list[str], str, ContextMode, list[str] | None]:
    """Check a `task` call before anything starts; raise `ToolError` saying what is wrong."""
    unknown = sorted(set(args) - _ARGUMENTS)
    if unknown:
        raise ToolError(f"unknown argument(s) {', '.join(unknown)}; see the task tool's schema")
    mode = args.get("context_mode", "isolated")
    if mode not in CONTEXT_MODES:
        raise ToolError(f"context_mode must be 'isolated' or 'snapshot', not {mode!r}")
    name = args.get("subagent_type")
    if name is None:
        available = ", ".join(catalogue.names()) or "none permitted by caller policy"
        raise ToolError(f"subagent_type is missing: name the type of subagent to start ({available})")
    definition = catalogue.get(name) if isinstance(name, str) else None
    if definition is None:
        if name in command_types:
            raise ToolError(
                f"subagent_type {name!r} runs commands, and this workspace does not allow command "
                "execution (the runtime must allow commands, e.g. --allow-commands)"
            )
        names = catalogue.names()
        if len(names) > 30:
            close = difflib.get_close_matches(str(name), names, n=5, cutoff=0.5)
            hint = f"close names: {', '.join(close)}; " if close else ""
            raise ToolError(
                f"unknown subagent_type {name!r}; {hint}the task tool's description lists all {len(names)} types "
                "(tool_search with a few words finds them by what they do)"
            )
        available = ", ".join(names) or "none permitted by caller policy"
        raise ToolError(f"unknown subagent_type {name!r}; available: {available}")
    description = args.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ToolError("description is required: a short label of 3-7 words")
    if len(description) > 80:
        raise ToolError(f"description is {len(description)} characters; keep it to at most 80")
    prompts = _prompts(args)
    criteria = parse_criteria(args["acceptance_criteria"]) if args.get("acceptance_criteria") else None
    return definition, prompts, description.strip(), mode, criteria


def _prompts(args: dict[str, Any]) -> list[str]:
    prompt, prompts = args.get("prompt"), args.get("prompts")
    if prompt is not None and not isinstance(prompt, str):
        raise ToolError("prompt must be a string")
    if prompts is None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError("prompt is required (or prompts, a list of prompts to run in parallel)")
        return [prompt]
    if not isinstance(prompts, list) or not prompts:
        raise ToolError("prompts must be a non-empty list of strings")
    items = cast(list[object], prompts)
    if len(items) > MAX_PROMPTS:
        raise ToolError(f"prompts has {len(items)} entries; at most {MAX_PROMPTS} per call")
    texts: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ToolError(f"prompts[{i}] must be a non-empty string")
        texts.append(f"{prompt.strip()}\n\n{item}" if prompt and prompt.strip() else item)
    return texts


def _seq(record: TaskOutput) -> int:
    return record.seq
