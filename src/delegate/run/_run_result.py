"""What a run gives back (`RunResult`), live or read back from the store (`stored_result`,
`stored_run`): light to import, so `delegate runs show` loads no loop, tools or subagents. How a
live run's end is made and recorded is `_run_end.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .._empty import empty_dict, empty_list
from .._errors import RunCancelled, RunError
from .._messages import Message
from .._record import Status, StopReason, TaskOutput
from .._usage import Usage
from ..memory import todos_json
from ..workflows import WORKFLOW

if TYPE_CHECKING:
    from .._store import RunRow, Store

__all__ = ["RunResult", "stored_result", "stored_run"]


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
