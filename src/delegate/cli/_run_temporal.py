"""`delegate run --engine temporal://...`: the run executes on a `delegate worker` that holds this
workspace (the same absolute path, on shared storage, with the same `.delegate/workspace-id`),
recorded in the store this command reads it back from (PostgreSQL, for several machines).

The run's gates are this command's (`--allow`/`--ask`/`--deny`, the mode, the settings files'
rules and hooks, as `Gates.stored()`): they go with the run to the worker, which runs it under
them with its own rules only added. A call under an `ask` rule waits on the worker for a person;
this command says so, with the `delegate runs approve` that decides it, from the store.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ._common import fail, print_waiting_call

if TYPE_CHECKING:
    from .._config import RunLimits
    from .._store import Store
    from ..run import RunResult, Runtime, RuntimeSettings
    from ..workflows import Workflow

WAITING_POLL = 0.5
"""Seconds between looks at the store for the run's calls that wait for a person."""


@dataclass(frozen=True)
class TemporalOrder:
    """What `delegate run` asks a worker to run: a new run (`prompt`, continuing the thread of
    `continue_from`, or running the `workflow`), or the interrupted run `resume`."""

    prompt: str
    model: str | None
    limits: RunLimits
    resume: str | None
    given: dict[str, Any]
    """The limits given on the command line (a resume's replace only those)."""
    continue_from: str | None
    workflow: Workflow | None


def run_on_temporal(settings: RuntimeSettings, runtime: Runtime, order: TemporalOrder) -> RunResult:
    """Start the run's execution, wait for its end, and read it back from `runtime`'s store (it
    gives the run its gates too). Ctrl-C cancels it (it ends `cancelled`, what it spent kept)."""
    from temporalio.client import WorkflowFailureError

    from ..engine.temporal import RunRequest, TemporalEngine, workspace_marker
    from ..run import stored_result

    store = runtime.store
    if store is None:
        fail("on Temporal, a run needs the store its workers record it in: give --db")
    root = Path(settings.workspace).resolve()
    run_id = order.resume or uuid.uuid4().hex
    limits: RunLimits | None = order.limits
    if order.resume is not None:
        limits = _resumable(store, order.resume, runtime, order.given)
    request = RunRequest(
        run_id=run_id,
        prompt=order.prompt,
        model=order.model,
        limits=json.dumps(limits.to_dict()) if limits is not None else "",
        workspace=str(root),
        marker=workspace_marker(root),
        heartbeat_timeout=settings.engine.heartbeat_timeout,
        gates=json.dumps(runtime.gates.stored()),
        continue_from=order.continue_from,
        workflow=json.dumps(order.workflow.to_dict()) if order.workflow is not None else "",
    )
    engine_settings = settings.engine

    async def go() -> str:
        engine = await TemporalEngine.connect(engine_settings)
        handle = await engine.start_run(request)
        typer.echo(
            f"Run {run_id} is on {engine_settings} (workflow run:{run_id}); a worker of task queue "
            f"{engine_settings.task_queue!r} runs it. Ctrl-C cancels it.",
            err=True,
        )
        watching = asyncio.ensure_future(_say_waiting_calls(store, run_id))
        try:
            return await handle.result()
        except asyncio.CancelledError:
            await handle.cancel()
            raise
        finally:
            watching.cancel()

    async def cancel() -> None:
        engine = await TemporalEngine.connect(engine_settings)
        await engine.client.get_workflow_handle(f"run:{run_id}").cancel()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        asyncio.run(cancel())
        fail("cancelled", 1)
    except WorkflowFailureError as exc:  # refused on the worker, before it began (a hook, its rules)
        cause: BaseException = exc
        while cause.__cause__ is not None:  # the workflow's failure, of its activity's, of the worker's error
            cause = cause.__cause__
        fail(f"run {run_id} failed on Temporal: {cause}", 1)
    result: Any = stored_result(store, run_id)
    if result is None:
        fail(f"run {run_id} ended on Temporal but is not in this store: give the workers' --db")
    return result


async def _say_waiting_calls(store: Store, run_id: str) -> None:
    """Say each call of the run that waits for a person, once, as it starts waiting (the worker
    asks nobody: the person decides with `delegate runs approve`, or over HTTP)."""
    said: set[str] = set()
    while True:
        waiting = await asyncio.to_thread(store.approvals, run_id, pending=True)
        for row in waiting:
            if row.call_id not in said:
                said.add(row.call_id)
                print_waiting_call(run_id, row.to_dict())
        await asyncio.sleep(WAITING_POLL)


def _resumable(store: Store, run_id: str, runtime: Runtime, given: dict[str, Any]) -> RunLimits | None:
    """The limits to resume `run_id` under (None: its own), once it is sure to be resumable: an
    execution for a run that is not would wait on Temporal for good."""
    run = store.get_run(run_id)
    if run is None:
        fail(f"no run {run_id!r}: list the runs with `delegate runs list`")
    if run.status != "interrupted":
        fail(f"run {run_id} is {run.status}: only an interrupted run can be resumed")
    return runtime.limits.over(run.limits or {}).over(given) if given else None
