"""Where a run's files live: the workspace's id, and the home a run records (issue 34, item 7).

A workspace folder carries an id of its own, made the first time a run is recorded in it and kept
in its hidden `.delegate/workspace-id` (out of every agent's reach, as all of `.delegate/` is). A
run records its `Home`: the host it started on, the folder's absolute path there, and that id.
A process that would go on with the run (a server taking over the runs of one that died,
`delegate run --resume`, a batch worker) reaches the run's files when the folder it would run it
in holds the same id: the same folder, or the same folder on shared storage, mounted at any path
on any host. A folder with another id, or none, is another folder: its files are not the run's,
and the run is left to a process that has them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOST", "Home", "reaches", "workspace_id"]

HOST = socket.gethostname()
"""This machine's name, as a run's home records it."""
ID_FILE = Path(".delegate") / "workspace-id"
"""The file, under a workspace's root, that holds its id."""


@dataclass(frozen=True, slots=True)
class Home:
    """Where a run's files are: `host` (the machine's name), `path` (the workspace's absolute
    path there) and `id` (its `workspace_id`)."""

    host: str
    path: str
    id: str

    @classmethod
    def of(cls, root: Path) -> Home:
        """The home of a run that works in `root`, on this host (its id made if it has none)."""
        return cls(host=HOST, path=str(root), id=workspace_id(root, create=True) or "")


def reaches(root: Path, path: str | None, id: str | None) -> bool:
    """Whether a process working in `root` has the files of a run recorded at `path` with the
    workspace id `id`: the folder at `root` holds that id (a run stored before ids were kept, with
    none: `root` is that path)."""
    if id is None:
        return path is None or path == str(root)
    return bool(id) and workspace_id(root) == id


def workspace_id(root: Path, *, create: bool = False) -> str | None:
    """The id of the workspace at `root`: None if it has none (and `create` is false). Made at
    most once, whoever asks at the same time: written whole into a file of its own, then linked to
    its name, which only the first link takes."""
    path = root / ID_FILE
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, made = tempfile.mkstemp(dir=path.parent, prefix=".workspace-id.")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(uuid.uuid4().hex + "\n")
        with contextlib.suppress(FileExistsError):  # another process made it first: its id stands
            os.link(made, path)
    finally:
        os.unlink(made)
    return _read(path)


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace").strip()
