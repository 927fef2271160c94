"""delegate: a runtime for LLM agents that hand work to subagents."""

from ._errors import (
    DelegateError,
    ModelError,
    ModelOutputError,
    RunCancelled,
    RunError,
    ToolError,
    UserError,
    WorkspaceError,
)
from ._events import Event, EventSink
from ._messages import MediaPart, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from ._usage import Usage
from ._workspace import Workspace
from .tools import Tool, ToolContext, ToolReturn, tool

__all__ = [
    "DelegateError",
    "Event",
    "EventSink",
    "MediaPart",
    "Message",
    "ModelError",
    "ModelOutputError",
    "ReasoningPart",
    "RunCancelled",
    "RunError",
    "TextPart",
    "Tool",
    "ToolCallPart",
    "ToolContext",
    "ToolError",
    "ToolResultPart",
    "ToolReturn",
    "Usage",
    "UserError",
    "Workspace",
    "tool",
]
