"""The host side of a workflow: what answers the script's `agent()`, `parallel()`, `pipeline()`,
`phase()`, `log()`, `read()`, `glob()` and `budget`.

Each agent is the same subagent as the lead's `task` starts (`SubagentRunner.run`): its
definition, tools, gates, approvals, record, events, usage and cost; kept in the journal
(`_journal.py`) under a key that says where the script called it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from time import time
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .._errors import ToolError, UserError, WorkspaceError
from .._events import Event, EventSink
from .._record import TaskOutput
from ..agents import Catalogue, Subagent
from ..loop import RunBudget
from ..subagents import SubagentCall, SubagentRunner, parse_criteria
from ..tools import ToolContext
from ..workspace import find_files, looks_binary
from ._journal import Journal, Position
from ._outcome import AgentEntry, Outcome, agent_result
from ._sandbox import ScriptFault

__all__ = ["AGENT_OPTIONS", "WorkflowHost"]

AGENT_OPTIONS = frozenset(
    {"type", "model", "schema", "acceptance", "isolation", "label", "phase", "timeout", "token_budget", "cost_budget"}
)
"""The keywords `agent()` and `call()` take besides the prompt."""

_LIMITS = ("timeout", "token_budget", "cost_budget")
_OWN = ("model", "schema", *_LIMITS)
"""What `agent()` may set of its definition: its model, result schema and limits."""

READ_MAX_BYTES = 1024 * 1024
"""The most `read()` gives back of one file."""

DEFAULT_TYPE = "general-purpose"


@dataclass(frozen=True, slots=True)
class _Asked:
    """One agent call, checked: its definition (derived for the call's own options) and the rest."""

    definition: Subagent
    prompt: str
    arguments: dict[str, Any]
    label: str
    phase: str | None
    criteria: list[str] | None
    isolation: str | None


@dataclass(slots=True)
class _Pipeline:
    site: int
    running: set[asyncio.Task[list[Any]]] = field(default_factory=set[asyncio.Task[list[Any]]])


class WorkflowHost:
    """Answers one workflow's calls over the run's `runner`, as children of `parent` (the lead, or
    the run itself). `prefix` starts its journal keys (the lead's tool call id, for a workflow
    the lead started; empty for a run that is a workflow). How many agents it may start is the
    run's to say (`Roster.admit`: `max_subagents` and `workflow_agents`, across all its workflows)."""

    def __init__(
        self,
        runner: SubagentRunner,
        parent: ToolContext,
        catalogue: Catalogue,
        *,
        prefix: str,
        emit: EventSink,
        tool_call_id: str | None = None,
    ) -> None:
        self.runner = runner
        self.parent = parent
        self.catalogue = catalogue
        self.emit = emit
        self.tool_call_id = tool_call_id
        self.journal = Journal(prefix, runner.finished)
        self.outcome = Outcome()
        self.record: dict[str, Any] | None = None
        """The workflow's record once its script ended (see `drive`)."""
        self.refusal = ""
        """Why the last agent refused was refused (a cap, or the budget): what `agent()` raises."""
        self._sites = 0
        self._phase: str | None = None
        self._derived: dict[tuple[str, str], Subagent] = {}
        self._pipelines: dict[int, _Pipeline] = {}
        self._calls: dict[str, Callable[[tuple[Any, ...], dict[str, Any], int | None], Awaitable[Any]]] = {
            "agent": self._agent,
            "parallel": self._parallel,
            "phase": self._phase_call,
            "log": self._log_call,
            "read": self._read,
            "glob": self._glob,
            "_pipeline_open": self._pipeline_open,
            "_pipeline_step": self._pipeline_step,
            "_budget": self._budget,
        }

    # -- the sandbox's side ------------------------------------------------------------------

    async def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        return await self._calls[name](args, kwargs, line)

    def print(self, text: str) -> None:
        self.log(text)

    @property
    def budget(self) -> dict[str, Any]:
        """`budget` as the script reads it: tokens (`total`, `spent`, `remaining`), US dollars
        (`*_usd`), and the agents it may still start."""
        run = self.runner.budget
        total = run.token_budget if run is not None else None
        spent = run.tokens if run is not None else self.runner.usage.total_tokens
        cost_total = run.cost_budget if run is not None else None
        cost = run.cost if run is not None else (self.runner.usage.cost_usd or 0.0)
        return {
            "total": total,
            "spent": spent,
            "remaining": None if total is None else max(0, total - spent),
            "total_usd": cost_total,
            "spent_usd": cost,
            "remaining_usd": None if cost_total is None else max(0.0, cost_total - cost),
            "agents_left": self.runner.agents_left,
        }

    def log(self, text: str) -> None:
        self.outcome.logs += 1
        self._event("workflow.log", {"text": text[:2000], "phase": self._phase})

    async def close(self) -> None:
        """Cancel what the script's pipelines left running (a script that failed or was stopped)."""
        running = [t for p in self._pipelines.values() for t in p.running]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    # -- the functions ----------------------------------------------------------------------

    async def _agent(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        if len(args) != 1:
            raise ScriptFault("TypeError", "agent() takes the prompt, then keywords: agent(prompt, type=..., ...)")
        asked = self._asked({**kwargs, "prompt": args[0]})
        site = self._next_site()
        record = await self._start(asked, (site, 0, 0, 0), line)
        if record is None:
            raise ScriptFault("RuntimeError", self.refusal)
        result = agent_result(record)
        if record.status != "completed":
            why = record.error or record.stop_reason or record.status
            raise ScriptFault("RuntimeError", f"agent {record.id} ({asked.label}) ended {record.status}: {why}")
        return result

    async def _parallel(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        calls = _calls(args[0]) if len(args) == 1 and not kwargs else None
        if calls is None:
            raise ScriptFault("TypeError", "parallel() takes one list of calls: parallel([call(prompt, ...), ...])")
        asked = [self._asked(_options(c)) for c in calls]
        site = self._next_site()
        records = await asyncio.gather(*(self._start(a, (site, i, 0, 0), line) for i, a in enumerate(asked)))
        return [_answer(r) for r in records]

    async def _pipeline_open(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        del args, kwargs, line
        site = self._next_site()
        self._pipelines[site] = _Pipeline(site)
        return site

    async def _pipeline_step(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        """Start the calls of `batch` (`[item, stage, call or calls]`), then wait until at least
        one item's stage has ended; give back every one that has: `[item, stage, result]`."""
        del kwargs
        pipeline = self._pipelines.get(args[0]) if args and isinstance(args[0], int) else None
        try:
            batch = _BATCH.validate_python(args[1]) if pipeline is not None and len(args) == 2 else None
        except ValidationError:
            batch = None
        if pipeline is None or batch is None:
            raise ScriptFault("RuntimeError", "_pipeline_step is pipeline()'s own: call pipeline(items, *stages)")
        for item, stage, asking in batch:
            many = _calls(asking)
            asked = [self._asked(_options(c)) for c in (many if many is not None else [asking])]
            work = self._stage(pipeline.site, item, stage, asked, many is not None, line)
            pipeline.running.add(asyncio.ensure_future(work))
        if not pipeline.running:
            return []
        done, _ = await asyncio.wait(pipeline.running, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0)  # what ends in the same beat goes back in the same round trip
        done = {t for t in pipeline.running if t.done()} | done
        pipeline.running -= done
        return [t.result() for t in done]

    async def _stage(
        self, site: int, item: int, stage: int, asked: list[_Asked], many: bool, line: int | None
    ) -> list[Any]:
        records = await asyncio.gather(*(self._start(a, (site, item, stage, j), line) for j, a in enumerate(asked)))
        answers = [_answer(r) for r in records]
        return [item, stage, answers if many else answers[0]]

    async def _budget(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        del kwargs, line
        view = self.budget
        if len(args) != 1 or args[0] not in view:
            raise ScriptFault("AttributeError", f"budget has {', '.join(view)}")
        return view[args[0]]

    async def _phase_call(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        if len(args) != 1 or kwargs or not isinstance(args[0], str) or not args[0].strip():
            raise ScriptFault("TypeError", "phase() takes the phase's name: phase('review')")
        self._phase = args[0].strip()[:200]
        self.outcome.phase(self._phase)
        self._event("workflow.phase", {"name": self._phase, "line": line})
        return None

    async def _log_call(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        del kwargs, line
        self.log(" ".join(str(a) for a in args))
        return None

    async def _read(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        del line
        if len(args) != 1 or kwargs or not isinstance(args[0], str):
            raise ScriptFault("TypeError", "read() takes one workspace path: read('docs/a.md')")
        return await asyncio.to_thread(_read_text, self.parent, args[0])

    async def _glob(self, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Any:
        del line
        if len(args) != 1 or kwargs or not isinstance(args[0], str):
            raise ScriptFault("TypeError", "glob() takes one pattern: glob('docs/**/*.md')")
        return await asyncio.to_thread(_glob, self.parent, args[0])

    # -- agents -----------------------------------------------------------------------------

    def _next_site(self) -> int:
        self._sites += 1
        return self._sites

    def _asked(self, options: dict[str, Any]) -> _Asked:
        unknown = sorted(set(options) - AGENT_OPTIONS - {"prompt"})
        if unknown:
            raise ScriptFault(
                "TypeError", f"unknown option {', '.join(unknown)}; agent() takes {', '.join(sorted(AGENT_OPTIONS))}"
            )
        prompt = options.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ScriptFault("ValueError", "an agent's prompt must be text that says what to do")
        type_name = options.get("type") or DEFAULT_TYPE
        base = self.catalogue.get(type_name) if isinstance(type_name, str) else None
        if base is None:
            names = ", ".join(self.catalogue.names())
            raise ScriptFault("ValueError", f"unknown agent type {type_name!r}; available: {names}")
        label = options.get("label") or prompt.strip().splitlines()[0][:60]
        phase = options.get("phase") or self._phase
        try:
            criteria = parse_criteria(options.get("acceptance")) or None
        except ToolError as exc:
            raise ScriptFault("ValueError", str(exc)) from None
        isolation = options.get("isolation")
        if isolation not in (None, "overlay", "shared"):
            raise ScriptFault("ValueError", f"isolation is 'overlay' or 'shared', not {isolation!r}")
        if not isinstance(label, str) or (phase is not None and not isinstance(phase, str)):
            raise ScriptFault("TypeError", "label and phase are text")
        arguments = {k: v for k, v in options.items() if k not in ("label", "phase")}
        return _Asked(self._definition(base, options), prompt, arguments, label[:80], phase, criteria, isolation)

    def _definition(self, base: Subagent, options: dict[str, Any]) -> Subagent:
        """`base` with the call's own model, schema and limits (timeout, token and cost budgets:
        one definition per distinct set, so that the runner prepares each once)."""
        own = {k: options[k] for k in _OWN if options.get(k) is not None}
        if not own:
            return base
        for name in _LIMITS:
            value = own.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise ScriptFault("ValueError", f"{name} is a positive number, not {value!r}")
        key = (base.name, repr(sorted(own.items())))
        derived = self._derived.get(key)
        if derived is None:
            changes: dict[str, Any] = {"output_schema" if k == "schema" else k: v for k, v in own.items()}
            for name in ("timeout", "cost_budget"):
                if name in changes:
                    changes[name] = float(changes[name])
            if "token_budget" in changes:
                changes["token_budget"] = int(changes["token_budget"])
            for name in _LIMITS:  # a script tightens the type's own limits, never loosens them
                held = getattr(base, name)
                if name in changes and held is not None:
                    changes[name] = min(changes[name], held)
            try:
                derived = replace(base, **changes)
                self.runner.prepare(derived)
            except (UserError, ToolError, TypeError, ValueError) as exc:
                raise ScriptFault("ValueError", str(exc)) from None
            self._derived[key] = derived
        return derived

    def _admit(self, key: str) -> int | None:
        """The `seq` of the agent of `key`, counted against the run's caps; None, `refusal` said,
        when it may not start: the run's budget is spent, or a cap reached (`Roster.admit`)."""
        if _spent(self.runner.budget):
            self.refusal = "the run's budget is spent: no new agent starts"
            return None
        try:
            return self.runner.admit(key)
        except ToolError as exc:
            self.refusal = str(exc)
            return None

    async def _start(self, asked: _Asked, position: Position, line: int | None) -> TaskOutput | None:
        """Run one agent to its end (None: refused, it never started)."""
        key = self.journal.key(position, asked.arguments, line)
        seq = self._admit(key)
        if seq is None:
            self.outcome.not_started += 1
            return None
        replayed = key in self.runner.finished
        agent_id = self.runner.new_id(key)  # known as it starts: the live tree and a stop find it
        entry = AgentEntry(id=agent_id, label=asked.label, phase=asked.phase, line=line, replayed=replayed)
        self.outcome.add(entry)
        call = SubagentCall(
            definition=asked.definition,
            prompt=asked.prompt,
            description=asked.label,
            parent=self.parent,
            tool_call_id=self.tool_call_id,
            criteria=asked.criteria,
            seq=seq,
            key=key,
            agent_id=agent_id,
            isolation=asked.isolation,
            phase=asked.phase,
        )
        record = await self.runner.run(call)
        entry.record = record
        return record

    def _event(self, type: Any, data: dict[str, Any]) -> None:
        parent = self.parent
        self.emit(Event(type, parent.run_id, parent.agent_id, None, self.tool_call_id, data, time()))


def _answer(record: TaskOutput | None) -> dict[str, Any] | None:
    """What `parallel()` and `pipeline()` give for one agent: its result, None if it failed or
    never started."""
    if record is None or record.status != "completed":
        return None
    return agent_result(record)


_BATCH: TypeAdapter[list[tuple[int, int, Any]]] = TypeAdapter(list[tuple[int, int, Any]])
_CALLS: TypeAdapter[list[Any]] = TypeAdapter(list[Any])
_OPTIONS: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def _calls(value: Any) -> list[Any] | None:
    """`value` as a list of calls (None: it is not a list)."""
    return _CALLS.validate_python(value) if isinstance(value, list | tuple) else None


def _options(asked: Any) -> dict[str, Any]:
    """A call as `parallel()` takes it: `call(...)`, a dict with a `prompt`, or a prompt alone."""
    if isinstance(asked, str):
        return {"prompt": asked}
    try:
        options = _OPTIONS.validate_python(asked)
        return _OPTIONS.validate_python(options.get("__agent_call__", options))
    except ValidationError:
        raise ScriptFault("TypeError", "each call is call(prompt, ...), a dict with a 'prompt', or a prompt") from None


def _spent(budget: RunBudget | None) -> bool:
    if budget is None:
        return False
    if budget.token_budget is not None and budget.tokens >= budget.token_budget:
        return True
    if budget.max_requests is not None and budget.requests >= budget.max_requests:
        return True
    return budget.cost_budget is not None and (budget.unpriced is not None or budget.cost >= budget.cost_budget)


def _read_text(parent: ToolContext, path: str) -> str:
    try:
        with parent.workspace.locate(path) as at:
            if at.info is None:
                raise ScriptFault("FileNotFoundError", f"no file {path!r} in the workspace")
            if at.is_dir():
                raise ScriptFault("IsADirectoryError", f"{path!r} is a folder: glob() lists what is in it")
            fd = os.open(at.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at.folder)
        with os.fdopen(fd, "rb") as f:
            data = f.read(READ_MAX_BYTES + 1)
    except WorkspaceError as exc:
        raise ScriptFault("PermissionError", str(exc)) from None
    except OSError as exc:
        raise ScriptFault("OSError", f"{path}: {exc.strerror}") from None
    if looks_binary(data[:8192]):
        raise ScriptFault("ValueError", f"{path} is a binary file; read() gives text")
    text = data[:READ_MAX_BYTES].decode("utf-8", "replace")
    return text if len(data) <= READ_MAX_BYTES else text + f"\n[{path}: cut at {READ_MAX_BYTES} bytes]"


def _glob(parent: ToolContext, pattern: str) -> list[str]:
    try:
        found = find_files(parent.workspace, pattern, ".")
    except (WorkspaceError, ToolError) as exc:
        raise ScriptFault("ValueError", str(exc)) from None
    if found.startswith("no files match"):
        return []
    return [line for line in found.splitlines() if line and not line.startswith("[showed ")]
