"""The built-in workspace tools, by name, and the choice of them an agent is built with."""

from __future__ import annotations

from collections.abc import Iterable

from .._errors import UserError
from ._files import edit_file, find_files, grep, list_dir, read_file, write_file
from ._shell import bash
from ._tool import Tool

BUILTIN_TOOLS: dict[str, Tool] = {
    t.name: t for t in (read_file, write_file, edit_file, list_dir, find_files, grep, bash)
}
"""Every built-in tool by name. Tools hold no state, so agents can share these instances."""

READ_ONLY_TOOLS = ("read_file", "list_dir", "find_files", "grep")
"""The built-in tools that never change the workspace: what a read-only subagent gets."""


def builtin_tools(names: Iterable[str] | None = None, *, allow_commands: bool) -> list[Tool]:
    """The built-in tools called `names` (all of them when `None`), in the order given.

    `bash` is left out unless `allow_commands`: a tool the agent could never use would only cost
    context and invite failed calls. An unknown name is a `UserError` that lists the known ones.
    """
    wanted = list(BUILTIN_TOOLS) if names is None else list(dict.fromkeys(names))
    unknown = [name for name in wanted if name not in BUILTIN_TOOLS]
    if unknown:
        raise UserError(
            f"unknown built-in tool{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the built-in tools are: {', '.join(sorted(BUILTIN_TOOLS))}"
        )
    return [BUILTIN_TOOLS[name] for name in wanted if name != "bash" or allow_commands]
