"""The workspace: the view of the file system that every tool of an agent works in, and the
policy for the commands it runs.

A `Workspace` is a view, not just a folder. Its `root` is the one place agents may write. Inside
it, `hidden` folders do not exist for agents (by default `.delegate/`, where the store and the
definitions live), `read_only` folders can be read but not changed (by default `.claude`, with
definitions, skills and settings, and `.git`), and `mounts` show folders from elsewhere, read-only,
at a path of the view (the skills a run may use, under `.delegate/skills/<name>`). Every tool
finds paths through `Workspace.locate` (the file tools, `complete`'s paths, acceptance checks,
search, the server's file preview), which walks them from a handle on the root and hands back a
handle to operate on, so no rename or symlink swapped in meanwhile can send an operation
elsewhere (see `_paths.py`); the command sandbox builds its mounts from the same fields
(`workspace/_sandbox.py`), so what an agent can reach follows from the view, in one place.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .._errors import UserError, WorkspaceError
from .._text import unescape_bytes
from ._command_limits import CommandLimits
from ._command_rules import CommandRules
from ._paths import Found, MayCreate, PathEscape, PathLoop, open_base, walk

if TYPE_CHECKING:
    from ._layer import Layer

HIDDEN = (".delegate",)
"""Folders of a workspace that agents never see: the store, definitions, other users' folders."""
READ_ONLY = (".claude", ".git")
"""Folders of a workspace that agents may read but not change: `.claude` holds definitions,
skills and settings that runs load; `.git` holds configuration that the operator's own git runs
(`core.fsmonitor`, hooks, `core.pager`, aliases: a command for whoever runs `git status` next)."""
COMMAND_ENV = ("PATH", "HOME", "LANG", "TERM")
USER_DATA = "/mnt/user-data"
"""Spec 002's spelling of the shared folders: `/mnt/user-data/workspace/...` is the workspace and
`/mnt/user-data/outputs/...` its outputs folder, in every path an agent gives a file tool,
`complete` or an acceptance criterion (`Workspace.locate`)."""
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
class Located:
    """A path of the view, found (`Workspace.locate`): the handle of the folder that holds it, its
    name there, its view spelling `rel` and its place on disk `real` (for records, never to be
    opened by name). `info` is its `lstat` when found, None when it does not exist."""

    found: Found
    rel: str
    real: Path

    @property
    def info(self) -> os.stat_result | None:
        return self.found.info

    @property
    def folder(self) -> int:
        return self.found.folder

    @property
    def name(self) -> str:
        return self.found.name

    @property
    def followed(self) -> bool:
        """Whether the path named a symlink and this is where it leads."""
        return self.found.followed

    def is_dir(self) -> bool:
        return self.info is not None and stat.S_ISDIR(self.info.st_mode)

    def is_file(self) -> bool:
        return self.info is not None and stat.S_ISREG(self.info.st_mode)

    def open(self, flags: int) -> int:
        """`os.open` of it, from its folder's handle, never following a symlink."""
        return self.found.open(flags)

    def close(self) -> None:
        self.found.close()

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *_: object) -> None:
        self.found.close()


