"""Subagent definitions and their catalogue.

Definitions come from code (`Subagent(...)`), from Markdown files with YAML front matter
(`<workspace>/.delegate/agents/*.md`, `--agents DIR`, and `.claude/agents/*.md`), and from the
built-in types. When two share a name, the later source wins:
built-ins < `.claude/agents` < `.delegate/agents` < `--agents` folders < a user's own (in
`delegate serve`, the same two folders in the user's workspace) < code.

Files are read as Claude Code reads them, and no file ever stops the catalogue: front matter that
is not strict YAML is read line by line (`delegate._frontmatter`), Claude Code's fields and tool
names are mapped, unknown fields are kept and warned about, and a file that cannot be a
definition is skipped with a `CatalogueWarning` naming it. The catalogue carries its warnings.

Which model a subagent runs on, first match wins:
1. its definition's `model`, when that is a model string (not `inherit`);
2. the runtime's `subagent_model` (a cheaper model for all subagents), when set;
3. the model of the agent that delegated (the lead's).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._empty import empty_dict, empty_list
from ._errors import UserError
from ._frontmatter import CatalogueWarning, Unreadable, read_front_matter
from ._record import ResultSchema
from .models import Model, ModelAliases
from .tools import BUILTIN_TOOLS, READ_ONLY_TOOLS, Tool
from .workspace import CommandRules

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

CLAUDE_TOOL_NAMES = {
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Grep": "grep",
    "Glob": "find_files",
    "LS": "list_dir",
    "Bash": "bash",
    "AskUserQuestion": "ask_user",
    "TodoWrite": "todo_write",
    "TodoRead": "todo_read",
}
"""Claude Code's tool names and the built-in tools that serve them."""

CLAUDE_UNSERVED = frozenset({
    "WebFetch", "WebSearch", "NotebookEdit", "NotebookRead", "Task", "Agent",
    "BashOutput", "KillShell", "KillBash", "SlashCommand", "ExitPlanMode", "Skill", "ListMcpResourcesTool",
    "ReadMcpResourceTool",
})  # fmt: skip
"""Claude Code's tools that delegate has no counterpart for: listed in a warning, never served."""

_BASH_RULE = re.compile(r"Bash\((.*)\)", re.DOTALL)
"""A `Bash(...)` entry of a tool list: its rule is group 1."""

PermissionMode = Literal["default", "acceptEdits", "bypassPermissions", "plan", "dontAsk"]
PERMISSION_MODES: tuple[str, ...] = ("default", "acceptEdits", "bypassPermissions", "plan", "dontAsk")


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


def tool_names(value: Any) -> Any:
    """`Read, Grep` or `Read Grep` (as Claude Code writes tools) or a list."""
    if isinstance(value, str):
        return [part for part in re.split(r"[,\s]+(?![^()]*\))", value) if part]
    return value


