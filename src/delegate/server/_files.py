"""`GET /api/v1/files?path=`: a bounded, read-only look at one file of the caller's own workspace.

The web page previews the files a subagent delivered with it. The path is resolved through the
caller's `Workspace` view, the same one its agents work in (in `delegate serve`, the folder
`<workspace>/.delegate/users/<user id>/`), so a path outside it, a link that leads out of it, and
its hidden `.delegate/` are refused before anything is opened, whether or not they exist. Only a
regular file is read, and only its first `limit` bytes: a FIFO or a device never blocks the server.

With `run=ID` the file is one of that run of the caller's: the server reads it only if its own folder
for the caller is the run's (the same workspace id, see `delegate.workspace.Home`). A run that works
in a folder this server cannot reach (another server's, not on shared storage) answers 409 `elsewhere`
with the host its files are on, never this server's file of the same name.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from .._errors import WorkspaceError
from .._store import Store
from .._text import safe_text
from .._time import iso
from ..workspace import HOST, Located, Workspace, reaches
from ._auth import ApiError, UserId, app_store
from ._state import app_state

PREVIEW_BYTES = 64 * 1024
"""How much of a file a preview holds unless the caller asks for less (or more, up to `MAX_PREVIEW_BYTES`)."""
MAX_PREVIEW_BYTES = 1024 * 1024

AppStore = Annotated[Store, Depends(app_store)]
WorkspaceFor = Callable[[str], Workspace]
"""The workspace view of a user's agents, by user id (set by `create_app`)."""


def preview(workspace: Workspace, path: str, limit: int) -> dict[str, Any]:
    """The file at `path` of `workspace`: its size and time, and its first `limit` bytes as text
    (None for a binary file). An `ApiError` if it is outside the view, missing, or not a file."""
    if not workspace.root.is_dir():  # a user whose agents never ran: nothing is there yet
        raise ApiError(404, "not_found", f"no file {path!r} in your workspace")
    try:
        at = workspace.locate(path)
    except WorkspaceError:
        raise ApiError(
            403,
            "outside_workspace",
            f"path {path!r} is not in your workspace: name a file relative to it, as a run's artifacts are",
        ) from None
    with at:
        return _preview(at, path, limit)


def _preview(at: Located, path: str, limit: int) -> dict[str, Any]:
    try:
        fd = at.open(os.O_RDONLY | os.O_NONBLOCK)  # from the folder's handle: a link swapped in is refused
    except FileNotFoundError:
        raise ApiError(404, "not_found", f"no file {path!r} in your workspace") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink put in its place since it was found
            raise ApiError(409, "changed", f"{path!r} changed while it was read: try again") from None
        raise ApiError(422, "not_a_file", f"{path!r} cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise ApiError(422, "not_a_file", f"{path!r} is {kind}: name a file")
        data = _read(fd, limit)
    finally:
        os.close(fd)
    text = _text(data, truncated=info.st_size > len(data))
    return {
        "path": safe_text(at.rel),
        "size": info.st_size,
        "modified_at": iso(datetime.fromtimestamp(info.st_mtime, UTC)),
        "binary": text is None,
        "text": text,
        "truncated": text is not None and info.st_size > len(data),
    }


def _read(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _text(data: bytes, *, truncated: bool) -> str | None:
    """`data` as UTF-8 text, or None if it is not text (a NUL byte, bytes that are not UTF-8). A
    character cut in two at the end of a truncated preview is left out."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8", errors="strict")
        return None


def check_run_files(store: Store, workspace: Workspace, run_id: str, user_id: str) -> None:
    """An `ApiError` unless the files of the caller's run `run_id` are those of `workspace`: 404
    for no such run of the caller's, 409 `elsewhere` (with its host) for a run whose folder this
    server cannot reach."""
    run = store.get_run(run_id, user_id)
    if run is None:
        raise ApiError(404, "not_found", f"no run {run_id!r}: list yours with GET /api/v1/runs")
    if not reaches(workspace.root, run.workspace, run.workspace_id):
        host = run.workspace_host or "another server"
        raise ApiError(
            409,
            "elsewhere",
            f"run {run_id}'s files are in a workspace on {host} that this server ({HOST}) cannot reach: "
            f"ask a server on {host} (the servers of one store share files only through one folder on shared storage)",
            host=run.workspace_host,
        )


def _workspace_for(request: Request) -> WorkspaceFor:
    return app_state(request.app).workspace_for


router = APIRouter(prefix="/api/v1", tags=["files"])


@router.get("/files")
async def file_preview(
    user_id: UserId,
    store: AppStore,
    workspace_for: Annotated[WorkspaceFor, Depends(_workspace_for)],
    path: Annotated[str, Query(min_length=1, max_length=4096, description="A path relative to your workspace.")],
    limit: Annotated[int, Query(ge=1, le=MAX_PREVIEW_BYTES, description="The most bytes of text to send.")] = (
        PREVIEW_BYTES
    ),
    run: Annotated[
        str | None, Query(max_length=200, description="A run of yours whose file it is (its files may be elsewhere).")
    ] = None,
) -> dict[str, Any]:
    """A file of the caller's workspace (one a subagent delivered, say): its size, its time, and a
    preview of its first `limit` bytes as text (`text` is null for a binary file). With `run`, a
    file of that run: 409 `elsewhere` (and its `host`) when its files are on a server whose folder
    this one cannot reach."""
    workspace = workspace_for(user_id)

    def read() -> dict[str, Any]:
        if run is not None:
            check_run_files(store, workspace, run, user_id)
        return preview(workspace, path, limit)

    return await asyncio.to_thread(read)
