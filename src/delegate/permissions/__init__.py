"""Who decides a call: permission rules in Claude Code's syntax (`_rules`: allow, ask, deny,
`permissionMode`, the settings files) and hooks (`_hooks`: Python functions and Claude Code hook
commands). The records of calls that waited for a person are plain data (`delegate._record`).

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._hooks import (
    CLAUDE_NAME,
    CommandHook,
    HookAnswer,
    HookEvent,
    HookFunction,
    HookName,
    Hooks,
    Ran,
    call_function,
    command_hooks,
    run_command,
)
from ._rules import CallPolicy, PermissionMode, Permissions, Rule, Verdict, path_argument, read_settings

__all__ = [
    "CLAUDE_NAME",
    "CallPolicy",
    "CommandHook",
    "HookAnswer",
    "HookEvent",
    "HookFunction",
    "HookName",
    "Hooks",
    "PermissionMode",
    "Permissions",
    "Ran",
    "Rule",
    "Verdict",
    "call_function",
    "command_hooks",
    "path_argument",
    "read_settings",
    "run_command",
]
