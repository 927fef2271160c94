"""`delegate worker` (and `delegate batch worker`): serve the engine's work until stopped.

On the embedded engine: queued and interrupted batch items of this store, and runs of `delegate
serve` whose process died (the same machine, or machines sharing a PostgreSQL store). On Temporal
(`--engine temporal://...`): the deployment's task queue, on any number of machines.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import Db, OperatorFlags, Workspace, default_model, fail, operator_flags, tune_collector

if TYPE_CHECKING:
    from ..batch import Batches
    from ..engine import EngineSettings
    from ..run import RuntimeSettings

WorkerModel = Annotated[
    str | None,
    typer.Option("--model", "-m", help="provider:name for batches that name none (a batch's own model wins)."),
]
Concurrency = Annotated[int, typer.Option("--concurrency", min=1, help="Items this process runs at once.")]
Name = Annotated[
    str | None,
    typer.Option("--name", help="This worker's name, as Temporal shows it (default: pid@host)."),
]


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


@operator_flags
def worker(
    model: WorkerModel = None,
    concurrency: Concurrency = 100,
    name: Name = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Serve the engine's work until stopped (Ctrl-C or SIGTERM): with --engine temporal://..., the
    deployment's task queue; on the embedded engine, this store's batches and interrupted runs."""
    serve_worker(model=model, concurrency=concurrency, name=name, workspace=workspace, db=db, flags=flags)


def serve_worker(
    *, model: str | None, concurrency: int, name: str | None, workspace: Path, db: str | None, flags: OperatorFlags
) -> None:
    from .._errors import UserError
    from ._batch import open_batches

    try:  # the engine first: a missing extra is said before a missing model
        settings = flags.settings(workspace)
    except UserError as exc:
        fail(str(exc))
    settings = replace(settings, model=default_model(model, what="batches that name no model"))
    engine = settings.engine
    batches = open_batches(workspace, db, engine="temporal" if engine.temporal else None)
    tune_collector()
    if engine.temporal:
        asyncio.run(_serve_temporal(engine, batches, settings, concurrency=concurrency, name=name))
    else:
        asyncio.run(_serve_embedded(batches, settings, concurrency=concurrency, name=name))


def _on_stop(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)


async def _serve_temporal(
    engine: EngineSettings, batches: Batches, settings: RuntimeSettings, *, concurrency: int, name: str | None
) -> None:
    from ..engine.temporal import RunActivities, TemporalEngine, TemporalWorker

    connected = await TemporalEngine.connect(engine)
    factory = settings.factory(store=False)
    runs = RunActivities(batches.store, settings.factory(store=batches.store), Path(settings.workspace))
    async with TemporalWorker(
        connected, batches, factory, concurrency=concurrency, identity=name, runs=runs
    ) as running:
        stop = asyncio.Event()
        _on_stop(stop)
        typer.echo(
            f"Worker {running.identity} serving task queue {engine.task_queue!r} of {engine}; Ctrl-C stops it "
            "(its running items move to another worker).",
            err=True,
        )
        serving = asyncio.create_task(running.serve_forever())
        await asyncio.wait({serving, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED")
        if serving.done():
            serving.result()


async def _serve_embedded(batches: Batches, settings: RuntimeSettings, *, concurrency: int, name: str | None) -> None:
    from ..batch import BatchWorker
    from ..run import Takeover

    factory = settings.factory(store=False)
    runs = Takeover.here(batches.store, settings.factory(store=batches.store))
    async with BatchWorker(batches, factory, concurrency=concurrency, name=name) as running:
        stop = asyncio.Event()
        _on_stop(stop)
        takeover = asyncio.create_task(runs.watch(), name="delegate-run-takeover")
        typer.echo("Batch worker running; Ctrl-C stops it (interrupted items run again later).", err=True)
        try:
            await asyncio.wait(
                {asyncio.create_task(stop.wait()), asyncio.create_task(running.serve_forever())},
                return_when="FIRST_COMPLETED",
            )
        finally:
            takeover.cancel()
            await runs.close()
