"""The workspace: its root and the views agents get of it.

Race-free paths from a handle on the root (`_paths`), copy-on-write layers and their all-or-nothing
merges (`_layer`, `_changes`, `_merge`), search in a child process (`_search`), and the command
sandbox (bubblewrap, seccomp, command rules and limits: `_sandbox`, `_seccomp`, `_overlay`,
`_command_rules`, `_command_limits`). Everything outside this package imports these names only.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._cgroup import CommandCgroup
from ._changes import layer_changes
from ._command_limits import CommandLimits
from ._command_rules import CommandRules, command_rule_matching
from ._home import HOST, Home, reaches, workspace_id
from ._layer import Layer, glance
from ._merge import merge_layer, recover_merges, sweep_layers
from ._overlay import NO_OVERLAY, after_command, command_lock, never_merged
from ._root import CommandPolicy, Located, Mount, Workspace, in_repository, refuse_repository_head
from ._sandbox import (
    SECRET_VARIABLES,
    Repositories,
    check_disk_quota,
    command_environment,
    sandbox_argv,
    size_text,
    state_hidden_argv,
    workspace_usage,
)
from ._search import SNIFF_BYTES, compile_regex, find_files, looks_binary, open_for_reading, search
from ._seccomp import filter_fd, filter_program

__all__ = [
    "HOST",
    "NO_OVERLAY",
    "SECRET_VARIABLES",
    "SNIFF_BYTES",
    "CommandCgroup",
    "CommandLimits",
    "CommandPolicy",
    "CommandRules",
    "Home",
    "Layer",
    "Located",
    "Mount",
    "Repositories",
    "Workspace",
    "after_command",
    "check_disk_quota",
    "command_environment",
    "command_lock",
    "command_rule_matching",
    "compile_regex",
    "filter_fd",
    "filter_program",
    "find_files",
    "glance",
    "in_repository",
    "layer_changes",
    "looks_binary",
    "merge_layer",
    "never_merged",
    "open_for_reading",
    "reaches",
    "recover_merges",
    "refuse_repository_head",
    "sandbox_argv",
    "search",
    "size_text",
    "state_hidden_argv",
    "sweep_layers",
    "workspace_id",
    "workspace_usage",
]
