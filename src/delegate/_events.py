"""Events: one stream for the CLI, the server's SSE and the JSON log.

Every event has `type`, `ts`, `run_id`, `agent_id`, `parent_agent_id`, `tool_call_id` (where it
applies) and `data`. A subagent's events carry its own `agent_id` and the lead's tool call id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

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
    "batch.submitted",
    "batch.item",
    "batch.completed",
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

    def safe(self) -> Event:
        """The event itself when its text is valid UTF-8 (see `_text.py`), else a copy with each
        lone surrogate escaped. The recorder sends every event on so: a sink (the terminal, a
        stream, the store, a trace exporter) never gets text it cannot encode."""
        data = safe_json(self.data)
        ids = (self.agent_id, self.parent_agent_id, self.tool_call_id)
        if data is self.data and all(i is None or safe_text(i) is i for i in ids):
            return self
        return replace(
            self,
            data=data,
            agent_id=safe_text(self.agent_id),
            parent_agent_id=None if self.parent_agent_id is None else safe_text(self.parent_agent_id),
            tool_call_id=None if self.tool_call_id is None else safe_text(self.tool_call_id),
        )


EventSink = Callable[[Event], None]
"""Receives every event, synchronously, in order. Must be quick and must not raise."""
