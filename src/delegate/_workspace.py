"""The workspace: the view of the file system that every tool of an agent works in, and the
policy for the commands it runs.

A `Workspace` is a view, not just a folder. Its `root` is the one place agents may write. Inside
it, `hidden` folders do not exist for agents (by default `.delegate/`, where the store and the
definitions live), `read_only` folders can be read but not changed (by default `.claude/agents`
and `.claude/skills`, definitions), and `mounts` show folders from elsewhere, read-only, at a
path of the view (the skills a run may use, under `.delegate/skills/<name>`). Every tool resolves
paths through `Workspace.resolve` (the file tools, `complete`'s paths, acceptance checks), and
the command sandbox builds its mounts from the same fields (`tools/_sandbox.py`), so what an agent
can reach follows from the view, in one place.
"""

from __future__ import annotations

import errno
import os
import posixpath
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from ._command_limits import CommandLimits
from ._command_rules import CommandRules
from ._errors import UserError, WorkspaceError

HIDDEN = (".delegate",)
"""Folders of a workspace that agents never see: the store, definitions, other users' folders."""
READ_ONLY = (".claude/agents", ".claude/skills")
"""Folders of a workspace that agents may read but not change: definitions that runs load."""
COMMAND_ENV = ("PATH", "HOME", "LANG", "TERM")
"""The environment variables a command gets from ours, besides those the operator names."""


@dataclass(frozen=True, slots=True)
class Mount:
    """A real folder that agents see, read-only, at `at` (a path of the view, relative to the root)."""

    at: str
    source: Path


@dataclass(frozen=True, slots=True)
class CommandPolicy:
    """How agents' commands run. The sandbox (bubblewrap) is on unless the operator turns it off.

    `network` lets commands reach the network; `env` names variables of ours they may see besides
    `COMMAND_ENV`; `sandbox=False` runs them unconfined, as the operator's own user (say so loudly).
    `bwrap` is the bubblewrap program (a name looked up on PATH, or a path). `rules` are the
    `Bash(...)` rules of the subagent type that runs the commands (see `_command_rules.py`).
    """

    sandbox: bool = True
    network: bool = False
    env: tuple[str, ...] = ()
    bwrap: str = "bwrap"
    rules: CommandRules = field(default_factory=CommandRules)
    limits: CommandLimits = field(default_factory=CommandLimits)


