"""A run's gates: every rule that can stop a call (the `--allow`/`--ask`/`--deny` rules and the
permission mode of `Permissions`, the command hooks of the operator's settings files and of
definitions, and hooks in code). `Gates` holds them compiled: a runtime builds its own once.

A run's gates are the run's: they are stored with it as its limits are (`Gates.stored`, the
`gates` of its row), and a process that resumes it or takes it over (`delegate run --resume`,
another `delegate serve`, a `delegate batch worker`) runs it under them, read back and checked
(`tightened`). Its own rules may add to them, never take from them: a resume may add `ask` and
`deny` rules, command hooks and a stricter mode; an `allow` rule or a looser mode it gives is not
applied, and it says so (a warning of the run). Hooks in code cannot be stored: a run that had them
is resumed only by code that gives hooks again. The approval timeout is one of the run's limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._errors import UserError
from ..permissions import CallPolicy, CommandHook, PermissionMode, Permissions, Rule, command_hooks, read_settings
from ..tools import HookSet

if TYPE_CHECKING:
    from ..agents import Catalogue
    from ..workspace import Workspace

_STRICTNESS: dict[str | None, int] = {
    "bypassPermissions": 0,
    "acceptEdits": 1,
    None: 2,
    "default": 2,
    "dontAsk": 3,
    "plan": 4,
}
"""How much each permission mode lets through, least first (`plan` runs nothing that changes)."""


@dataclass(frozen=True, slots=True)
class HookSource:
    """Command hooks as they were read: a `hooks` object in Claude Code's format, the file it came
    from, and the subagent type it is for (None: every agent)."""

    hooks: Mapping[str, Any]
    file: str
    scope: str | None = None

    def commands(self) -> list[CommandHook]:
        return command_hooks(self.hooks, self.file, scope=self.scope)

    def to_dict(self) -> dict[str, Any]:
        return {"hooks": dict(self.hooks), "file": self.file, "scope": self.scope}


@dataclass(frozen=True, kw_only=True, eq=False)
class Gates:
    """What can stop a call of a run: its permission rules and mode (`permissions`, compiled as
    `policy`), its command hooks (`sources`) and all its hooks (`hooks`, None: none). See
    docs/approvals.md."""

    permissions: Permissions
    policy: CallPolicy
    hooks: HookSet | None = None
    sources: tuple[HookSource, ...] = ()
    folder: str = "."
    """Where command hooks run: the operator's folder."""

    @classmethod
    def build(
        cls, given: Permissions | None, folder: Path, catalogue: Catalogue, shared: Path | None, workspace: Workspace
    ) -> Gates:
        """`given` with the rules and hooks of the operator's settings files in `folder` (unless
        it says not to read them) and the hooks of each definition of `catalogue`, the commands
        run in the operator's folder (`shared` under `delegate serve`, else the workspace)."""
        permissions, settings = load_permissions(given, folder)
        sources = [HookSource(entry["hooks"], entry["file"]) for entry in settings]
        for definition in catalogue.definitions.values():
            if definition.hooks:
                sources.append(HookSource(definition.hooks, definition.source, definition.name))
        return cls.of(permissions, sources, str(shared or workspace.root))

    @classmethod
    def of(cls, permissions: Permissions, sources: Sequence[HookSource], folder: str) -> Gates:
        """Gates of these rules and command hooks (a `UserError` for hooks that cannot be read)."""
        commands = [hook for source in sources for hook in source.commands()]
        policy = CallPolicy.compile(permissions)
        hooks = HookSet(permissions.hooks, commands, folder, policy) if commands or permissions.hooks else None
        return cls(permissions=permissions, policy=policy, hooks=hooks, sources=tuple(sources), folder=folder)

    @property
    def active(self) -> bool:
        """Whether any rule, mode or hook may act on a call (else no tool is wrapped at all)."""
        return bool(self.permissions) or self.hooks is not None

    def stored(self) -> dict[str, Any]:
        """What the store keeps with a run (`StoredGates`'s shape): its rules, mode and command
        hooks, and whether it had hooks in code (those cannot be kept)."""
        p = self.permissions
        return {
            "allow": list(p.allow),
            "ask": list(p.ask),
            "deny": list(p.deny),
            "mode": p.mode,
            "hooks": [s.to_dict() for s in self.sources],
            "code_hooks": p.hooks is not None,
        }


