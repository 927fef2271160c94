"""Reading definition files as Claude Code reads them: `load_definition` (one Markdown file with
YAML front matter), `load_folder` (every `*.md` of a folder), and Claude Code's tool names mapped
to delegate's (`map_tools`, `bash_rules`).

No file ever stops the catalogue: front matter that is not strict YAML is read line by line
(`_frontmatter.py`), Claude Code's fields and tool names are mapped, unknown fields are kept and
warned about, and a file that cannot be a definition is skipped with a `CatalogueWarning` naming it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._empty import empty_list
from .._errors import UserError
from ..permissions import PermissionMode
from ..tools import BUILTIN_TOOLS, READ_ONLY_TOOLS
from ..workspace import CommandRules
from ._definitions import MEMORY_TOOLS, MemoryScope, Subagent
from ._frontmatter import CatalogueWarning, Unreadable, read_front_matter

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
