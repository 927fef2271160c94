"""Agent definitions, the data: what the lead (`Lead`) and each subagent type (`Subagent`) say,
the built-in types, and the tool sets a definition draws on (`tools_for`: the tools a subagent of
a type gets).

Which model a subagent runs on, first match wins:
1. its definition's `model`, when that is a model string (not `inherit`);
2. the runtime's `subagent_model` (a cheaper model for all subagents), when set;
3. the model of the agent that delegated (the lead's).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from .._empty import empty_dict, empty_list
from .._errors import UserError
from .._record import ResultSchema
from ..models import Model
from ..tools import BUILTIN_TOOLS, READ_ONLY_TOOLS, Tool
from ..workspace import CommandRules
from ._frontmatter import CatalogueWarning

NEVER_INHERITED = frozenset({"task", "batch_task", "batch_status", "cancel_batch", "memory_write"})
"""Tools a subagent does not get by inheriting its parent's set. `task` is never given at all (no
nesting); `memory_write` only to a type that names it or has a `memory:` scope. Tools that talk to
the user (`Tool.talks_to_user`) are not inherited either, whatever their name: the caller leaves
them out of `parent_tools`."""

MEMORY_READING = ("memory_read", "memory_search")
"""The memory tools every agent gets by default: they read the notes its user sees."""
TODO_TOOLS = ("todo_write", "todo_read")
"""Each agent's own todo list (a subagent's starts empty: never its lead's)."""
MEMORY_TOOLS = (*MEMORY_READING, "memory_write", *TODO_TOOLS)
"""The tools a run makes for memory and todos (see `delegate.memory`)."""
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
"""The file tools that write: a type with none of them (and not `isolation: shared`) is read-only,
and is never given `memory_write`."""
MemoryScope = Literal["user", "project", "local"]

NEVER_GIVEN = frozenset({"task", "batch_task", "batch_status", "cancel_batch"})


LEAD_ONLY_TOOLS = (
    *("task", "batch_task", "task_status", "task_wait", "task_stop", "task_message", "workflow"),
    *MEMORY_TOOLS,
)
"""What a lead's `tools` may name besides tools: the `task` tool (delegation), the batch tools
(`batch_task`, with `batch_status` and `cancel_batch`), and the tools of background subagents and
follow-ups (naming one offers them all from the first turn; without, they come with `task` once a
subagent runs in the background), and the memory and todo tools each run makes."""


@dataclass(kw_only=True)
class Agent:
    """What every agent definition says, the lead's (`Lead`) and each subagent type's (`Subagent`).

    `tools` names the tools it gets, or gives them: a `@tool` function (or any `Tool`) or the name
    of one (a built-in tool, or a tool given to the lead or to any type in code). `None` is the
    default set: a lead's is every built-in tool and delegation, a subagent's its parent's. `model`
    is a `provider:name` string or a `Model`; `inherit` runs on the runtime's model (a subagent: on
    the model of the agent that delegated, see the module's docstring). `first_tool_choice` is
    `auto`, `required` (the first turn must call a tool) or the name of the tool the first turn
    must call, or a list of these for the first turns in order: a weak model then takes the steps
    of its work in their order (`["read_file", "write_file"]`). `skills=None` gives every skill,
    `[]` none. `output_schema` is the typed result it must end with: a JSON Schema, or a pydantic
    model (what `RunResult.result` / `TaskOutput.result` then hold, validated). `compaction_model`
    writes the summary when its conversation is compacted (spec 000's `compactionModel`; None: the
    runtime's `Compaction.model`, else its own model).
    """

    instructions: str = ""
    tools: Sequence[str | Tool] | None = None
    model: str | Model = "inherit"
    max_steps: int = 30
    first_tool_choice: str | list[str] = "auto"
    skills: list[str] | None = None
    output_schema: dict[str, Any] | type[BaseModel] | None = None
    """The typed result it must deliver: a JSON Schema, or a pydantic model."""
    compaction_model: str | Model | None = None
    """The model that summarises its older turns when its context fills (None: the runtime's)."""

    @property
    def label(self) -> str:
        """How errors name it."""
        return "the lead"

    @property
    def tool_names(self) -> list[str] | None:
        """`tools` as names (None: the default set)."""
        return None if self.tools is None else [t if isinstance(t, str) else t.name for t in self.tools]

    @property
    def own_tools(self) -> list[Tool]:
        """The tools it gives itself (the `Tool`s of `tools`, not names)."""
        return [t for t in self.tools or () if not isinstance(t, str)]

    def __post_init__(self) -> None:
        if isinstance(self.max_steps, bool) or self.max_steps < 1:
            raise UserError(f"{self.label}: max_steps={self.max_steps!r}; give a whole number of at least 1")
        if isinstance(self.tools, (str, Tool)):
            raise UserError(f"{self.label}: tools is a list of tools or tool names; write tools=[{self.tools!r}]")
        if self.output_schema is not None:
            ResultSchema(self.output_schema, self.label)  # a schema that is not one is refused here


