"""Runs stay with their files: whether this process reaches a run's workspace folder, and the
error that says where the run's files are when it does not (see `delegate.workspace.Home`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import RunElsewhereError
from ..workspace import HOST, reaches

if TYPE_CHECKING:
    from .._store import RunRow


def check_home(run: RunRow, here: Path, *, served: bool) -> None:
    """Raise `RunElsewhereError` unless a process working in `here` reaches the files of `run` (blocking:
    it reads the folder's id)."""
    if not reaches(here, run.workspace, run.workspace_id):
        raise elsewhere(run, here, served=served)


def elsewhere(run: RunRow, here: Path, *, served: bool) -> RunElsewhereError:
    """The error that says `run` works in a folder that is not `here`'s (nor the same folder on
    shared storage): where it is, with the paths for the operator (`served`: an HTTP user's run,
    whose message names hosts only)."""
    host = run.workspace_host or "the host it started on"
    note = (
        f"not taken over by the server on {HOST}: its files are in a workspace on {host} that it cannot "
        "reach (another folder, not the same one on shared storage); it waits for a server of that workspace"
    )
    if served:
        message = f"run {run.id} is {note}"
    else:
        why = "its workspace id differs" if run.workspace_id is not None else "another path"
        message = (
            f"run {run.id} works in {run.workspace} on {host}, not in {here} on {HOST} (another folder: {why}): "
            "resume it where its files are (--workspace of that folder, on that host); servers of one store "
            "share one folder on shared storage (docs/http.md)"
        )
    return RunElsewhereError(message, run_id=run.id, host=run.workspace_host, path=run.workspace, note=note)
