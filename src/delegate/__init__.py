"""delegate: a runtime for LLM agents that hand work to subagents.

```python
from delegate import Runtime, Subagent

rt = Runtime(model="openai:gpt-4.1-mini", workspace="./ws")
result = rt.run_sync("Map the auth flow and write docs/auth.md")
```
"""

from ._agents import Catalogue, Subagent
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
from ._loop import Compaction
from ._messages import MediaPart, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from ._runtime import RunResult, Runtime
from ._usage import Usage
from ._workspace import Workspace
from .models import Model, ModelRequest, ModelResponse, ToolSpec
from .subagents import Artifact, Skipped, TaskOutput
from .tools import Tool, ToolContext, ToolReturn, tool

__all__ = [
    "Artifact",
    "Catalogue",
    "Compaction",
    "DelegateError",
    "Event",
    "EventSink",
    "MediaPart",
    "Message",
    "Model",
    "ModelError",
    "ModelOutputError",
    "ModelRequest",
    "ModelResponse",
    "ReasoningPart",
    "RunCancelled",
    "RunError",
    "RunResult",
    "Runtime",
    "Skipped",
    "Subagent",
    "TaskOutput",
    "TextPart",
    "Tool",
    "ToolCallPart",
    "ToolContext",
    "ToolError",
    "ToolResultPart",
    "ToolReturn",
    "ToolSpec",
    "Usage",
    "UserError",
    "Workspace",
    "WorkspaceError",
    "tool",
]
