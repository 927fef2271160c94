"""Events: one stream for the CLI, the server's SSE and the JSON log.

Every event has `type`, `ts`, `run_id`, `agent_id`, `parent_agent_id`, `tool_call_id` (where it
applies) and `data`. A subagent's events carry its own `agent_id` and the lead's tool call id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ._empty import empty_dict
from ._text import safe_json, safe_text

EventType = Literal[
    "run.started",
    "run.completed",
    "agent.started",
    "agent.completed",
    "model.request",
    "model.response",
    "tool.started",
    "tool.completed",
    "compaction",
    "context.cut",
    "context.overflow",
    "agent.stuck",
    "subagent.started",
    "subagent.heartbeat",
    "subagent.completed",
    "subagent.message",
    "subagent.notified",
    "batch.submitted",
    "batch.item",
    "batch.completed",
    "mcp.server_failed",
    "workspace.merged",
    "workspace.conflict",
    "warning",
    "approval.requested",
    "approval.decided",
    "hook.failed",
    "hook.acted",
    "workflow.started",
    "workflow.phase",
    "workflow.log",
    "workflow.completed",
    "todo.updated",
    "memory.written",
]


@dataclass(slots=True)
class Event:
    """One thing that happened in a run. Build it with keywords; the fields' order is positional
    too, for the loop's and the task tool's own events only: a dataclass's `__init__` takes eight
    keywords in twice the time of eight positions (0.49 against 0.25 µs), and a subagent makes
    eight events for any store or sink."""

    type: EventType
    run_id: str
    agent_id: str
    parent_agent_id: str | None = None
    tool_call_id: str | None = None
    data: dict[str, Any] = field(default_factory=empty_dict)
    ts: float = field(default_factory=time.time)
    detail: object = field(default=None, repr=False, compare=False)
    """The objects behind the event, for an in-process sink that wants more than `data` keeps:
    `agent.started` the agent's first messages, `agent.completed` its `AgentResult`,
    `model.request` the `ModelRequest`, `model.response` the `ModelResponse`, `tool.completed`
    the whole `ToolResultPart`. A reference, never copied: it is not stored, streamed nor part of
    `to_dict` (only the tracing sink reads it, with message content capture on)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, detail=None))
        del out["detail"]
        return out

    def safe(self) -> Event:
        """The event itself when its text is valid UTF-8 (see `_text.py`), else a copy with each
        lone surrogate escaped. The recorder sends every event on so: a sink (the terminal, a
        stream, the store, a trace exporter) never gets text it cannot encode."""
        if self.type in SAFE_BY_CONSTRUCTION:
            return self
        data = safe_json(self.data)
        parent, call = self.parent_agent_id, self.tool_call_id
        if (
            data is self.data
            and self.agent_id.isascii()
            and (parent is None or parent.isascii())
            and (call is None or call.isascii())
        ):
            return self  # the ids are the framework's own or a model's call ids: ASCII but for a hostile one
        return replace(
            self,
            data=data,
            agent_id=safe_text(self.agent_id),
            parent_agent_id=None if self.parent_agent_id is None else safe_text(self.parent_agent_id),
            tool_call_id=None if self.tool_call_id is None else safe_text(self.tool_call_id),
        )


SAFE_BY_CONSTRUCTION: frozenset[str] = frozenset({"model.request", "model.response", "tool.started", "tool.completed"})
"""Events the loop builds only of text made safe where it entered (the model's answer and each
tool's result, see `delegate.loop`), four of the seven events of a one-turn subagent: `Event.safe`
does not walk them again (a walk of every event cost a fan-out a few per cent)."""

EventSink = Callable[[Event], None]
"""Receives every event, synchronously, in order. Must be quick and must not raise."""


def unheard(event: Event) -> None:
    """The sink of a run that nothing hears (no store, no sink): `ToolContext.event` and the
    `task` tool build no event for it (a storeless fan-out spent a tenth of its time on them)."""