@dataclass(frozen=True, slots=True)
class Workspace:
    """The root folder shared by a lead agent and all its subagents, as agents see it.

    `allow_commands` switches on the `bash` tool and command-running acceptance checks, run as
    `commands` says. `outputs` is an optional second folder, under the root, where deliverables are
    expected. `hidden`, `read_only` and `mounts` shape the view (see the module's docstring).
    """

    root: Path
    allow_commands: bool = False
    outputs: Path | None = None
    hidden: tuple[str, ...] = HIDDEN
    read_only: tuple[str, ...] = READ_ONLY
    mounts: tuple[Mount, ...] = ()
    commands: CommandPolicy = field(default_factory=CommandPolicy)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        allow_commands: bool = False,
        commands: CommandPolicy | None = None,
    ) -> Workspace:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise UserError(f"workspace {str(path)!r} is not a folder: create it or pass --workspace DIR")
        return cls(root=path.resolve(), allow_commands=allow_commands, commands=commands or CommandPolicy())

    def with_mounts(self, mounts: list[Mount]) -> Workspace:
        """This view with `mounts` added (each must lie inside a hidden folder of the view)."""
        for mount in mounts:
            if not any(_under_rel(mount.at, h) for h in self.hidden):
                raise ValueError(f"mount {mount.at!r} is not inside a hidden folder of the workspace")
        return replace(self, mounts=(*self.mounts, *mounts))

    def resolve(self, path: str | os.PathLike[str], *, write: bool = False) -> Path:
        """The real path of `path` (workspace-relative, or absolute inside the root), refused with a
        `WorkspaceError` if it leaves the view, lies in a hidden folder, or (with `write`) in a
        read-only one or a mount.

        Symlinks are followed, and the checks apply to where they lead: a link to a hidden folder
        is refused like the folder. On a symlink loop `realpath` gives up and returns the rest of
        the path unresolved (and its handling changed in Python 3.13), so we trust only a fixed
        point: a result that `realpath` changes again, that `stat` finds looping, or that still
        holds `..` is refused.
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise WorkspaceError(f"path {text!r} contains a NUL byte")
        rel, lexical = self._view_path(text)
        mount = self._mount_of(lexical) if ".." not in PurePosixPath(rel).parts else None
        if mount is not None:
            if write:
                raise WorkspaceError(f"{lexical} is read-only: it is a definition that runs load")
            source = Path(os.path.realpath(mount.source))
            real = _real(text, source / posixpath.relpath(lexical, mount.at))
            if real != source and not real.is_relative_to(source):
                raise WorkspaceError(f"path {text!r} is outside the workspace {str(self.root)!r}")
            return real
        real = _real(text, self.root / rel)
        if real != self.root and not real.is_relative_to(self.root):
            raise WorkspaceError(f"path {text!r} is outside the workspace {str(self.root)!r}")
        inside = real.relative_to(self.root).as_posix()
        if any(_under_rel(inside, h) for h in self.hidden):
            if self._mount_of(inside) is None:  # a real path under a mount's place is not the mount
                raise WorkspaceError(f"path {text!r} is not part of the workspace: {inside} is internal state")
            raise WorkspaceError(f"path {text!r} goes through a link into internal state; use {inside}")
        if write and any(_under_rel(inside, r) for r in self.read_only):
            raise WorkspaceError(f"{inside} is read-only: it is a definition that runs load")
        return real

    def relative(self, path: Path) -> str:
        """`path` (a real path from `resolve`) as the workspace-relative spelling shown to models."""
        for mount in self.mounts:
            source = Path(os.path.realpath(mount.source))
            if path == source or path.is_relative_to(source):
                rest = path.relative_to(source).as_posix()
                return mount.at if rest == "." else f"{mount.at}/{rest}"
        try:
            return path.relative_to(self.root).as_posix() or "."
        except ValueError:
            return str(path)

    def is_hidden(self, path: Path) -> bool:
        """Whether a real path under the root lies in a hidden folder (walks step over these)."""
        try:
            inside = path.relative_to(self.root).as_posix()
        except ValueError:
            return False
        return any(_under_rel(inside, h) for h in self.hidden)

    def virtual_children(self, rel: str) -> list[str] | None:
        """The entries of a hidden folder that holds mounts (such as `.delegate/skills`), or None
        when `rel` is no such folder. Only the mounts below it show, as folders."""
        rel = posixpath.normpath(rel)
        names = sorted(
            {m.at[len(rel) + 1 :].split("/")[0] for m in self.mounts if m.at.startswith(rel + "/")}
            if rel != "."
            else {m.at.split("/")[0] for m in self.mounts}
        )
        return names if names and (rel == "." or any(_under_rel(rel, h) for h in self.hidden)) else None

    def _view_path(self, text: str) -> tuple[str, str]:
        """`text` relative to the root (absolute paths must lie inside it), as given and normalised."""
        candidate = Path(_expand_home(text))
        if candidate.is_absolute():
            if candidate != self.root and not candidate.is_relative_to(self.root):  # textually
                real = Path(os.path.realpath(candidate))
                if real != self.root and not real.is_relative_to(self.root):
                    raise WorkspaceError(f"path {text!r} is outside the workspace {str(self.root)!r}")
                candidate = real  # an absolute path through a link to the root (/tmp -> /private/tmp)
            candidate = candidate.relative_to(self.root)
        rel = candidate.as_posix() or "."
        lexical = posixpath.normpath(rel)
        if lexical == ".." or lexical.startswith("../"):
            raise WorkspaceError(f"path {text!r} is outside the workspace {str(self.root)!r}")
        return rel, lexical

    def _mount_of(self, rel: str) -> Mount | None:
        found = [m for m in self.mounts if _under_rel(rel, m.at)]
        return max(found, key=lambda m: len(m.at)) if found else None


def _under_rel(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


def _real(text: str, candidate: Path) -> Path:
    try:
        real = Path(os.path.realpath(candidate))
    except OSError as exc:  # realpath does not raise in non-strict mode today; stay safe if it does
        raise WorkspaceError(f"path {text!r} cannot be resolved: {exc.strerror}") from None
    if ".." in real.parts or _is_symlink_loop(real) or Path(os.path.realpath(real)) != real:
        raise WorkspaceError(f"path {text!r} cannot be resolved: it goes through a symlink loop")
    return real


def _expand_home(text: str) -> str:
    """`~` and `~user` as the shell reads them; an unknown user's `~name` stays a plain name."""
    if not text.startswith("~"):
        return text
    try:
        return str(Path(text).expanduser())
    except RuntimeError:  # no home folder for that user
        return text


def _is_symlink_loop(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:
        return False
    return False
