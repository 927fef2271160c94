"""delegate: a runtime for LLM agents that hand work to subagents.

```python
from delegate import Lead, Runtime, RunLimits, Subagent

rt = Runtime(model="openai:gpt-4.1-mini", workspace="./ws", limits=RunLimits(timeout=600))
result = rt.run_sync("Map the auth flow and write docs/auth.md")
```
"""

from typing import TYPE_CHECKING

from . import _lazy

if TYPE_CHECKING:
    from ._config import Compaction, Extensions, LoopGuard, LoopSettings, RunLimits
    from ._errors import (
        ContextOverflowError,
        DelegateError,
        ModelError,
        ModelOutputError,
        RunCancelled,
        RunElsewhereError,
        RunError,
        StoreBusyError,
        StoreError,
        ToolError,
        UserError,
        WorkspaceError,
    )
    from ._events import Event, EventSink
    from ._messages import MediaPart, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
    from ._record import Artifact, Skipped, Status, StopReason, TaskOutput
    from ._store import Store
    from ._usage import Usage
    from .agents import Agent, Catalogue, CatalogueWarning, Lead, Subagent
    from .engine import EngineSettings
    from .mcp import MCPServerConfig
    from .models import (
        AnthropicModel,
        Model,
        ModelAliases,
        ModelProfile,
        ModelRequest,
        ModelResponse,
        OpenAIModel,
        RetryPolicy,
        ToolSpec,
    )
    from .permissions import HookAnswer, HookEvent, Hooks, Permissions
    from .run import RunResult, Runtime, RuntimeFactory, RuntimeSettings, Thread
    from .tools import PathParam, Tool, ToolContext, ToolReturn, tool
    from .workflows import ScriptLimits, Workflow
    from .workspace import CommandLimits, CommandPolicy, Workspace

_WHERE = {
    "Agent": ".agents",
    "AnthropicModel": ".models",
    "Artifact": "._record",
    "Catalogue": ".agents",
    "CatalogueWarning": ".agents",
    "CommandLimits": ".workspace",
    "CommandPolicy": ".workspace",
    "Compaction": "._config",
    "ContextOverflowError": "._errors",
    "DelegateError": "._errors",
    "EngineSettings": ".engine",
    "Event": "._events",
    "EventSink": "._events",
    "Extensions": "._config",
    "HookAnswer": ".permissions",
    "HookEvent": ".permissions",
    "Hooks": ".permissions",
    "Lead": ".agents",
    "LoopGuard": "._config",
    "LoopSettings": "._config",
    "MCPServerConfig": ".mcp",
    "MediaPart": "._messages",
    "Message": "._messages",
    "Model": ".models",
    "ModelAliases": ".models",
    "ModelError": "._errors",
    "ModelOutputError": "._errors",
    "ModelProfile": ".models",
    "ModelRequest": ".models",
    "ModelResponse": ".models",
    "OpenAIModel": ".models",
    "PathParam": ".tools",
    "Permissions": ".permissions",
    "ReasoningPart": "._messages",
    "RetryPolicy": ".models",
    "RunCancelled": "._errors",
    "RunElsewhereError": "._errors",
    "RunError": "._errors",
    "RunLimits": "._config",
    "RunResult": ".run",
    "Runtime": ".run",
    "RuntimeFactory": ".run",
    "RuntimeSettings": ".run",
    "ScriptLimits": ".workflows",
    "Skipped": "._record",
    "Status": "._record",
    "StopReason": "._record",
    "Store": "._store",
    "StoreBusyError": "._errors",
    "StoreError": "._errors",
    "Subagent": ".agents",
    "TaskOutput": "._record",
    "TextPart": "._messages",
    "Thread": ".run",
    "Tool": ".tools",
    "ToolCallPart": "._messages",
    "ToolContext": ".tools",
    "ToolError": "._errors",
    "ToolResultPart": "._messages",
    "ToolReturn": ".tools",
    "ToolSpec": ".models",
    "Usage": "._usage",
    "UserError": "._errors",
    "Workspace": ".workspace",
    "Workflow": ".workflows",
    "WorkspaceError": "._errors",
    "tool": ".tools",
}
"""Where each public name lives. Names are imported on first use, so `import delegate` (and so
`delegate --help`) costs almost nothing until something is used."""


__getattr__ = _lazy.lazy_names(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Agent",
    "AnthropicModel",
    "Artifact",
    "Catalogue",
    "CatalogueWarning",
    "CommandLimits",
    "CommandPolicy",
    "Compaction",
    "ContextOverflowError",
    "DelegateError",
    "EngineSettings",
    "Event",
    "EventSink",
    "Extensions",
    "HookAnswer",
    "HookEvent",
    "Hooks",
    "Lead",
    "LoopGuard",
    "LoopSettings",
    "MCPServerConfig",
    "MediaPart",
    "Message",
    "Model",
    "ModelAliases",
    "ModelError",
    "ModelOutputError",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "PathParam",
    "Permissions",
    "ReasoningPart",
    "RetryPolicy",
    "RunCancelled",
    "RunElsewhereError",
    "RunError",
    "RunLimits",
    "RunResult",
    "Runtime",
    "RuntimeFactory",
    "RuntimeSettings",
    "ScriptLimits",
    "Skipped",
    "Status",
    "StopReason",
    "Store",
    "StoreBusyError",
    "StoreError",
    "Subagent",
    "TaskOutput",
    "TextPart",
    "Thread",
    "Tool",
    "ToolCallPart",
    "ToolContext",
    "ToolError",
    "ToolResultPart",
    "ToolReturn",
    "ToolSpec",
    "Usage",
    "UserError",
    "Workflow",
    "Workspace",
    "WorkspaceError",
    "tool",
]