class _StoredSource(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    hooks: dict[str, Any]
    file: str
    scope: str | None = None


class StoredGates(BaseModel):
    """A run's gates as the store keeps them (`Gates.stored`), checked when read back."""

    model_config = ConfigDict(extra="ignore", strict=True)
    allow: list[str] = Field(default_factory=list[str])
    ask: list[str] = Field(default_factory=list[str])
    deny: list[str] = Field(default_factory=list[str])
    mode: PermissionMode | None = None
    hooks: list[_StoredSource] = Field(default_factory=list["_StoredSource"])
    code_hooks: bool = False


def read_stored(data: Mapping[str, Any]) -> StoredGates:
    """A run's stored gates, validated (rules parsed, hooks read): a `UserError` if they cannot
    be, and the run is not resumed (it would run without the rules it was started under)."""
    try:
        stored = StoredGates.model_validate(dict(data))
        for text in (*stored.allow, *stored.ask, *stored.deny):
            Rule.parse(text)
        for source in stored.hooks:
            command_hooks(source.hooks, source.file, scope=source.scope)
    except (ValidationError, UserError) as exc:
        raise UserError(
            f"the run's stored rules cannot be read back ({str(exc).splitlines()[0]}); it is not resumed without them"
        ) from None
    return stored


def tightened(given: Gates, data: Mapping[str, Any]) -> tuple[Gates, list[str]]:
    """The gates a resumed run runs under: those it was started with (`data`, as stored) with the
    `ask` and `deny` rules, command hooks and stricter mode of `given` (the resuming process's)
    added; and what of `given` was not applied, said (see the module). `UserError` for stored
    gates that cannot be read back, or for a run that had hooks in code resumed without any."""
    stored = read_stored(data)
    mine = given.permissions
    said: list[str] = []
    looser = [rule for rule in mine.allow if rule not in stored.allow]
    if looser:
        listed = " ".join(f"--allow {rule}" for rule in looser)
        said.append(
            f"{listed}: not applied on resume; the run keeps the rules it was started with (a resume may add "
            "--ask and --deny rules, never loosen them)"
        )
    mode = stored.mode
    if _STRICTNESS[mine.mode] > _STRICTNESS[mode]:
        mode = mine.mode
    elif mine.mode is not None and _STRICTNESS[mine.mode] < _STRICTNESS[mode]:
        said.append(f"permission mode {mine.mode}: not applied on resume; the run keeps {mode or 'default'} (kept)")
    if stored.code_hooks and mine.hooks is None:
        raise UserError(
            "the run was started with hooks in code (Permissions(hooks=...)), which the store cannot keep: "
            "resume it from code that gives them again"
        )
    permissions = Permissions(
        allow=stored.allow,
        ask=_union(stored.ask, mine.ask),
        deny=_union(stored.deny, mine.deny),
        mode=mode,
        settings_files=False,
        hooks=mine.hooks,
    )
    sources = [HookSource(s.hooks, s.file, s.scope) for s in stored.hooks]
    kept = {(s.file, s.scope, repr(s.hooks)) for s in sources}
    sources += [s for s in given.sources if (s.file, s.scope, repr(s.hooks)) not in kept]
    return Gates.of(permissions, sources, given.folder), said


def _union(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*first, *second]))


def load_permissions(given: Permissions | None, folder: Path) -> tuple[Permissions, list[dict[str, Any]]]:
    """`given` merged with the rules of the settings files of `folder` (the operator's), and those
    files' command hooks; only `given` when it says not to read them."""
    given = given or Permissions()
    if not given.settings_files:
        return given, []
    found, hooks = read_settings(folder)
    return given.merged(found), hooks
