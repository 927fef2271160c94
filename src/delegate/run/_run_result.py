"""What a run gives back (`RunResult`), read back from the store, and how a run's end is
recorded: finished (`record_end`) or let go to be resumed (`release_interrupted`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .._empty import empty_dict, empty_list
from .._errors import RunCancelled, RunError
from .._events import Event
from .._messages import Message
from .._record import Status, StopReason
from .._usage import Usage
from ..loop import EVENT_VALUE_LIMIT, AgentResult
from ..memory import RunMemory, todos_json
from ..subagents import Delivery, TaskOutput
from ..workflows import WORKFLOW

if TYPE_CHECKING:
    from .._store import RunRow, Store
    from ..subagents import Roster
    from ..tools import ToolContext
    from ._recorder import Recorder

__all__ = [
    "RunResult",
    "cancelled_result",
    "record_end",
    "release_interrupted",
    "run_result",
    "stored_result",
    "stored_run",
]


@dataclass(kw_only=True)
class RunResult:
    """What a run gives back: the final answer, total usage, and one record per subagent."""

    run_id: str
    status: Status
    """How the lead ended (an `EndStatus`), or `interrupted` when `Runtime.interrupt` stopped it."""
    final: str
    usage: Usage
    lead_usage: Usage
    subagents: list[TaskOutput]
    steps: int
    stop_reason: StopReason
    error: str | None = None
    messages: list[Message] = field(default_factory=empty_list)
    warnings: list[str] = field(default_factory=empty_list)
    """What was wrong as the run started, one line each: an MCP server that did not start (the run
    went on without its tools), a definition or skill file that was skipped."""
    pending_approvals: list[dict[str, Any]] = field(default_factory=empty_list)
    """The calls of a `waiting` run that wait for a person's decision (`ApprovalRow.pending`)."""
    result: Any = None
    """The lead's typed result, validated, when its definition has an `output_schema`: an instance
    of that pydantic model, or JSON data that fits that JSON Schema (None without one)."""
    thread_id: str | None = None
    """The thread the run belongs to: the id of its first run (None: this run's own id)."""
    previous_run_id: str | None = None
    """The run this one continues (`Runtime.run(continue_from=...)`); None: it starts its thread."""
    workflow: dict[str, Any] | None = None
    """A run that is a workflow: its record (`status` of the script, `value`, the count `line`,
    `counts`, `phases`, `agents`; see docs/workflows.md). None: the run is the lead's, or the
    workflow has not ended. `status` "completed" says the script ran to its end, never that the
    agents' criteria hold: `counts` says that."""
    todos: dict[str, list[dict[str, str]]] = field(default_factory=empty_dict)
    """Each agent's todo list as it left it (`todo_write`), by agent id: the lead's is `lead`."""
    eval: dict[str, Any] | None = None
    """The evaluation attempt the run is (`eval_id`, `arm`, `task`, `attempt`: docs/eval.md); None:
    an ordinary run."""

    def raise_for_status(self) -> RunResult:
        """This result if the run completed; else raise `RunCancelled` (it was cancelled) or
        `RunError` (any other end), carrying its `run_id` and `status` (httpx's pattern):
        `final = (await rt.run(prompt)).raise_for_status().final`."""
        if self.status == "completed":
            return self
        why = self.error or self.stop_reason
        message = f"run {self.run_id} ended {self.status}: {why}"
        if self.status == "cancelled":
            raise RunCancelled(message, run_id=self.run_id, status=self.status)
        raise RunError(message, run_id=self.run_id, status=self.status)

    def result_data(self) -> Any:
        """The typed `result` as JSON data (what the store keeps), None without one."""
        return self.result.model_dump(mode="json") if isinstance(self.result, BaseModel) else self.result

    def to_dict(self) -> dict[str, Any]:
        """The object `delegate run --json` and `delegate runs show --json` print: the run's JSON,
        which `stored_run` (HTTP, export) and a listing's line (`RunSummary.to_dict`) extend or
        cut, keeping these keys and their order (`result` last, only when the lead has a typed one)."""
        typed = self.result_data()
        return (
            {
                "run_id": self.run_id,
                "status": self.status,
                "final": self.final,
                "stop_reason": self.stop_reason,
                "error": self.error,
                "steps": self.steps,
                "usage": self.usage.to_dict(),
                "subagents": [s.to_dict() for s in self.subagents],
                "warnings": list(self.warnings),
                "pending_approvals": list(self.pending_approvals),
                "thread_id": self.thread_id or self.run_id,
                "previous_run_id": self.previous_run_id,
            }
            | ({"workflow": self.workflow} if self.workflow is not None else {})
            | ({"todos": self.todos} if self.todos else {})
            | ({"eval": self.eval} if self.eval is not None else {})
            | ({"result": typed} if typed is not None else {})
        )


