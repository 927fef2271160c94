"""The activity of a run on Temporal: run (or resume) its lead on this worker, heartbeating.

It runs on `delegate worker` processes against the store the worker was started with (the same
PostgreSQL database on every machine), in the worker's workspace: a worker runs a run only when
that workspace is the run's (the same absolute path, holding the same `.delegate/workspace-id`),
so a worker that cannot reach a run's files never runs its file tools; it fails the attempt, and
Temporal tries again (on a worker that holds the files, on shared storage every worker mounts).

What the store says decides what an attempt does: no run yet, start it (under the id the
workflow was given); `interrupted` (the worker before died), resume it from its checkpoints;
ended, report how (an attempt after the run ended runs nothing); still `running` under another
live owner (a worker cut off from Temporal), fail this attempt and let Temporal try again once
that owner's lease has lapsed (`RUN_LEASE_TTL`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._errors import UserError
from .._record import END_STATUSES
from .._store import Store
from ..run import RunResult, RuntimeFactory
from ..workflows import Workflow
from ._run_workflow import LEAD, RunRequest

MARKER = Path(".delegate") / "workspace-id"
STOP_WAIT = 30.0
"""Seconds a cancelled run may take to record that it stopped."""


def workspace_marker(root: Path) -> str:
    """The id of the workspace at `root` (made on first use): a worker compares it with the one a
    run was started with, so a folder of the same path on another machine is not taken for it."""
    path = root / MARKER
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = uuid.uuid4().hex
        with contextlib.suppress(FileExistsError), path.open("x") as file:
            file.write(marker)
        return path.read_text().strip()


class RunActivities:
    """The run activity of one worker process: its store, its runtimes, its workspace."""

    def __init__(self, store: Store, factory: RuntimeFactory, workspace: Path) -> None:
        self.store = store
        self.factory = factory
        self.workspace = workspace.resolve()

    def activities(self) -> list[Callable[..., Any]]:
        return [self.lead]

    @activity.defn(name=LEAD)
    async def lead(self, request: RunRequest) -> str:
        """Run or resume the run to its end; its end status."""
        self._check_workspace(request)
        row = await asyncio.to_thread(self.store.get_run, request.run_id)
        if row is not None and row.status in END_STATUSES:
            return row.status  # ended on an attempt before: nothing runs twice
        if row is not None and row.status != "interrupted":
            raise ApplicationError(f"run {request.run_id} is still {row.status} in process {row.owner}; tried again")
        runtime = await asyncio.to_thread(self.factory, None, request.model or (row.model if row else None))
        limits = runtime.limits.over(json.loads(request.limits)) if request.limits else None
        gates = json.loads(request.gates) if request.gates else None  # the starting process's
        try:
            if row is None:
                workflow = Workflow.from_dict(json.loads(request.workflow)) if request.workflow else None
                going = runtime.run(
                    request.prompt,
                    run_id=request.run_id,
                    limits=limits,
                    gates=gates,
                    continue_from=request.continue_from,
                    workflow=workflow,
                )
            else:  # under the gates stored with it, with those of the request added
                going = runtime.resume(request.run_id, limits=limits, gates=gates)
            result = await self._beating(request, going)
        except UserError as exc:  # a new run refused (its gates unreadable, a hook's refusal): no attempt would differ
            raise ApplicationError(str(exc), type="UserError", non_retryable=row is None) from None
        finally:
            await runtime.aclose()
        return result.status

    def _check_workspace(self, request: RunRequest) -> None:
        here = str(self.workspace)
        if request.workspace != here or workspace_marker(self.workspace) != request.marker:
            raise ApplicationError(
                f"run {request.run_id} works in {request.workspace}, which this worker (workspace {here}) "
                "does not hold: left to a worker that does"
            )

    async def _beating(self, request: RunRequest, going: Coroutine[Any, Any, RunResult]) -> RunResult:
        """Run `going`, heartbeating; a cancellation asks the run to stop, and waits until it has
        recorded that (`cancelled`, with its usage)."""
        task = asyncio.ensure_future(going)
        interval = max(0.05, request.heartbeat_timeout / 3)
        try:
            while True:
                activity.heartbeat()
                done, _ = await asyncio.wait({task}, timeout=interval)
                if done:
                    return task.result()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.request_cancel, request.run_id)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), STOP_WAIT)
            task.cancel()
            raise
