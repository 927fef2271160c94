"""The workspace: one root folder that every tool path must stay under, and the command policy."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from ._errors import UserError, WorkspaceError


@dataclass(frozen=True, slots=True)
class Workspace:
    """A root folder shared by a lead agent and all its subagents (the same folder, never a copy).

    `allow_commands` switches on the `bash` tool and command-running acceptance checks.
    `outputs` is an optional second folder, under the root, where deliverables are expected.
    """

    root: Path
    allow_commands: bool = False
    outputs: Path | None = None

    @classmethod
    def open(cls, root: str | os.PathLike[str], *, allow_commands: bool = False) -> Workspace:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise UserError(f"workspace {str(path)!r} is not a folder: create it or pass --workspace DIR")
        return cls(root=path.resolve(), allow_commands=allow_commands)

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The real path of `path` (workspace-relative or absolute), refused if it leaves the root.

        Symlinks are followed, so a link pointing outside is refused, and so is a link loop. On a
        loop, `realpath` gives up and returns the rest of the path unresolved and only lexically
        normalised (so `loop/../link` comes back as `link`, a link still to follow); its handling
        also changed in Python 3.13. So we trust only a fixed point: a result that `realpath`
        changes again, that `stat` finds looping, or that still holds `..` is refused.
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise WorkspaceError(f"path {text!r} contains a NUL byte")
        candidate = Path(_expand_home(text))
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            real = Path(os.path.realpath(candidate))
        except OSError as exc:  # realpath does not raise in non-strict mode today; stay safe if it does
            raise WorkspaceError(f"path {text!r} cannot be resolved: {exc.strerror}") from None
        if ".." in real.parts or _is_symlink_loop(real) or Path(os.path.realpath(real)) != real:
            raise WorkspaceError(f"path {text!r} cannot be resolved: it goes through a symlink loop")
        if real != self.root and not real.is_relative_to(self.root):
            raise WorkspaceError(f"path {text!r} is outside the workspace {str(self.root)!r}")
        return real

    def relative(self, path: Path) -> str:
        """`path` as the workspace-relative spelling shown to models."""
        try:
            return path.relative_to(self.root).as_posix() or "."
        except ValueError:
            return str(path)


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
