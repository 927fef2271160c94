"""The catalogue: the subagent types an agent may start, by name, read from every source.

Definitions come from code (`Subagent(...)`), from Markdown files with YAML front matter
(`<workspace>/.delegate/agents/*.md`, `--agents DIR`, and `.claude/agents/*.md`), and from the
built-in types. When two share a name, the later source wins:
built-ins < `.claude/agents` < `.delegate/agents` < `--agents` folders < a user's own (in
`delegate serve`, the same two folders in the user's workspace) < code. Every model string is
resolved through the runtime's aliases here. The catalogue carries its files' warnings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .._errors import UserError
from ..models import ModelAliases
from ._definitions import BUILTIN_SUBAGENTS, Subagent
from ._files import load_folder
from ._frontmatter import CatalogueWarning


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
