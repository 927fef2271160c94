"""Skills: folders of instructions (a `SKILL.md` and whatever files it refers to) that an agent
finds in an index and activates when it needs them.

Where they come from, later shadowing earlier by name: the operator's folder (`<root>/.claude/skills/*/
SKILL.md` < `<root>/.delegate/skills/*/SKILL.md`) < each `skills_dirs` folder < a user's own folder
(`<own>/.claude/skills` < `<own>/.delegate/skills`: in `delegate serve`, the user's workspace). The
agent sees each skill it may use, read-only, at `.delegate/skills/<name>/` of its workspace (a
mount of the workspace's view, wherever the folder really is), so it reads a skill with
`read_file`, like any file, and can change none.

Activation is lazy: the system prompt carries only the index (name, description, path). A skill is
active once the agent reads its `SKILL.md` with `read_file`, or when a task starts with `/<name>`
(its body is then put before the task). Only then does the skill's `allowed-tools` narrow the
agent's tools; a skill never activated narrows nothing. A subagent's `skills` allowlist decides
what it can find and activate (None: every skill, []: none); it does not hide files.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .._errors import UserError, WorkspaceError
from .._messages import Message, ToolCallPart, ToolResultPart
from ..agents import (
    CLAUDE_TOOL_NAMES,
    NAME,
    NEVER_GIVEN,
    CatalogueWarning,
    Unreadable,
    bash_rules,
    display_name,
    map_tools,
    read_front_matter,
    tool_names,
)
from ..tools import BUILTIN_TOOLS
from ..workspace import Mount, Workspace

ALWAYS_ALLOWED = frozenset({"complete", "tool_search"})
"""Tools an active skill never takes away: the way to finish, and the way to find deferred tools."""

KNOWN_TOOLS = frozenset({*BUILTIN_TOOLS, *CLAUDE_TOOL_NAMES.values(), *ALWAYS_ALLOWED, *NEVER_GIVEN})
"""Tool names a skill's `allowed-tools` may give without a warning (besides `mcp__` tools)."""

KNOWN_FIELDS = frozenset({"name", "description", "allowed-tools", "allowed_tools", "license", "metadata", "version"})
"""`SKILL.md` fields read or kept quietly (Anthropic's skills carry `license`); others are warned about."""
SKILLS_AT = ".delegate/skills"
"""Where agents see skills in their workspace (inside the hidden `.delegate`, mounted read-only)."""


_SLASH = re.compile(r"/([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\s|$)")
"""A task that starts with a skill's `/<name>`."""


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    path: str
    """Its `SKILL.md` as agents see it: `.delegate/skills/<name>/SKILL.md`."""
    body: str
    folder: Path
    """The real folder it was read from (mounted read-only at `.delegate/skills/<name>`)."""
    allowed_tools: tuple[str, ...] | None = None
    """The tools it allows once active; None leaves the agent's tools as they are."""
    extra: tuple[tuple[str, Any], ...] = ()
    """Front-matter fields besides name, description and allowed-tools, kept as written."""