class _FrontMatter(BaseModel):
    """The fields of a definition. Claude Code's spellings are accepted; any other field is kept in
    `model_extra` and warned about. A new field is one line here (and one where it is used)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    tools: list[str] | None = None
    disallowed_tools: list[str] = Field(
        default_factory=empty_list, validation_alias=AliasChoices("disallowed_tools", "disallowedTools")
    )
    model: str = "inherit"
    compaction_model: str | None = Field(
        default=None, validation_alias=AliasChoices("compaction_model", "compactionModel")
    )
    max_steps: int = Field(default=30, ge=1, le=10_000, validation_alias=AliasChoices("max_steps", "maxTurns"))
    timeout: float | None = Field(default=600.0, gt=0)
    token_budget: int | None = Field(default=None, gt=0)
    cost_budget: float | None = Field(default=None, gt=0)
    stop_tools: list[str] = Field(default_factory=empty_list)
    skills: list[str] | None = None
    first_tool_choice: str | list[str] = "auto"
    permission_mode: PermissionMode | None = Field(
        default=None, validation_alias=AliasChoices("permission_mode", "permissionMode")
    )
    mcp_servers: list[str] = Field(
        default_factory=empty_list, validation_alias=AliasChoices("mcp_servers", "mcpServers")
    )
    project_context: bool = True
    output_schema: dict[str, Any] | None = None
    hooks: dict[str, Any] | None = None
    color: str | None = None  # Claude Code's colour in its UI; accepted and ignored
    isolation: Literal["overlay", "shared"] | None = None
    memory: MemoryScope | None = None
    max_depth: int | None = Field(default=None, ge=0, le=100, validation_alias=AliasChoices("max_depth", "maxDepth"))

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        """Claude Code writes the scope in lower case; `none` (or nothing) is no memory of its own."""
        if isinstance(value, str):
            value = value.strip().lower()
            return None if value in ("", "none") else value
        return value

    @field_validator("isolation", mode="before")
    @classmethod
    def _isolation(cls, value: Any) -> Any:
        """Claude Code's `worktree` is our `overlay` (a private copy, without git); `none` is `shared`."""
        if isinstance(value, str):
            value = value.strip().lower()
            return {"worktree": "overlay", "none": "shared"}.get(value, value)
        return value

    @field_validator("compaction_model", mode="before")
    @classmethod
    def _compaction_model(cls, value: Any) -> Any:
        """`inherit` (or nothing) is the runtime's compaction model."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "inherit")):
            return None
        return value.strip() if isinstance(value, str) else value

    @field_validator("tools", "skills", mode="before")
    @classmethod
    def _split_or_inherit(cls, value: Any) -> Any:
        return None if value is None or (isinstance(value, str) and not value.strip()) else tool_names(value)

    @field_validator("disallowed_tools", "stop_tools", "mcp_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [] if value is None else tool_names(value)

    @field_validator("name", "description", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return " ".join(value.split()) if isinstance(value, str) else value


_REQUIRED = ("name", "description")
_FIX = {
    "name": "give it a 'name:' of letters, digits, '-', '_' and '.'",
    "description": "give it a one-line 'description:' that says when the lead should use it",
}


def load_definition(
    path: Path, *, claude: bool = False, name: str | None = None, trusted: bool = False, hooks: bool = True
) -> Subagent:
    """Read one Markdown definition; `name` is how warnings call the file (default: its path).
    `trusted` (an operator's folder, which agents cannot write) lets it define MCP servers inline;
    `hooks=False` (a user's own folder) drops its hook commands, with a warning.
    Raises `Unreadable` (with its warning) for a file that cannot be a definition; whatever else is
    wrong is in the definition's `warnings`."""
    shown = name or str(path)
    front = read_front_matter(path, shown, "subagent definition")
    warnings = list(front.warnings)
    fields = dict(front.fields)
    if "name" not in fields and "description" in fields:
        fields["name"] = path.stem
        warnings.append(CatalogueWarning(shown, f"no 'name' field; named {path.stem!r} after the file"))
    inline = _inline_servers(fields, shown, warnings, trusted=trusted)
    parsed = _validate(fields, shown, warnings)
    extra = dict(parsed.model_extra or {})
    if extra:
        warnings.append(CatalogueWarning(shown, f"unknown field(s) {', '.join(sorted(extra))}: kept, not used"))
    tools, unavailable = map_tools(parsed.tools, shown, warnings, claude=claude)
    disallowed = map_tools(parsed.disallowed_tools, shown, [], claude=False)[0] or []
    allow, deny = bash_rules(parsed.tools), bash_rules(parsed.disallowed_tools)
    if _names_bash(parsed.tools):
        allow = ()  # plain Bash allows every command
    if deny and not _names_bash(parsed.disallowed_tools):
        disallowed.remove("bash")  # a rule refuses some commands, not the tool
    if parsed.hooks and not hooks:
        warnings.append(CatalogueWarning(shown, "hooks are not run from a user's own definitions; ignored"))
    if parsed.permission_mode == "plan":
        tools = [t for t in (tools if tools is not None else READ_ONLY_TOOLS) if t in READ_ONLY_TOOLS]
    if unavailable:
        warnings.append(
            CatalogueWarning(shown, f"tool(s) delegate cannot serve: {', '.join(unavailable)}; it runs without them")
        )
    try:
        definition = Subagent(
            name=parsed.name,
            description=parsed.description,
            instructions=front.body,
            tools=tools,
            disallowed_tools=disallowed,
            model=parsed.model,
            compaction_model=parsed.compaction_model,
            max_steps=parsed.max_steps,
            timeout=parsed.timeout,
            token_budget=parsed.token_budget,
            cost_budget=parsed.cost_budget,
            stop_tools=parsed.stop_tools,
            skills=parsed.skills,
            first_tool_choice=parsed.first_tool_choice,
            project_context=parsed.project_context,
            output_schema=parsed.output_schema,
            mcp_servers=[*parsed.mcp_servers, *inline],
            mcp_inline=inline,
            permission_mode=parsed.permission_mode,
            hooks=(parsed.hooks or {}) if hooks else {},
            isolation=parsed.isolation,
            memory=parsed.memory,
            max_depth=parsed.max_depth,
            command_rules=CommandRules(allow=allow, deny=deny),
            unavailable_tools=unavailable,
            extra=extra,
            warnings=warnings,
            source=shown,
        )
    except UserError as exc:
        raise Unreadable(CatalogueWarning(shown, f"{exc}; skipped")) from None
    return definition


def _validate(fields: dict[str, Any], shown: str, warnings: list[CatalogueWarning]) -> _FrontMatter:
    """The fields validated; a bad optional field is dropped with a warning, a bad required one
    makes the file unreadable."""
    for _ in range(len(fields) + 1):
        try:
            return _FrontMatter.model_validate(fields)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            key = str(error["loc"][0]) if error["loc"] else ""
            if key in _REQUIRED or key not in fields:
                missing = key or "front matter"
                raise Unreadable(
                    CatalogueWarning(shown, f"field {missing!r}: {error['msg']}; {_FIX.get(key, 'fix it')}; skipped")
                ) from None
            warnings.append(CatalogueWarning(shown, f"field {key!r}: {error['msg']}; ignored"))
            del fields[key]
    raise Unreadable(CatalogueWarning(shown, "front matter cannot be read; skipped"))  # pragma: no cover


def _inline_servers(
    fields: dict[str, Any], shown: str, warnings: list[CatalogueWarning], *, trusted: bool
) -> dict[str, dict[str, Any]]:
    """`mcpServers` as names (left in `fields`) and inline definitions (`- name: {command: ...}`,
    returned when `trusted`; otherwise not started, with a warning: a file an agent can write must
    not be able to start a process)."""
    key = next((k for k in ("mcpServers", "mcp_servers") if k in fields), None)
    value: Any = fields.get(key) if key else None
    if key is None or not isinstance(value, (dict, list)):
        return {}
    entries: list[Any] = (
        [{k: v} for k, v in cast(dict[str, Any], value).items()] if isinstance(value, dict) else cast(list[Any], value)
    )
    named: list[str] = []
    inline: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if isinstance(entry, str):
            named.append(entry)
        elif isinstance(entry, dict):
            for server, config in cast(dict[Any, Any], entry).items():
                if isinstance(config, dict):
                    inline[str(server)] = cast(dict[str, Any], config)
                else:
                    named.append(str(server))
    fields[key] = named
    if inline and not trusted:
        warnings.append(
            CatalogueWarning(
                shown,
                f"MCP server(s) {', '.join(inline)} defined inline are not started from a workspace folder; "
                "define them in the runtime's MCP config (--mcp-config) and name them here, or load this file "
                "with --agents DIR (a folder the operator names)",
            )
        )
        return {}
    return inline


def bash_rules(names: list[str] | None) -> tuple[str, ...]:
    """The rules inside each `Bash(...)` of a tool list, in order."""
    return tuple(
        rule
        for name in names or ()
        if (match := _BASH_RULE.fullmatch(name.strip())) and (rule := match.group(1).strip())
    )


def _names_bash(names: list[str] | None) -> bool:
    """Whether a tool list names the bash tool itself (`Bash` or `bash`), not a rule of it."""
    return any(CLAUDE_TOOL_NAMES.get(name.strip(), name.strip()) == "bash" for name in names or ())


def map_tools(
    names: list[str] | None, shown: str, warnings: list[CatalogueWarning], *, claude: bool
) -> tuple[list[str] | None, list[str]]:
    """Claude Code's tool names mapped to delegate's; `(tools, unavailable)`. A Claude name with a
    pattern maps to its tool: `Bash(git diff:*)` is enforced (see `bash_rules`), other tools'
    patterns are not, with a warning."""
    if names is None:
        return None, []
    tools: list[str] = []
    unavailable: list[str] = []
    for written in names:
        base = written.split("(", 1)[0].strip()
        if base != written and not _BASH_RULE.fullmatch(written.strip()):
            warnings.append(CatalogueWarning(shown, f"tool {written!r}: the pattern is not enforced; it gets {base}"))
        mapped = CLAUDE_TOOL_NAMES.get(base, base)
        served = mapped in BUILTIN_TOOLS or mapped in MEMORY_TOOLS or base.startswith("mcp__")
        if base in CLAUDE_UNSERVED or (claude and not served):
            unavailable.append(base)
        elif mapped not in tools:
            tools.append(mapped)
    return tools, unavailable


def load_folder(
    folder: Path, *, claude: bool = False, label: str = "", trusted: bool = False, hooks: bool = True
) -> tuple[list[Subagent], list[CatalogueWarning]]:
    """Every `*.md` definition in `folder`, sorted by file name, and the warnings of the files
    skipped or read with problems. A missing folder has none."""
    if not folder.is_dir():
        return [], []
    found: list[Subagent] = []
    warnings: list[CatalogueWarning] = []
    for path in sorted(folder.glob("*.md")):
        try:
            shown = f"{label}/{path.name}" if label else path.name
            definition = load_definition(path, claude=claude, name=shown, trusted=trusted, hooks=hooks)
        except Unreadable as exc:
            warnings.append(exc.warning)
            continue
        found.append(definition)
        warnings += definition.warnings
    return found, warnings


@dataclass(frozen=True)
class Catalogue:
    """The subagent types an agent may start, by name, and the warnings of the files read for it."""

    definitions: dict[str, Subagent]
    warnings: tuple[CatalogueWarning, ...] = ()

    @classmethod
    def build(
        cls,
        *,
        workspace: Path | None = None,
        agent_dirs: Sequence[Path] = (),
        own: Path | None = None,
        subagents: Iterable[Subagent] = (),
        builtins: bool = True,
        aliases: ModelAliases | None = None,
        user: Path | None = None,
    ) -> Catalogue:
        """Read every source (see the module's docstring). Only a missing `agent_dirs` folder is a
        `UserError`; a file that cannot be read is skipped with a warning, and every model string
        is checked here (through `aliases`), so a bad one is a warning now, not a failed task later.
        `own` is a user's workspace, whose definitions come after the operator's (`workspace`,
        `agent_dirs`). `user` is the operator's user-level folder (`~/.claude`), whose `agents/`
        come first, shadowed by all the others, as Claude Code reads them."""
        folders: list[tuple[Path, bool, str, bool]] = []  # folder, Claude's, label, the operator's
        if user is not None:
            folders.append((user / "agents", True, "~/.claude/agents", True))
        if workspace is not None:
            folders += [
                (workspace / ".claude" / "agents", True, ".claude/agents", False),
                (workspace / ".delegate" / "agents", False, ".delegate/agents", False),
            ]
        for folder in agent_dirs:
            if not Path(folder).is_dir():
                raise UserError(f"agents folder {str(folder)!r} does not exist")
            # the operator named it: trusted for what the operator put there; one inside the
            # workspace is read-only to agents (`Runtime` adds it to the view's read-only folders)
            folders.append((Path(folder), False, _label(Path(folder), workspace), True))
        if own is not None:
            folders += [
                (own / ".claude" / "agents", True, ".claude/agents", False),
                (own / ".delegate" / "agents", False, ".delegate/agents", False),
            ]
        found: dict[str, Subagent] = {d.name: d for d in (BUILTIN_SUBAGENTS if builtins else ())}
        warnings: list[CatalogueWarning] = []
        table = aliases or ModelAliases()
        for folder, claude, label, trusted in folders:
            users = own is not None and Path(folder).resolve().is_relative_to(own.resolve())  # a user's own: no hooks
            definitions, problems = load_folder(folder, claude=claude, label=label, trusted=trusted, hooks=not users)
            warnings += problems
            for definition in definitions:
                found[definition.name] = _resolve_model(definition, table, warnings)
        for definition in subagents:
            found[definition.name] = _resolve_model(definition, table, warnings)
        return cls(found, tuple(warnings))

    def visible(self, *, allow_commands: bool, permitted: Sequence[str] | None = None) -> Catalogue:
        """The types a caller may use: `permitted` is the caller's policy (None = all)."""
        return Catalogue(
            {
                name: d
                for name, d in self.definitions.items()
                if (permitted is None or name in permitted) and (allow_commands or not d.requires_commands)
            },
            self.warnings,
        )

    def __contains__(self, name: object) -> bool:
        return name in self.definitions

    def __len__(self) -> int:
        return len(self.definitions)

    def names(self) -> list[str]:
        return list(self.definitions)

    def get(self, name: str) -> Subagent | None:
        return self.definitions.get(name)

    def with_definition(self, definition: Subagent) -> Catalogue:
        return Catalogue({**self.definitions, definition.name: definition}, self.warnings)

    def with_warnings(self, warnings: Iterable[CatalogueWarning]) -> Catalogue:
        """The same types, with more warnings (a run's skills', for one report of both)."""
        return Catalogue(self.definitions, (*self.warnings, *warnings))


def _label(folder: Path, workspace: Path | None) -> str:
    """How files of an `--agents` folder are named: relative to the workspace when inside it,
    else by the folder's own name (never the server's absolute path)."""
    if workspace is not None:
        try:
            return folder.resolve().relative_to(workspace.resolve()).as_posix()
        except ValueError:
            pass
    return folder.resolve().name


def _resolve_model(definition: Subagent, aliases: ModelAliases, warnings: list[CatalogueWarning]) -> Subagent:
    """`definition` with its model strings resolved through `aliases`; a string that is no model is
    a warning, and the type runs on the lead's model (a bad compaction model: the runtime's)."""
    definition = _resolve_compaction_model(definition, aliases, warnings)
    if not isinstance(definition.model, str):
        return definition
    written = definition.model
    try:
        spec, aliased = aliases.resolve(written)
    except UserError as exc:
        problem = CatalogueWarning(definition.source, f"{exc}; it runs on the lead's model")
        warnings.append(problem)
        return replace(definition, model="inherit", written_model=written, warnings=[*definition.warnings, problem])
    if spec == written:
        return definition
    return replace(definition, model=spec, written_model=written, model_fallback=aliased)


def _resolve_compaction_model(
    definition: Subagent, aliases: ModelAliases, warnings: list[CatalogueWarning]
) -> Subagent:
    written = definition.compaction_model
    if not isinstance(written, str):
        return definition
    try:
        spec, _ = aliases.resolve(written)
    except UserError as exc:
        problem = CatalogueWarning(definition.source, f"compaction_model: {exc}; it compacts with the runtime's")
        warnings.append(problem)
        return replace(definition, compaction_model=None, warnings=[*definition.warnings, problem])
    return definition if spec == written else replace(definition, compaction_model=spec)


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