@dataclass(frozen=True, slots=True)
class Workspace:
    """The root folder shared by a lead agent and all its subagents, as agents see it.

    `allow_commands` switches on the `bash` tool and command-running acceptance checks, run as
    `commands` says. `outputs` is the folder where deliverables are expected (relative to the root,
    or absolute): spec 002's `/mnt/user-data/outputs` names it, and `/mnt/user-data/workspace` the
    root. `hidden`, `read_only` and `mounts` shape the view (see the module's docstring).
    `layer`, for an overlay subagent, is where its writes land: it reads them over the shared
    files, and nothing it does changes the root until its layer is merged (`_layer.py`).
    """

    root: Path
    allow_commands: bool = False
    outputs: Path | None = None
    hidden: tuple[str, ...] = HIDDEN
    read_only: tuple[str, ...] = READ_ONLY
    mounts: tuple[Mount, ...] = ()
    commands: CommandPolicy = field(default_factory=CommandPolicy)
    layer: Layer | None = None

    @property
    def shared(self) -> Workspace:
        """This view without its layer: the workspace as every agent shares it."""
        return self if self.layer is None else replace(self, layer=None)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        allow_commands: bool = False,
        commands: CommandPolicy | None = None,
        create: bool = False,
    ) -> Workspace:
        """The view of the folder `root`; with `create`, a missing folder is made (with its parents)."""
        path = Path(root).expanduser()
        if create and not path.exists():
            path.mkdir(parents=True, exist_ok=True)
        if not path.is_dir():
            raise UserError(f"workspace {str(path)!r} is not a folder: give the path of a folder")
        return cls(root=path.resolve(), allow_commands=allow_commands, commands=commands or CommandPolicy())

    def with_mounts(self, mounts: list[Mount]) -> Workspace:
        """This view with `mounts` added (each must lie inside a hidden folder of the view)."""
        for mount in mounts:
            if not any(_under_rel(mount.at, h) for h in self.hidden):
                raise ValueError(f"mount {mount.at!r} is not inside a hidden folder of the workspace")
        return replace(self, mounts=(*self.mounts, *mounts))

    def locate(self, path: str | os.PathLike[str], *, write: bool = False, create: bool = False) -> Located:
        """Where `path` (workspace-relative, or absolute inside the root) is: a handle on the folder
        that holds it and its name there (see `_paths.py`), refused with a `WorkspaceError` if it
        leaves the view, lies in a hidden folder, or (with `write`) in a read-only one or a mount.

        Symlinks are followed, and the checks apply to where they lead: a link to a hidden folder
        is refused like the folder. The walk is made from a handle on the root, so what it finds
        is where the object really is, whatever is renamed or swapped meanwhile; operate on it
        through the `Located` (`open`, `folder` + `name` for `*at` calls), never by name again.
        `create` makes missing folders on the way (each checked before it is made). The caller
        closes the handle (`with workspace.locate(...) as at:`).
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise WorkspaceError(f"path {text!r} contains a NUL byte")
        escaped = unescape_bytes(text)
        if escaped is not None:  # perhaps a name the model was shown with `\\xNN` escapes
            near: Located | None = None  # the first whose folder exists, if neither exists itself
            for candidate in (text, escaped):
                with suppress(WorkspaceError):
                    found = self._locate(candidate, write=write, create=False)
                    if found.info is not None:
                        if near is not None:
                            near.close()
                        return found
                    if near is None and found.found.parts[-1:] == (found.name,):
                        near = found
                    else:
                        found.close()
            if near is not None:
                return near
        return self._locate(text, write=write, create=create)

    def _locate(self, text: str, *, write: bool, create: bool) -> Located:
        rel, lexical = self._view_path(text)
        mount = self._mount_of(lexical) if ".." not in PurePosixPath(rel).parts else None
        if mount is not None:
            if write:
                raise WorkspaceError(f"{lexical} is read-only: it is a definition that runs load")
            source = os.path.realpath(mount.source)
            found = self._walk(text, source, posixpath.relpath(lexical, mount.at), None)
            inside = posixpath.join(mount.at, *found.parts)
            return Located(found=found, rel=inside, real=Path(source, *found.parts))
        refuse = self._refusal(text, write)
        make: MayCreate | None = (lambda parts: refuse("/".join(parts))) if create and self.layer is None else None
        found = self._walk(text, str(self.root), rel, make)
        inside = "/".join(found.parts) or "."
        try:
            refuse(inside)
        except BaseException:
            found.close()
            raise
        located = Located(found=found, rel=inside, real=self.root.joinpath(*found.parts))
        return located if self.layer is None else self.layer.over(located, write=write)

    def make_outputs(self) -> None:
        """Make the outputs folder when it is missing (walked from the root as any write is: a link
        an agent put in its place leads nowhere the view does not). A folder it cannot make is left
        to the first write into it, which says why."""
        if self.outputs is None:
            return
        inside = posixpath.join(os.fspath(self.outputs), ".keep")  # looked at, never made: its folders are
        with suppress(WorkspaceError, OSError), self.locate(inside, write=True, create=True):
            pass

    def resolve(self, path: str | os.PathLike[str], *, write: bool = False) -> Path:
        """The real path of `path`, checked as `locate` checks it: a name for records and
        comparisons only. Never open or change what it returns by name (that is the race
        `locate` exists to close): use `locate`."""
        with self.locate(path, write=write) as at:
            return at.real

    def hides(self, rel: str) -> bool:
        """Whether a path of the view (workspace-relative, real) lies in a hidden folder."""
        return any(_under_rel(rel, h) for h in self.hidden)

    def _refusal(self, text: str, write: bool) -> Callable[[str], None]:
        def refuse(inside: str) -> None:
            if self.hides(inside):
                if self._mount_of(inside) is None:  # a real path under a mount's place is not the mount
                    raise WorkspaceError(f"path {text!r} is not part of the workspace: {inside} is internal state")
                raise WorkspaceError(f"path {text!r} goes through a link into internal state; use {inside}")
            if write and (any(_under_rel(inside, r) for r in self.read_only) or in_repository(inside)):
                raise WorkspaceError(f"{inside} is read-only: {_why_read_only(inside)}")

        return refuse

    def _walk(self, text: str, base: str, rel: str, create: MayCreate | None) -> Found:
        try:
            fd = open_base(base)
        except OSError as exc:
            raise WorkspaceError(f"path {text!r} cannot be resolved: {exc.strerror or exc}") from None
        try:
            return walk(fd, base, rel.split("/"), create=create)
        except PathEscape:
            raise WorkspaceError(f"path {text!r} is outside the workspace") from None
        except PathLoop:
            raise WorkspaceError(f"path {text!r} cannot be resolved: it goes through a symlink loop") from None
        except NotADirectoryError:
            why = "part of that path is a file, not a folder"
            raise WorkspaceError(f"path {text!r} cannot be resolved: {why}") from None
        except OSError as exc:
            raise WorkspaceError(f"path {text!r} cannot be resolved: {exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def shown(self, text: str) -> str:
        """`text` (an error's message) with the workspace's folders written as its agents name them:
        relative to the root, mounts at their places. The real folders are the server's (under
        `delegate serve`, `.delegate/users/<user id>/` of its own folder): not for a model or an
        HTTP user to see, and no use to them."""
        for mount in self.mounts:
            text = _replace_folder(text, str(mount.source), mount.at)
        root = str(self.root)
        return _replace_folder(text, root, ".") if root != "/" else text

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

    def user_data(self, text: str) -> str:
        """`text` with spec 002's `/mnt/user-data/workspace` or `/mnt/user-data/outputs` prefix
        replaced by the folder it names (workspace-relative); any other path as it is."""
        for folder, into in (("workspace", "."), ("outputs", self.outputs)):
            prefix = f"{USER_DATA}/{folder}"
            if text != prefix and not text.startswith(prefix + "/"):
                continue
            if into is None:
                raise WorkspaceError(f"path {text!r}: this workspace has no outputs folder")
            rest = text[len(prefix) :].lstrip("/")
            return posixpath.join(os.fspath(into), rest) if rest else os.fspath(into)
        return text

    def _view_path(self, text: str) -> tuple[str, str]:
        """`text` relative to the root (absolute paths must lie inside it), as given and normalised."""
        candidate = Path(_expand_home(self.user_data(text)))
        if candidate.is_absolute():
            if candidate != self.root and not candidate.is_relative_to(self.root):  # textually
                real = Path(os.path.realpath(candidate))
                if real != self.root and not real.is_relative_to(self.root):
                    raise WorkspaceError(f"path {text!r} is outside the workspace")
                candidate = real  # an absolute path through a link to the root (/tmp -> /private/tmp)
            candidate = candidate.relative_to(self.root)
        rel = candidate.as_posix() or "."
        lexical = posixpath.normpath(rel)
        if lexical == ".." or lexical.startswith("../"):
            raise WorkspaceError(f"path {text!r} is outside the workspace")
        return rel, lexical

    def _mount_of(self, rel: str) -> Mount | None:
        found = [m for m in self.mounts if _under_rel(rel, m.at)]
        return max(found, key=lambda m: len(m.at)) if found else None


def _under_rel(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


def _why_read_only(rel: str) -> str:
    if in_repository(rel):
        return (
            "agents may read a .git, anywhere in the workspace, but never make or change one (the operator's "
            "git runs its configuration); make a scratch repository under /tmp with a command instead"
        )
    return "it is a definition, skill or setting that runs load"


def in_repository(rel: str) -> bool:
    """Whether a path of the view is, or lies in, a `.git` (at any depth: a nested repository's
    configuration runs for the operator's `git status` in its folder as the top one's does)."""
    return any(is_git_name(part) for part in rel.split("/"))


def is_git_name(name: str) -> bool:
    """Whether git takes an entry of this name for a repository: `.git` (in any case, as on a
    file system that folds it), a folder or a file (`gitdir: ...`, pointing anywhere)."""
    return name.casefold() == ".git"


_HEAD = re.compile(rb"ref:\s*refs/|[0-9a-fA-F]{40}")


def names_a_ref(head: bytes) -> bool:
    """Whether `head`, the text of a file named `HEAD`, makes git take its folder for a (bare)
    repository (git's `validate_headref`: `ref: refs/...`, or a commit id)."""
    return _HEAD.match(head) is not None


def refuse_repository_head(rel: str, data: bytes) -> None:
    """Refuse (`WorkspaceError`) writing `data` at `rel` when it is a `HEAD` that would make its
    folder a git repository (see `names_a_ref`)."""
    if rel.rsplit("/", 1)[-1] == "HEAD" and names_a_ref(data[:255]):
        raise WorkspaceError(
            f"{rel} was not written: a HEAD naming a ref makes its folder a git repository, whose configuration "
            "the operator's git would run; agents may not make one (make a scratch repository under /tmp "
            "with a command instead)"
        )


def _expand_home(text: str) -> str:
    """`~` and `~user` as the shell reads them; an unknown user's `~name` stays a plain name."""
    if not text.startswith("~"):
        return text
    try:
        return str(Path(text).expanduser())
    except RuntimeError:  # no home folder for that user
        return text


def _replace_folder(text: str, folder: str, at: str) -> str:
    """`text` with `folder` and the paths under it written from `at` (`.`: relative)."""
    if folder not in text:
        return text
    text = text.replace(folder + "/", "" if at == "." else at + "/")
    return text.replace(folder, at)
