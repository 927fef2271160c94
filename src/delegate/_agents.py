"""Subagent definitions and their catalogue.

Definitions come from code (`Subagent(...)`), from Markdown files with YAML front matter
(`<workspace>/.delegate/agents/*.md`, `--agents DIR`, and `.claude/agents/*.md` with Claude's tool
names mapped), and from the built-in types. When two share a name, the later source wins:
built-ins < `.claude/agents` < `.delegate/agents` < `--agents` folders < code.

Which model a subagent runs on, first match wins:
1. its definition's `model`, when that is a model string (not `inherit`);
2. the runtime's `subagent_model` (a cheaper model for all subagents), when set;
3. the model of the agent that delegated (the lead's).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._errors import UserError
from .models import Model
from .tools import READ_ONLY_TOOLS

NEVER_INHERITED = frozenset({"task", "batch_task", "batch_status", "cancel_batch", "ask_user", "present_files"})
"""Tools a subagent does not get by inheriting its parent's set. `task` is never given at all (no
nesting); `ask_user` and `present_files` only when a definition lists them explicitly."""

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
}


@dataclass(kw_only=True)
class Subagent:
    """A type of subagent the lead can start with `task`.

    `tools=None` inherits the parent's tools (less `task` and the ask-the-user and present-files
    tools); a list names exactly the tools it gets. `skills=None` inherits every skill, `[]` none.
    `stop_tools` names tools whose successful call also ends the subagent, besides `complete`.
    `first_tool_choice` is `auto`, `required` (the first turn must call a tool) or the name of the
    tool the first turn must call, or a list of these for the first turns in order: a weak model
    then takes the steps of its work in their order (`["read_file", "write_file"]`).
    """

    name: str
    description: str
    instructions: str = ""
    tools: list[str] | None = None
    disallowed_tools: list[str] = field(default_factory=list[str])
    model: str | Model = "inherit"
    max_steps: int = 30
    timeout: float | None = 600.0
    token_budget: int | None = None
    stop_tools: list[str] = field(default_factory=list[str])
    skills: list[str] | None = None
    requires_commands: bool = False
    first_tool_choice: str | list[str] = "auto"
    source: str = "code"

    def to_dict(self) -> dict[str, Any]:
        """The definition as `delegate agents list --json` and `GET /agents` show it."""
        return {
            "name": self.name,
            "description": self.description,
            "tools": self.tools,
            "disallowed_tools": self.disallowed_tools,
            "model": self.model if isinstance(self.model, str) else self.model.name,
            "max_steps": self.max_steps,
            "timeout": self.timeout,
            "token_budget": self.token_budget,
            "skills": self.skills,
            "requires_commands": self.requires_commands,
            "first_tool_choice": self.first_tool_choice,
            "source": self.source,
        }

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise UserError(f"subagent name {self.name!r} is not valid: use letters, digits, '-' and '_' (at most 64)")
        if self.max_steps < 1:
            raise UserError(f"subagent {self.name!r}: max_steps must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise UserError(f"subagent {self.name!r}: timeout must be positive seconds")


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

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
        tools=list(READ_ONLY_TOOLS),
        source="builtin",
    ),
    Subagent(
        name="bash",
        description="Command runner: runs shell commands in the workspace (builds, tests, git) and reports.",
        instructions="Run the commands needed for the task, check their exit codes, and report what happened.",
        tools=["bash", "read_file", "list_dir"],
        requires_commands=True,
        source="builtin",
    ),
)


class _FrontMatter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = Field(min_length=1)
    tools: list[str] | None = None
    disallowed_tools: list[str] = Field(default_factory=list[str])
    model: str = "inherit"
    max_steps: int = Field(default=30, ge=1, le=10_000)
    timeout: float | None = Field(default=600.0, gt=0)
    token_budget: int | None = Field(default=None, gt=0)
    stop_tools: list[str] = Field(default_factory=list[str])
    skills: list[str] | None = None
    first_tool_choice: str | list[str] = "auto"
    color: str | None = None  # Claude's UI colour; accepted and ignored

    @field_validator("tools", "disallowed_tools", "stop_tools", "skills", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


def read_front_matter(path: Path, kind: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter (between `---` lines) of a Markdown file, and the body after it.
    Raises `UserError` naming the file, for a `kind` of file ("subagent definition", "skill")."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read {kind}: {exc}") from None
    match = re.match(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", text, re.S)
    if match is None:
        raise UserError(f"{path}: a {kind} starts with YAML front matter between '---' lines")
    try:
        meta: object = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: front matter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path}: front matter must be a mapping of fields")
    return cast(dict[str, Any], meta), match.group(2).strip()


def load_definition(path: Path, *, claude: bool = False) -> Subagent:
    """Read one Markdown definition. Raises `UserError` naming the file and the field."""
    meta, body = read_front_matter(path, "subagent definition")
    try:
        front = _FrontMatter.model_validate(meta)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "front matter"
        raise UserError(f"{path}: field {where!r}: {first['msg']}") from None
    tools = front.tools
    if claude and tools is not None:
        tools = [CLAUDE_TOOL_NAMES[t] for t in tools if t in CLAUDE_TOOL_NAMES]
    disallowed = front.disallowed_tools
    if claude:
        disallowed = [CLAUDE_TOOL_NAMES.get(t, t) for t in disallowed]
    try:
        return Subagent(
            name=front.name,
            description=front.description,
            instructions=body,
            tools=tools,
            disallowed_tools=disallowed,
            model=front.model,
            max_steps=front.max_steps,
            timeout=front.timeout,
            token_budget=front.token_budget,
            stop_tools=front.stop_tools,
            skills=front.skills,
            first_tool_choice=front.first_tool_choice,
            source=str(path),
        )
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None


def load_folder(folder: Path, *, claude: bool = False) -> list[Subagent]:
    """Every `*.md` definition in `folder`, sorted by file name. A missing folder has none."""
    if not folder.is_dir():
        return []
    return [load_definition(p, claude=claude) for p in sorted(folder.glob("*.md"))]


@dataclass(frozen=True)
class Catalogue:
    """The subagent types an agent may start, by name."""

    definitions: dict[str, Subagent]

    @classmethod
    def build(
        cls,
        *,
        workspace: Path | None = None,
        agent_dirs: Sequence[Path] = (),
        subagents: Iterable[Subagent] = (),
        builtins: bool = True,
    ) -> Catalogue:
        found: dict[str, Subagent] = {}
        layers: list[Iterable[Subagent]] = [BUILTIN_SUBAGENTS if builtins else ()]
        if workspace is not None:
            layers.append(load_folder(workspace / ".claude" / "agents", claude=True))
            layers.append(load_folder(workspace / ".delegate" / "agents"))
        for folder in agent_dirs:
            if not Path(folder).is_dir():
                raise UserError(f"agents folder {str(folder)!r} does not exist")
            layers.append(load_folder(Path(folder)))
        layers.append(subagents)
        for layer in layers:
            for definition in layer:
                found[definition.name] = definition
        return cls(found)

    def visible(self, *, allow_commands: bool, permitted: Sequence[str] | None = None) -> Catalogue:
        """The types a caller may use: `permitted` is the caller's policy (None = all)."""
        return Catalogue(
            {
                name: d
                for name, d in self.definitions.items()
                if (permitted is None or name in permitted) and (allow_commands or not d.requires_commands)
            }
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
        return Catalogue({**self.definitions, definition.name: definition})


def tools_for(definition: Subagent, parent_tools: Sequence[str], available: Sequence[str]) -> list[str]:
    """The tool names a subagent of `definition` gets (before `complete` is added).

    Inherited sets drop `task`, the batch tools, and ask-the-user/present-files; an explicit list
    may name ask-the-user/present-files, never `task`. Names not `available` are dropped.
    """
    if definition.tools is None:
        names = [n for n in parent_tools if n not in NEVER_INHERITED]
    else:
        names = [n for n in definition.tools if n not in NEVER_GIVEN]
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
