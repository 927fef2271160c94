"""Tool machinery and the built-in workspace tools.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ..models import progress
from ..workspace import SECRET_VARIABLES, never_merged
from ._builtin import BUILTIN_TOOLS, READ_ONLY_TOOLS, builtin_tools
from ._files import sweep_scratch
from ._hooked import HookSet
from ._permissions import Approval, ApprovalRequest, Approver, CallGuard
from ._shell import run_command
from ._tool import PathParam, Tool, ToolContext, ToolFunction, ToolReturn, run_blocking, tool
from ._uploads import list_uploaded_files, uploads_state

__all__ = [
    "BUILTIN_TOOLS",
    "READ_ONLY_TOOLS",
    "SECRET_VARIABLES",
    "Approval",
    "ApprovalRequest",
    "Approver",
    "CallGuard",
    "HookSet",
    "PathParam",
    "Tool",
    "ToolContext",
    "ToolFunction",
    "ToolReturn",
    "builtin_tools",
    "list_uploaded_files",
    "never_merged",
    "progress",
    "run_blocking",
    "run_command",
    "sweep_scratch",
    "tool",
    "uploads_state",
]