@dataclass(kw_only=True)
class Lead(Agent):
    """The lead agent of a runtime's runs: what `Runtime(lead=...)` runs for each prompt.

    `instructions` are added to delegate's own (how to delegate and answer). Its default `tools`
    are every built-in tool (`bash` only when commands are allowed), `task` when there are types to
    delegate to, and the batch tools when the runtime has a store; a list names exactly what it
    gets, `task` and `batch_task` included (`tools=["read_file", "task", my_tool]`). `subagents`
    names the types its `task` tool may start (None: every type of the catalogue).
    `subagent_model` is the model of subagents whose definition says `model: inherit` (default:
    the lead's own). With an `output_schema`, the lead ends by calling `complete` with a result in
    that shape, and the run's `RunResult.result` holds it, validated.
    """

    max_steps: int = 50
    subagents: list[str] | None = None
    subagent_model: str | Model | None = None

    @property
    def name(self) -> str:
        return "lead"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [n for n in self.tool_names or () if n not in BUILTIN_TOOLS and n not in LEAD_ONLY_TOOLS]
        given = {t.name for t in self.own_tools}
        unknown = [n for n in unknown if n not in given]
        if unknown:
            raise UserError(
                f"the lead's tools name {', '.join(map(repr, unknown))}, which is no built-in tool and no tool given: "
                f"pass the @tool function itself, or one of {', '.join(sorted([*BUILTIN_TOOLS, *LEAD_ONLY_TOOLS]))}"
            )


