"""What a `Runtime` is built from besides its settings: the pool of tools its definitions may
name, the lead's tools from it, the definition folders inside the workspace, the run's budgets,
and this machine's timezone."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import Any

from .._errors import UserError
from ..agents import MEMORY_TOOLS, NEVER_GIVEN, Catalogue, CatalogueWarning, Lead, Subagent
from ..mcp import MCPTools, server_config
from ..tools import BUILTIN_TOOLS, Tool, builtin_tools

__all__ = [
    "inline_servers",
    "inside",
    "lead_tool_names",
    "local_timezone",
    "mcp_failed",
    "tool_pool",
    "unknown_tools",
]


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


PER_RUN_TOOLS = frozenset({"complete", "tool_search", "list_uploaded_files", *MEMORY_TOOLS})
"""Tools a definition may name that no pool holds: each run makes them (`complete`, `tool_search`
with deferred tools, `list_uploaded_files` with uploads, the memory and todo tools)."""


def unknown_tools(catalogue: Catalogue, pool: Mapping[str, Tool]) -> list[CatalogueWarning]:
    """A warning for each type whose `tools` name a tool that is neither built in nor given in code
    (a misspelt `red_file`): the type would run without it, and nothing would say why. `bash`
    without commands, MCP tools (`mcp__...`), the per-run tools and `task` (never given) are not
    unknown."""
    found: list[CatalogueWarning] = []
    for definition in catalogue.definitions.values():
        names = definition.tool_names or ()
        unknown = [
            name
            for name in dict.fromkeys(names)
            if name not in pool
            and name not in BUILTIN_TOOLS
            and name not in PER_RUN_TOOLS
            and name not in NEVER_GIVEN
            and not name.startswith("mcp__")
        ]
        if unknown:
            reason = (
                f"type {definition.name!r} names tool(s) {', '.join(unknown)}, but no built-in tool and no tool "
                f"given in code has that name: it runs without them (built-in: {', '.join(BUILTIN_TOOLS)})"
            )
            found.append(CatalogueWarning(definition.source, reason))
    return found


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


def mcp_failed(mcp: MCPTools | None, own: Mapping[str, MCPTools]) -> list[dict[str, Any]]:
    """The MCP servers the last loads left out, as `mcp.server_failed` data: `server`, `reason`,
    `type` (the subagent type whose own server it is; None: the runtime's, for every agent),
    and `warning`, the line the run's `warnings` and the CLI show."""
    found: list[dict[str, Any]] = []
    groups = [(None, mcp), *own.items()]
    for type_name, servers in groups:
        for server, reason in (servers.failed if servers is not None else {}).items():
            without = (
                "the run goes on without its tools"
                if type_name is None
                else f"type {type_name!r} runs without its tools"
            )
            found.append({"server": server, "reason": reason, "type": type_name, "warning": f"{reason}; {without}"})
    return found


def inline_servers(
    catalogue: Catalogue, workspaces: Sequence[Path]
) -> tuple[dict[str, MCPTools], list[CatalogueWarning]]:
    """The MCP servers definitions define inline, per type, and what is wrong with those that
    cannot be used (catalogue warnings: the type runs without them)."""
    found: dict[str, MCPTools] = {}
    problems: list[CatalogueWarning] = []
    for definition in catalogue.definitions.values():
        if not definition.mcp_inline:
            continue
        try:
            configs = [server_config(n, e, definition.source) for n, e in definition.mcp_inline.items()]
            found[definition.name] = MCPTools(configs, workspaces=workspaces)
        except UserError as exc:
            problems.append(CatalogueWarning(definition.source, f"{exc}; it runs without these servers"))
    return found, problems
