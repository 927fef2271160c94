"""How a live run's end is made (`run_result`, `cancelled_result`) and recorded: finished
(`record_end`) or let go to be resumed (`release_interrupted`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .._events import Event
from ..loop import EVENT_VALUE_LIMIT, AgentResult
from ..memory import RunMemory, todos_json
from ..subagents import Delivery
from ._run_result import RunResult

if TYPE_CHECKING:
    from ..subagents import Roster
    from ..tools import ToolContext
    from ._recorder import Recorder

__all__ = ["cancelled_result", "record_end", "release_interrupted", "run_result"]


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
    from ._follow import interrupted_event  # it reads the store: SQLAlchemy, never for a storeless run

    await recorder.release(result.usage)
    event = interrupted_event(result.run_id)
    for sink in recorder.sinks:
        sink(event)
    return result
