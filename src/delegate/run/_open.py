"""The one store opener of every face (the CLI, the server, the runtime): light to import, so a
command that only reads the store (`delegate runs list`) loads no runtime, catalogue or tools."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

if TYPE_CHECKING:
    from .._store import Store


@overload
def open_store(url: str | None, workspace: Path) -> Store: ...
@overload
def open_store(url: str | None, workspace: Path, *, create: Literal[False]) -> Store | None: ...
def open_store(url: str | None, workspace: Path, *, create: bool = True) -> Store | None:
    """The one store opener of every face: the database at `url`, else the workspace's own
    (`<workspace>/.delegate/delegate.db`). A `UserError` for a bad URL. `create=False` (what a
    command that only reads asks for) makes nothing: None when the workspace has no store yet."""
    from .._store import Store

    if url:
        store = Store.open(url)
        _warn_when_in_reach(store, workspace)
        return store
    if not create and not (workspace / ".delegate" / "delegate.db").is_file():
        return None
    return Store.for_workspace(workspace)


def _warn_when_in_reach(store: Store, workspace: Path) -> None:
    """Warn when the SQLite file of `store` lies in `workspace` but not in its `.delegate/`: there,
    agents' file tools and commands can read and change it (the store holds every run, its tokens'
    hashes and its decisions). The operator chose it, so it is said, not refused."""
    url = store.engine.url
    if url.get_backend_name() != "sqlite" or not url.database:
        return
    path, root = Path(url.database).resolve(), workspace.resolve()
    if path.is_relative_to(root) and not path.is_relative_to(root / ".delegate"):
        logging.getLogger("delegate").warning(
            "warning: the store %s is inside the workspace %s, where agents' tools and commands can read and "
            "change it: put it outside, or leave --db out (the workspace's own store lives in .delegate/, out of "
            "their reach)",
            path,
            root,
        )
