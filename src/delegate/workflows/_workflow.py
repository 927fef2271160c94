"""A workflow from start to end: its script run in the sandbox over a `WorkflowHost`, its events,
and what it ends with (the lead's result, or the run's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from time import time
from typing import Any

from .._empty import empty_dict
from .._errors import UserError
from .._events import Event
from .._usage import Usage
from ..loop import AgentResult
from ..subagents import Delivery
from ..tools import ToolReturn
from ._host import WorkflowHost
from ._sandbox import ScriptError, ScriptLimits, run_script

__all__ = ["Workflow", "drive", "render"]

VALUE_CHARS = 20_000
"""The most of a workflow's return value its text (the run's `final`, the lead's tool result) shows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workflow:
    """A plan written as a Python script (see docs/workflows.md): `script` runs in a sandbox and
    its last expression is the workflow's value; `args` are given to it as the name `args` (JSON
    data); `description` says what it is for (the run's prompt)."""

    script: str
    description: str = ""
    args: Mapping[str, Any] = field(default_factory=empty_dict)
    limits: ScriptLimits = field(default_factory=ScriptLimits)
    """What the script may use of its own: CPU time, memory, recursion, size."""

    def __post_init__(self) -> None:
        if not self.script.strip():
            raise UserError("the workflow script is empty: write the plan as Python (see docs/workflows.md)")
        try:
            json.dumps(dict(self.args))
        except (TypeError, ValueError):
            raise UserError("a workflow's args must be JSON data (text, numbers, lists, dicts)") from None

    @property
    def title(self) -> str:
        """What the run's prompt says: the description, else the script's first line."""
        first = next((line.strip() for line in self.script.splitlines() if line.strip()), "")
        return self.description or f"workflow: {first[:200]}"

    def to_dict(self) -> dict[str, Any]:
        return {"script": self.script, "description": self.description, "args": dict(self.args)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workflow:
        return cls(
            script=str(data["script"]), description=str(data.get("description") or ""), args=data.get("args") or {}
        )


async def drive(workflow: Workflow, host: WorkflowHost, keep: Callable[[dict[str, Any]], None]) -> AgentResult:
    """Run `workflow`'s script over `host` to its end, and give back what it ended with as an
    agent's result: `completed` when the script ran to its end (whatever its agents did: the
    count line says that), `error` when it failed. `keep` gets the workflow's record (its
    `value`, `status`, counts, phases and agents) to store; also when it is cancelled (its
    status `cancelled`, or `interrupted` when the run stops to be resumed; agents that were
    running say the same), before the cancellation goes on."""
    replayable = host.journal.replayable
    started = {"description": workflow.description, "lines": workflow.script.count("\n") + 1}
    if replayable:
        started["journaled"] = replayable
    host.emit(Event("workflow.started", host.parent.run_id, host.parent.agent_id, None, host.tool_call_id, started))
    value: Any = None
    error: str | None = None
    try:
        value = await run_script(workflow.script, host, limits=workflow.limits, inputs={"args": dict(workflow.args)})
    except ScriptError as exc:
        error = f"the workflow script failed at line {exc.line}: {exc.message}" if exc.line else str(exc)
    except asyncio.CancelledError:  # stopped whole (cancelled), or interrupted to be resumed
        ended = "interrupted" if host.runner.interrupting else "cancelled"
        host.outcome.end_unfinished(ended)
        host.record = host.outcome.to_dict() | {"status": ended, "value": None}
        keep(host.record)
        _ended(host, host.record, None)
        raise
    finally:
        await host.close()
    record = host.outcome.to_dict() | {"status": "completed" if error is None else "error", "value": value}
    if host.journal.diverged is not None:
        record["diverged_at_line"] = host.journal.diverged_line
        host.log(
            f"the script changed since the last attempt: from line {host.journal.diverged_line} on, calls ran again"
        )
    if error is not None:
        record["error"] = error
    host.record = record
    keep(record)
    _ended(host, record, error)
    text = render(value, record["line"], error)
    return AgentResult(
        status="completed" if error is None else "error",
        stop_reason="final_answer" if error is None else "crash",
        final=text,
        messages=[],
        steps=0,
        usage=Usage(),
        stop_return=ToolReturn(content=text, data=Delivery(summary=text, result=value)),
        error=error,
    )


def _ended(host: WorkflowHost, record: dict[str, Any], error: str | None) -> None:
    ended = {"status": record["status"], "line": record["line"], "counts": record["counts"], "error": error}
    host.emit(
        Event("workflow.completed", host.parent.run_id, host.parent.agent_id, None, host.tool_call_id, ended, time())
    )


def render(value: Any, line: str, error: str | None = None) -> str:
    """A workflow's end as text: the count line, then the error or the return value (as JSON,
    cut at `VALUE_CHARS`)."""
    if error is not None:
        return f"{line}\n\n{error}"
    shown = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    if len(shown) > VALUE_CHARS:
        shown = shown[:VALUE_CHARS] + f"\n[the value goes on: {len(shown):,} characters in all]"
    return f"{line}\n\n{shown}"


def shipped_workflows() -> dict[str, Path]:
    """The workflows delegate ships, by name (`map-review-merge`, `deep-research`): what
    `delegate workflow run NAME` and an eval arm's `workflow=NAME` run."""
    folder = Path(__file__).resolve().parent / "shipped"
    return {p.stem.replace("_", "-"): p for p in sorted(folder.glob("*.py"))}
