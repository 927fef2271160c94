"""Events: one stream for the CLI, the server's SSE and the JSON log.

Every event has `type`, `ts`, `run_id`, `agent_id`, `parent_agent_id`, `tool_call_id` (where it
applies) and `data`. A subagent's events carry its own `agent_id` and the lead's tool call id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

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
    "batch.submitted",
    "batch.item",
    "batch.completed",
    "mcp.server_failed",
    "warning",
]


@dataclass(kw_only=True, slots=True)
class Event:
    type: EventType
    run_id: str
    agent_id: str
    parent_agent_id: str | None = None
    tool_call_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict[str, Any])
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EventSink = Callable[[Event], None]
"""Receives every event, synchronously, in order. Must be quick and must not raise."""