def stored_result(store: Store, run_id: str, user_id: str | None = None) -> RunResult | None:
    """A run as the store has it, as a `RunResult` (`to_dict()` is what `delegate run --json`
    printed, or would print: an interrupted run reads `interrupted`, with what finished so far)."""
    run = store.get_run(run_id, user_id)
    return None if run is None else _stored_result(store, run)


def _stored_result(store: Store, run: RunRow) -> RunResult:
    from ..memory import TodoStore  # the database's side of memory: loaded with the store

    return RunResult(
        run_id=run.id,
        status=run.status,
        final=run.final or "",
        usage=run.usage,
        lead_usage=Usage(),
        subagents=store.subagent_records(run.id),  # while it runs: those finished so far
        steps=run.steps,
        stop_reason=run.stop_reason or "interrupted",  # type: ignore[arg-type]  # a run that has not ended
        error=run.error,
        warnings=run.warnings,
        pending_approvals=[a.pending() for a in store.approvals(run.id, pending=True)] if run.waiting else [],
        result=run.result,
        thread_id=run.thread_id,
        previous_run_id=run.previous_run_id,
        workflow=_workflow_record(store, run),
        eval=run.eval,
        todos=todos_json(TodoStore(store).of_run(run.id)),
    )


def _workflow_record(store: Store, run: RunRow) -> dict[str, Any] | None:
    """The record of a run that is a workflow, once its script ended (see `RunResult.workflow`)."""
    if run.workflow is None:
        return None
    kept = [c.data for c in store.checkpoints(run.id) if c.kind == WORKFLOW and c.key == "run"]
    return kept[-1] if kept else None


def stored_run(store: Store, run_id: str, user_id: str | None = None) -> tuple[RunRow, dict[str, Any]] | None:
    """The stored run, and its JSON with what the store knows beside it (`prompt`, `model`,
    `created_at`, `completed_at`): `GET /runs/{id}` and `delegate runs export` add their own keys
    to it, from the row."""
    from .._store import stored_fields

    run = store.get_run(run_id, user_id)
    if run is None:
        return None
    shown = _stored_result(store, run).to_dict() | stored_fields(run)
    if run.workflow is not None:  # the page shows each line of the script with the agents it started
        shown["workflow_script"] = run.workflow.get("script")
    return run, shown


def cancelled_result(ctx: ToolContext) -> AgentResult:
    return AgentResult(
        status="cancelled",
        stop_reason="cancelled",
        final="",
        messages=ctx.conversation,
        steps=ctx.steps,
        usage=ctx.usage,
    )


def run_result(
    run_id: str,
    lead: AgentResult,
    roster: Roster,
    warnings: list[str],
    schema: type[BaseModel] | None = None,
    memory: RunMemory | None = None,
) -> RunResult:
    """What the run gives back; a lead that ended with a typed `complete` gives its result (as a
    `schema` instance when its `output_schema` is that pydantic model), and each agent's todo list
    as it left it (`memory`'s)."""
    delivered = lead.stop_return.data if lead.stop_return is not None else None
    result, final, status, reason, error = None, lead.final, lead.status, lead.stop_reason, lead.error
    if isinstance(delivered, Delivery):
        final = final or delivered.summary
        if delivered.invalid is not None:
            status, reason, error = "error", "invalid_result", delivered.invalid
        elif delivered.result is not None:
            result = schema.model_validate(delivered.result) if schema is not None else delivered.result
    return RunResult(
        run_id=run_id,
        status=status,
        final=final,
        usage=lead.usage + roster.usage,
        lead_usage=lead.usage,
        subagents=list(roster.records),
        steps=lead.steps,
        stop_reason=reason,
        error=error,
        messages=lead.messages,
        warnings=warnings,
        result=result,
        todos=todos_json(memory.todos) if memory is not None else {},
    )


async def record_end(recorder: Recorder, result: RunResult) -> None:
    """Emit `run.completed` and record how the run ended."""
    final = result.final
    data: dict[str, Any] = {
        "status": result.status,
        "final": final[:EVENT_VALUE_LIMIT],
        "usage": result.usage.to_dict(),
        "subagents": len(result.subagents),
    }
    if len(final) > EVENT_VALUE_LIMIT:  # the whole answer is stored once, in the run's row
        data["final_size"] = len(final)
    recorder.emit(Event(type="run.completed", run_id=result.run_id, agent_id="lead", data=data))
    await recorder.finish(
        result.status,
        final,
        result.usage,
        result.error,
        stop_reason=result.stop_reason,
        steps=result.steps,
        result=result.result_data(),
    )


async def release_interrupted(recorder: Recorder, result: RunResult) -> RunResult:
    """Store what the run did so far and let its lease go, leaving it `interrupted`; its followers
    get the terminal event of an interrupted run (not stored: the run goes on when resumed)."""
    from ._follow import interrupted_event

    await recorder.release(result.usage)
    event = interrupted_event(result.run_id)
    for sink in recorder.sinks:
        sink(event)
    return result