class SkillCatalogue:
    """The skills one user can use in one workspace, by name, and the warnings of the files read."""

    def __init__(self, skills: dict[str, Skill], warnings: Sequence[CatalogueWarning] = ()) -> None:
        self.skills = skills
        self.warnings = list(warnings)

    @classmethod
    def build(
        cls,
        root: Path,
        *,
        dirs: Sequence[str | Path] = (),
        own: Path | None = None,
        user: Path | None = None,
        disabled: Collection[str] = (),
    ) -> SkillCatalogue:
        """Read every source in order (later ones shadow earlier ones): `user`'s `skills/` (the
        operator's `~/.claude`), `root`'s folders, `dirs`, then `own`'s. A `SKILL.md` that cannot
        be read is skipped with a warning naming it (relative to its folder, never by the server's
        path); a missing `dirs` folder is a `UserError`. The skills named in `disabled` (after
        shadowing: the name the user sees) are left out (see `_enabled.py`)."""
        sources: list[tuple[Path, bool, Path]] = [(user / "skills", True, user)] if user is not None else []
        sources += [(root / ".claude" / "skills", True, root), (root / ".delegate" / "skills", False, root)]
        for folder in dirs:
            if not Path(folder).is_dir():
                raise UserError(f"skills folder {str(folder)!r} does not exist: pass a folder of skills")
            sources.append((Path(folder), False, Path(folder).parent))
        if own is not None:
            sources += [(own / ".claude" / "skills", True, own), (own / ".delegate" / "skills", False, own)]
        skills: dict[str, Skill] = {}
        warnings: list[CatalogueWarning] = []
        for folder, claude, base in sources:
            for file in sorted(folder.glob("*/SKILL.md")) if folder.is_dir() else []:
                try:
                    skill = load_skill(file, base, claude=claude, warnings=warnings)
                except Unreadable as exc:
                    warnings.append(exc.warning)
                    continue
                skills[skill.name] = skill
        return cls({name: s for name, s in skills.items() if name not in disabled}, warnings)

    def mounts(self) -> list[Mount]:
        """Where agents see the skills: each one's folder, read-only, at `.delegate/skills/<name>`."""
        return [Mount(at=f"{SKILLS_AT}/{s.name}", source=s.folder) for s in self.skills.values()]

    def __len__(self) -> int:
        return len(self.skills)

    def allowed(self, allowlist: Sequence[str] | None) -> list[Skill]:
        """The skills an agent with `allowlist` can find and activate."""
        if allowlist is None:
            return list(self.skills.values())
        return [self.skills[name] for name in allowlist if name in self.skills]

    def index(self, allowlist: Sequence[str] | None) -> str:
        """The system prompt's part: how to use skills, and each one's name, description and path."""
        skills = self.allowed(allowlist)
        if not skills:
            return ""
        lines = [
            "Skills: instructions for particular kinds of work. When one fits your task, read its "
            "SKILL.md with read_file before you start, and follow it. Available skills:"
        ]
        lines += [f"- {s.name}: {s.description} ({s.path})" for s in skills]
        return "\n".join(lines)

    def slash_command(self, text: str, allowlist: Sequence[str] | None) -> Message | None:
        """For a task that starts with `/<name>` of an allowed skill: the hidden message that
        carries the skill's body, to put before the task. Anything else: None."""
        found = _SLASH.match(text.lstrip()) if self.skills else None
        if found is None:
            return None
        skill = next((s for s in self.allowed(allowlist) if s.name == found.group(1)), None)
        if skill is None:
            return None
        return Message.user(
            f"Skill {skill.name} ({skill.path}):\n\n{skill.body}", name=f"skill:{skill.name}", hidden=True
        )

    def gate(self, workspace: Workspace, allowlist: Sequence[str] | None) -> SkillGate | None:
        """The loop's gate for an agent with `allowlist`; None when no skill could narrow its tools."""
        skills = [s for s in self.allowed(allowlist) if s.allowed_tools is not None]
        return SkillGate(skills, workspace) if skills else None


class SkillGate:
    """Narrows an agent's tools to what its active skills allow (see the module's docstring)."""

    def __init__(self, skills: list[Skill], workspace: Workspace) -> None:
        self.skills = {s.name: s for s in skills}
        self.by_path = {s.path: s for s in skills}
        self.workspace = workspace
        self._active: list[Skill] = []

    def visible(self, messages: list[Message], names: list[str]) -> list[str]:
        self._active = self.active(messages)
        if not self._active:
            return names
        allowed = set(ALWAYS_ALLOWED).union(*(s.allowed_tools or () for s in self._active))
        return [name for name in names if name in allowed]

    def why_hidden(self, name: str) -> str:
        active = ", ".join(s.name for s in self._active)
        return f"{name} is not among the tools the active skill(s) {active} allow"

    def active(self, messages: list[Message]) -> list[Skill]:
        """The skills activated so far: by a `/<name>` task, or by a successful read of SKILL.md."""
        found: dict[str, Skill] = {}
        reads: dict[str, str] = {}
        for message in messages:
            if message.name and message.name.startswith("skill:") and message.name[6:] in self.skills:
                found.setdefault(message.name[6:], self.skills[message.name[6:]])
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.name == "read_file":
                    path = part.arguments.get("path")
                    if isinstance(path, str):
                        reads[part.id] = path
                elif isinstance(part, ToolResultPart) and part.tool_call_id in reads and not part.is_error:
                    skill = self._skill_at(reads[part.tool_call_id])
                    if skill is not None:
                        found.setdefault(skill.name, skill)
        return list(found.values())

    def _skill_at(self, path: str) -> Skill | None:
        try:
            with self.workspace.locate(path) as at:
                return self.by_path.get(at.rel)
        except WorkspaceError:
            return None


