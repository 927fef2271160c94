"""`delegate run --engine temporal://...`: the run executes on a `delegate worker` that holds this
workspace (the same absolute path, on shared storage, with the same `.delegate/workspace-id`),
recorded in the store this command reads it back from (PostgreSQL, for several machines)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ._common import fail, open_store

if TYPE_CHECKING:
    from .._config import RunLimits
    from ..run import RunResult, RuntimeSettings


def run_on_temporal(
    settings: RuntimeSettings, prompt: str, model: str | None, limits: RunLimits, db: str | None
) -> RunResult:
    """Start the run's execution, wait for its end, and read it back from the store. Ctrl-C
    cancels it (it ends `cancelled`, what it spent kept)."""
    from ..engine.temporal import RunRequest, TemporalEngine, workspace_marker
    from ..run import stored_result

    root = Path(settings.workspace).resolve()
    store = open_store(root, db)
    run_id = uuid.uuid4().hex
    request = RunRequest(
        run_id=run_id,
        prompt=prompt,
        model=model,
        limits=json.dumps(limits.to_dict()),
        workspace=str(root),
        marker=workspace_marker(root),
        heartbeat_timeout=settings.engine.heartbeat_timeout,
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
        try:
            return await handle.result()
        except asyncio.CancelledError:
            await handle.cancel()
            raise

    async def cancel() -> None:
        engine = await TemporalEngine.connect(engine_settings)
        await engine.client.get_workflow_handle(f"run:{run_id}").cancel()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        asyncio.run(cancel())
        fail("cancelled", 1)
    result: Any = stored_result(store, run_id)
    store.close()
    if result is None:
        fail(f"run {run_id} ended on Temporal but is not in this store: give the workers' --db")
    return result