@dataclass(kw_only=True)
class Subagent(Agent):
    """A type of subagent the lead can start with `task` (see `Agent` for the fields it shares).

    `tools=None` inherits the parent's tools (less `task` and the ask-the-user and present-files
    tools); a list names exactly the tools it gets (never `task`). `stop_tools` names tools whose
    successful call also ends the subagent, besides `complete`. `timeout` (seconds),
    `token_budget` (tokens) and `cost_budget` (US dollars) bound each subagent of the type.
    """

    name: str
    description: str
    disallowed_tools: list[str] = field(default_factory=empty_list)
    timeout: float | None = 600.0
    token_budget: int | None = None
    cost_budget: float | None = None
    """US dollars each subagent of the type may spend: it makes no request once it spent them, or
    when what is left cannot cover a request as costly as its last (see `loop.cost_over`)."""
    stop_tools: list[str] = field(default_factory=empty_list)
    requires_commands: bool = False
    project_context: bool = True
    """Whether its system prompt carries the workspace's AGENTS.md / CLAUDE.md / ARCHITECTURE.md."""
    mcp_servers: list[str] = field(default_factory=empty_list)
    """MCP servers whose tools this type gets besides its `tools`: the runtime's, or its own."""
    mcp_inline: dict[str, dict[str, Any]] = field(default_factory=empty_dict)
    """Servers this type defines itself (`.mcp.json` entries), started for it alone; honoured only
    from what agents cannot write (code, `--agents` folders outside the workspace)."""
    permission_mode: str | None = None
    hooks: dict[str, Any] = field(default_factory=empty_dict)
    """Hook commands for this type's agents alone, in Claude Code's `hooks` format; honoured only
    from what the operator owns (code, its folders; never a user's own under `delegate serve`)."""
    command_rules: CommandRules = field(default_factory=CommandRules)
    """The `Bash(...)` rules of its `tools` (what it may run) and `disallowedTools` (what it may not)."""
    unavailable_tools: list[str] = field(default_factory=empty_list)
    """Tools its file names that delegate cannot serve (Claude's `WebFetch`, ...)."""
    model_fallback: bool = False
    """Its model came through the alias table: without the provider's key it runs on the lead's."""
    written_model: str | None = None
    """`model` as its file wrote it, when that differs from the resolved `model`."""
    extra: dict[str, Any] = field(default_factory=empty_dict)
    """Front-matter fields delegate does not know, kept as written."""
    warnings: list[CatalogueWarning] = field(default_factory=empty_list)
    source: str = "code"
    """Where it came from: `builtin`, `code`, or its file relative to the folder it came from."""
    memory: MemoryScope | None = None
    """Claude Code's `memory:` field: the type keeps notes of its own (`user`: its user's, in every
    workspace; `project`: the workspace's, for every user; `local`: its user's in this workspace),
    gets `memory_read`, `memory_search` and (unless read-only) `memory_write`, and finds its latest
    notes in its system prompt. None: it reads the notes its user sees, as every agent does."""
    isolation: Literal["overlay", "shared"] | None = None
    """`overlay`: it writes into a private layer, merged all or nothing when it completes (see
    `docs/isolation.md`). `shared`: it writes the workspace itself, even without write tools (a
    type without them otherwise runs on a layer where every write is refused). None: the lead's
    `task` call decides (shared unless it asks for `overlay`)."""
    max_depth: int | None = None
    """How many levels below it its subagents may still go, never past the run's
    `RunLimits.max_depth`: 0 never delegates, 1 may start subagents that cannot. None: as deep as
    the run allows. Only a type that inherits its tools, or names `task`, delegates at all."""

    @property
    def label(self) -> str:
        return f"subagent type {self.name!r}"

    def to_dict(self) -> dict[str, Any]:
        """The definition as `delegate agents list --json`, `agents show --json` and `GET /agents` show it."""
        return {
            "name": self.name,
            "description": self.description,
            "tools": self.tool_names,
            "disallowed_tools": self.disallowed_tools,
            "unavailable_tools": self.unavailable_tools,
            "model": self.model if isinstance(self.model, str) else self.model.name,
            "written_model": self.written_model,
            "model_fallback": self.model_fallback,
            "compaction_model": self.compaction_model
            if self.compaction_model is None or isinstance(self.compaction_model, str)
            else self.compaction_model.name,
            "max_steps": self.max_steps,
            "timeout": self.timeout,
            "token_budget": self.token_budget,
            "cost_budget": self.cost_budget,
            "skills": self.skills,
            "mcp_servers": self.mcp_servers,
            "permission_mode": self.permission_mode,
            "command_rules": self.command_rules.to_dict(),
            "project_context": self.project_context,
            "requires_commands": self.requires_commands,
            "first_tool_choice": self.first_tool_choice,
            "output_schema": None
            if self.output_schema is None
            else ResultSchema(self.output_schema, self.label).schema,
            "isolation": self.isolation,
            "memory": self.memory,
            "max_depth": self.max_depth,
            "extra": self.extra,
            "warnings": [w.to_dict() for w in self.warnings],
            "source": self.source,
        }

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise UserError(
                f"subagent name {self.name!r} is not valid: use letters, digits, '-', '_' and '.' (at most 64)"
            )
        super().__post_init__()
        if self.timeout is not None and self.timeout <= 0:
            raise UserError(f"subagent {self.name!r}: timeout must be positive seconds")
        if self.isolation not in (None, "overlay", "shared"):
            raise UserError(f"subagent {self.name!r}: isolation={self.isolation!r}; give 'overlay', 'shared' or None")
        if self.memory not in (None, "user", "project", "local"):
            raise UserError(f"subagent {self.name!r}: memory={self.memory!r}; give 'user', 'project', 'local' or None")
        depth = self.max_depth
        if depth is not None and not _whole_from(depth, 0):
            raise UserError(f"subagent {self.name!r}: max_depth={depth!r}; give a whole number, 0 or more, or None")

    @property
    def read_only(self) -> bool:
        """Whether its named tools write no file (and it is not `isolation: shared`): such a type
        is never given `memory_write`. A type that inherits is not read-only."""
        names = self.tool_names
        return names is not None and not WRITE_TOOLS.intersection(names) and self.isolation != "shared"