def load_skill(
    file: Path, root: Path, *, claude: bool = False, warnings: list[CatalogueWarning] | None = None
) -> Skill:
    """Read one `SKILL.md` (front matter: `name`, default its folder's name, `description`, optional
    `allowed-tools`, in Claude Code's tool names when `claude`). Raises `Unreadable` for a file
    that cannot be a skill; problems it survives are added to `warnings`."""
    shown = display_name(file, root, "")
    problems = warnings if warnings is not None else []
    front = read_front_matter(file, shown, "skill")
    problems += front.warnings
    fields = front.fields
    name, description = fields.get("name", file.parent.name), fields.get("description")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise Unreadable(
            CatalogueWarning(shown, "field 'name': use letters, digits, '-', '_' and '.' (at most 64); skipped")
        )
    if not isinstance(description, str) or not description.strip():
        raise Unreadable(
            CatalogueWarning(shown, "field 'description': say in one line when the skill is useful; skipped")
        )
    tools = _allowed_tools(fields.get("allowed-tools", fields.get("allowed_tools")), shown, problems, claude=claude)
    unknown = sorted(set(fields) - KNOWN_FIELDS)
    if unknown:
        problems.append(CatalogueWarning(shown, f"unknown field(s) {', '.join(unknown)}: kept, not used"))
    return Skill(
        name=name,
        description=" ".join(description.split()),
        path=f"{SKILLS_AT}/{name}/SKILL.md",
        body=front.body,
        folder=file.parent,
        allowed_tools=tools,
        extra=tuple((k, v) for k, v in fields.items() if k not in ("name", "description", "allowed-tools")),
    )


def _allowed_tools(
    value: object, shown: str, problems: list[CatalogueWarning], *, claude: bool
) -> tuple[str, ...] | None:
    """A skill's `allowed-tools`, read as an agent definition's `tools` is (`_agents.map_tools`):
    Claude Code's names (`Read`, `Write`, `Edit`, `Grep`, `Glob`, `LS`, `Bash`) become delegate's,
    `Bash(git diff:*)` becomes `bash`, and every name that is neither a built-in tool nor a known
    one is warned about. A skill only narrows what an agent has, so a `Bash(...)` rule keeps the
    whole `bash` tool visible while the skill is active: its pattern is not enforced there (the
    agent's own command rules are), and the warning says so."""
    names = tool_names(value)
    if names is None:
        return None
    if not (isinstance(names, list) and all(isinstance(t, str) for t in cast(list[Any], names))):
        problems.append(CatalogueWarning(shown, "field 'allowed-tools': not a list of tool names; ignored"))
        return None
    written = [t.strip() for t in cast(list[str], names) if t.strip()]
    for rule in bash_rules(written):
        problems.append(
            CatalogueWarning(
                shown,
                f"allowed-tools: Bash({rule}) lets the skill keep bash, but its pattern is not enforced by a "
                "skill (the agent's own command rules are): write the rule in the agent's definition",
            )
        )
    tools, unavailable = map_tools(written, shown, problems, claude=claude)
    unknown = [t for t in tools or () if t not in KNOWN_TOOLS and not t.startswith("mcp__")]
    if unavailable:
        problems.append(
            CatalogueWarning(shown, f"allowed-tools: delegate has no tool(s) {', '.join(unavailable)}; left out")
        )
    if unknown:
        problems.append(
            CatalogueWarning(
                shown,
                f"allowed-tools: {', '.join(map(repr, unknown))} is no built-in tool or Claude Code tool name; kept, "
                "so it allows a tool of that name given in code (check the spelling otherwise)",
            )
        )
    return tuple(tools or ())
