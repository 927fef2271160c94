"""What a `Runtime` is built from besides its settings: the pool of tools its definitions may
name, the lead's tools from it, the definition folders inside the workspace, the run's budgets,
and this machine's timezone."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path

from .._agents import Lead, Subagent
from .._errors import UserError
from ..tools import BUILTIN_TOOLS, Tool, builtin_tools

__all__ = ["inside", "lead_tool_names", "local_timezone", "tool_pool"]


def tool_pool(lead: Lead, subagents: Sequence[Subagent], *, allow_commands: bool) -> dict[str, Tool]:
    """Every tool a definition may name: the built-in ones (`bash` when commands are allowed), and
    the tools the lead's and the types' definitions give (which win over a built-in of their name)."""
    pool = {t.name: t for t in builtin_tools(None, allow_commands=allow_commands)}
    given: dict[str, Tool] = {}
    for definition in (lead, *subagents):
        for tool in definition.own_tools:
            if given.setdefault(tool.name, tool) is not tool:
                raise UserError(
                    f"two different tools are called {tool.name!r} ({definition.label} gives one): rename one"
                )
    return pool | given


def lead_tool_names(lead: Lead, pool: Mapping[str, Tool]) -> list[str]:
    """The names of the lead's tools from the pool (`task` and the batch tools are added per run)."""
    names = lead.tool_names
    if names is None:
        return [n for n in pool if n in BUILTIN_TOOLS]
    return [n for n in dict.fromkeys(names) if n in pool]


def inside(root: Path, *folders: Sequence[str | PathLike[str]]) -> list[str]:
    """The folders that lie inside `root`, relative to it (definitions: read-only to agents)."""
    found: list[str] = []
    for group in folders:
        for folder in group:
            real = Path(folder).expanduser().resolve()
            if real != root and real.is_relative_to(root):
                found.append(real.relative_to(root).as_posix())
    return found


def local_timezone() -> str:
    name = datetime.now(UTC).astimezone().tzname()
    return name or time.tzname[0] or "UTC"