def _whole_from(value: object, least: int) -> bool:
    """Whether `value` is a whole number (not a bool) of at least `least`: what code may pass is checked."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""Names of subagent types and skills: letters, digits, `-`, `_` and `.` (`powershell-5.1-expert`)."""

BUILTIN_SUBAGENTS: tuple[Subagent, ...] = (
    Subagent(
        name="general-purpose",
        description=(
            "General-purpose agent for multi-step work: research, reading and writing files, "
            "analysis. Has the same tools as you (except task)."
        ),
        source="builtin",
    ),
    Subagent(
        name="explore",
        description=(
            "Read-only explorer: answers one precise question about the workspace by reading, "
            "grepping and listing files, and reports findings with file references. Cannot write."
        ),
        instructions=(
            "You are read-only. Investigate with read_file, grep, find_files and list_dir; answer the "
            "question precisely, citing paths and line numbers."
        ),
        tools=[*READ_ONLY_TOOLS, *MEMORY_READING, *TODO_TOOLS],
        source="builtin",
    ),
    Subagent(
        name="bash",
        description="Command runner: runs shell commands in the workspace (builds, tests, git) and reports.",
        instructions="Run the commands needed for the task, check their exit codes, and report what happened.",
        tools=["bash", "read_file", "list_dir", *MEMORY_READING, *TODO_TOOLS],
        requires_commands=True,
        source="builtin",
        isolation="shared",  # its builds and tests write: it has no write tools, and is not read-only
    ),
)


def tools_for(definition: Subagent, parent_tools: Sequence[str], available: Sequence[str]) -> list[str]:
    """The tool names a subagent of `definition` gets (before `complete` is added).

    Inherited sets drop `task`, the batch tools and `memory_write` (`parent_tools` holds no tool
    that talks to the user); an explicit list may name a tool that talks to the user, never `task`.
    A type with a `memory:` scope gets the memory tools, as Claude Code gives such a type the file
    tools to keep its memory with; a read-only type never gets `memory_write`. The tools of the
    MCP servers it names in `mcp_servers` are added. Names not `available` are dropped.
    """
    own = definition.tool_names
    if own is None:
        names = [n for n in parent_tools if n not in NEVER_INHERITED]
    else:
        names = [n for n in own if n not in NEVER_GIVEN]
    if definition.memory is not None:
        names += [*MEMORY_READING, "memory_write"]
    if definition.read_only:
        names = [n for n in names if n != "memory_write"]
    for server in definition.mcp_servers:
        names += [n for n in available if n.startswith(f"mcp__{server}__")]
    denied = set(definition.disallowed_tools)
    present = set(available)
    seen: set[str] = set()
    chosen: list[str] = []
    for name in names:
        if name in denied or name not in present or name in seen:
            continue
        seen.add(name)
        chosen.append(name)
    return chosen
