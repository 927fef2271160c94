"""The workspace: one root folder that every tool path must stay under, and the command policy."""

from __future__ import annotations

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

        Symlinks are followed, so a link pointing outside is refused, and so is a link loop.
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise WorkspaceError(f"path {text!r} contains a NUL byte")
        candidate = Path(text).expanduser() if text.startswith("~") else Path(text)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            real = candidate.resolve(strict=False)
        except (RuntimeError, OSError) as exc:  # symlink loop, name too long
            raise WorkspaceError(f"path {text!r} cannot be resolved: {exc}") from None
        if real != self.root and not real.is_relative_to(self.root):
            raise WorkspaceError(f"path {text!r} is outside the workspace {str(self.root)!r}")
        return real

    def relative(self, path: Path) -> str:
        """`path` as the workspace-relative spelling shown to models."""
        try:
            return path.relative_to(self.root).as_posix() or "."
        except ValueError:
            return str(path)
