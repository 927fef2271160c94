"""`delegate batch submit|list|status|items|pause|resume|cancel|retry|export|worker`.

The CLI submits as the local user (`default`), the same owner the lead's `batch_task` uses in
`delegate run`; every other command is the operator's, who sees and steers every user's batches
(those HTTP users submitted too), as `delegate runs` does. Everything here imports the batch layer
lazily, inside the commands.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from .._config import LOCAL_USER
from .._text import plural
from .._usage import cost_text
from ._common import (
    Db,
    EngineOption,
    OperatorFlags,
    Workspace,
    default_model,
    fail,
    open_store,
    operator_flags,
    read_store,
    tune_collector,
)
from ._worker import serve_worker

if TYPE_CHECKING:
    from .._events import Event
    from ..batch import Batch, BatchEngine, Batches, BatchWorker
    from ..engine import EngineSettings
    from ..run import Runtime, RuntimeFactory, RuntimeSettings

T = TypeVar("T")
batch_app = typer.Typer(
    help="Durable batches: thousands of independent items, each run as a subagent.", no_args_is_help=True
)


OPERATOR = None
"""The owner the operator's commands read and steer batches as: any (see `Batches.get`)."""


def register(app: typer.Typer) -> None:
    app.add_typer(batch_app, name="batch")


BatchId = Annotated[
    str, typer.Argument(metavar="BATCH_ID", help="The batch id `submit` printed (`batch list` shows them).")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Model = Annotated[
    str | None, typer.Option("--model", "-m", help="provider:name for the items' subagents, stored with the batch.")
]
WorkerModel = Annotated[
    str | None,
    typer.Option("--model", "-m", help="provider:name for batches that name none (a batch's own model wins)."),
]


def open_batches(
    workspace: Path, db: str | None, *, read_only: bool = False, engine: BatchEngine | None = None
) -> Batches:
    """The batches of the store, submitting for `engine` (None: the embedded one); `read_only`
    (status, items, export) creates no store where it is run: a workspace without one has no batch
    to show (exit 2)."""
    from ..batch import Batches

    if read_only:
        store = read_store(workspace, db)
        if store is None:
            fail("no batches yet: submit one with `delegate batch submit FILE.jsonl --type T`")
        return Batches(store)
    return Batches(open_store(workspace, db), engine=engine)


def guarded(action: Callable[[], T]) -> T:
    """Run a batch operation; bad input or a batch not found is exit code 2 with its message."""
    from .._errors import UserError

    try:
        return action()
    except UserError as exc:
        fail(str(exc))


def read_items(path: Path) -> list[tuple[dict[str, Any], int]]:
    """Read JSON Lines items, each with its line number; any bad line is an error naming the line,
    and nothing is stored."""
    from ..batch import loads_json, repeated_fields

    if not path.is_file():
        fail(f"items file {str(path)!r} does not exist")
    items: list[tuple[dict[str, Any], int]] = []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                fail(
                    f"{path}:{number}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "save it as UTF-8"
                )
            if not line.strip():
                continue
            try:
                item = loads_json(line)
            except json.JSONDecodeError as exc:
                fail(f"{path}:{number}: not valid JSON ({exc.msg}); each line is one item object")
            except RecursionError:
                fail(f"{path}:{number}: nested too deeply to read; each line is one flat item object")
            if not isinstance(item, dict):
                fail(f'{path}:{number}: each line must be an object like {{"key": ..., "prompt": ...}}')
            item = cast(dict[str, Any], item)
            if repeated := repeated_fields(item):
                fail(
                    f"{path}:{number}: field(s) {', '.join(map(repr, repeated))} given more than once; "
                    "give each field once"
                )
            items.append((item, number))
    if not items:
        fail(f"items file {str(path)!r} has no items")
    return items


def named_limits(given: list[str]) -> dict[str, Any]:
    """`--limit NAME=N` options as limits by name (checked with the items, by `Batches.submit`)."""
    limits: dict[str, Any] = {}
    for one in given:
        name, equals, text = one.partition("=")
        if not equals:
            fail(f"--limit {one!r}: give NAME=N, a run limit by its name (cost_budget=0.5)")
        try:
            limits[name.strip()] = int(text) if text.strip().lstrip("-").isdigit() else float(text)
        except ValueError:
            fail(f"--limit {one!r}: {text!r} is not a number")
    return limits


def _by_line(problem: str, path: Path, items: list[tuple[dict[str, Any], int]]) -> str:
    """A problem of the submission's item N (`item 3: ...`, as the HTTP API names items) named by
    its line in the file instead (`items.jsonl:5: ...`): blank lines make the two differ."""
    found = re.match(r"item (\d+)(?: \(.*?\))?: ", problem)
    if found is None or int(found[1]) >= len(items):
        return problem
    return f"{path}:{items[int(found[1])][1]}: {problem[found.end() :]}"


def settings_or_fail(workspace: Path, flags: OperatorFlags, *, model: str | None) -> RuntimeSettings:
    from .._errors import UserError

    try:
        return flags.settings(workspace, model=model)
    except UserError as exc:
        fail(str(exc))


@batch_app.command()
@operator_flags
def submit(
    file: Annotated[Path, typer.Argument(help='JSON Lines: {"key": ..., "prompt": ..., "acceptance_criteria": [...]}')],
    subagent_type: Annotated[str, typer.Option("--type", "-t", help="The subagent type that runs every item.")],
    title: Annotated[
        str | None,
        typer.Option("--title", help="What the batch does (default: the file's name without its extension)."),
    ] = None,
    max_running: Annotated[
        int | None, typer.Option("--max-running", help="Items running at once (1-1000, default 3).")
    ] = None,
    max_live: Annotated[
        int | None,
        typer.Option("--max-live", help="Items claimed at once (1-10000, default 100, or --max-running when higher)."),
    ] = None,
    max_attempts: Annotated[
        int | None, typer.Option("--max-attempts", help="Runs of an item that ends in error (1-10, default 3).")
    ] = None,
    model: Model = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(
            "--limit",
            metavar="NAME=N",
            help="A run limit of every item, by its RunLimits name (cost_budget=0.5, token_budget=20000, "
            "timeout=600, ...); repeat for more. An item's own `limits` may tighten it, never loosen it.",
        ),
    ] = None,
    workspace: Workspace = Path("."),
    detach: Annotated[bool, typer.Option("--detach", help="Store the batch and return; a worker runs it.")] = False,
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Submit a batch. Prints its id on the last line; without --detach, runs it to the end."""
    from .._errors import UserError
    from ..batch import BatchValidationError
    from ..workspace import Home

    items = read_items(file)
    model = default_model(model, what="its items")
    settings = settings_or_fail(workspace, flags, model=model)
    try:
        catalogue = settings.catalogue()
    except UserError as exc:
        fail(str(exc))
    known = catalogue.visible(allow_commands=flags.allow_commands).names()
    engine = settings.engine
    batches = open_batches(workspace, db, engine="temporal" if engine.temporal else None)
    try:
        submission = batches.submit(
            LOCAL_USER,
            subagent_type=subagent_type,
            items=[item for item, _ in items],
            title=title or file.stem,
            max_running_items=max_running,
            max_live_items=max_live,
            max_attempts=max_attempts,
            model=model,
            known_types=known,
            limits=named_limits(limit or []),
            home=Home.of(workspace.resolve()),  # its items run in this folder, whichever worker runs them
        )
    except BatchValidationError as exc:  # its items by their line in the file, as the file's own errors
        fail(str(BatchValidationError([_by_line(problem, file, items) for problem in exc.problems])))
    except UserError as exc:
        fail(str(exc))
    batch = submission.batch
    if engine.temporal:
        batch = asyncio.run(on_temporal(engine, batches, batch, wait=not detach))
        if not detach:
            typer.echo(batch.render(), err=True)
        else:
            typer.echo(
                f"Batch {batch.id} stored with {plural(batch.total, 'item')}; workers of {engine} run it.", err=True
            )
    elif not detach:
        tune_collector()
        batch = asyncio.run(run_to_end(batches, batch, settings.factory(store=False)))
        typer.echo(batch.render(), err=True)
    else:
        stored = f"Batch {batch.id} stored with {plural(batch.total, 'item')}"
        typer.echo(f"{stored}; `delegate batch worker` runs it.", err=True)
    typer.echo(batch.id)
    if not detach and batch.status != "completed":
        raise typer.Exit(1)


class LeadBatches:
    """The batches a lead submits from `delegate run`, run in that process: a worker starts with
    the first one (so the lead's `batch_status` shows progress), and `finish` waits for them all."""

    def __init__(self, runtime: Runtime, factory: RuntimeFactory) -> None:
        self.runtime = runtime
        self.factory = factory
        self.ids: list[str] = []
        self._worker: BatchWorker | None = None
        self._starting: asyncio.Task[None] | None = None

    def sink(self, event: Event) -> None:
        if event.type != "batch.submitted":
            return
        self.ids.append(event.data["batch_id"])
        if self._starting is None:
            self._starting = asyncio.create_task(self._start())

    async def _start(self) -> None:
        from ..batch import BatchWorker

        batches = self.runtime.batches
        assert batches is not None  # a batch was submitted through it
        self._worker = BatchWorker(batches, self.factory)
        await self._worker.start()

    async def finish(self, *, wait: bool) -> list[Batch]:
        """Wait for every batch to end (unless not `wait`: the run was cancelled), stop the worker."""
        if self._starting is None:
            return []
        try:
            await self._starting
            assert self._worker is not None
            return [await self._worker.wait(LOCAL_USER, batch_id) for batch_id in self.ids] if wait else []
        finally:
            if self._worker is not None:
                await self._worker.stop()


async def run_to_end(batches: Batches, batch: Batch, factory: RuntimeFactory) -> Batch:
    """Run the batch in this process (the embedded engine) with a progress bar, to its end."""
    from ..batch import BatchWorker

    async with BatchWorker(batches, factory) as worker:
        return await _progress(batches, batch, worker.wait(LOCAL_USER, batch.id))


async def on_temporal(engine: EngineSettings, batches: Batches, batch: Batch, *, wait: bool) -> Batch:
    """Start the batch's execution on Temporal; with `wait`, show its progress until it ends
    (`delegate worker` processes run its items)."""
    from ..batch import WorkQueue
    from ..engine.temporal import TemporalEngine

    connected = await TemporalEngine.connect(engine)
    info = await asyncio.to_thread(WorkQueue(batches).serve_info, batch.id)
    if info is not None:
        await connected.start_batch(batch.id, info.epoch)
    if not wait:
        return batch
    return await _progress(batches, batch, _until_done(batches, batch.id))


async def _until_done(batches: Batches, batch_id: str) -> Batch:
    while True:
        batch = await asyncio.to_thread(batches.get, LOCAL_USER, batch_id)
        if batch.done:
            return batch
        await asyncio.sleep(0.25)


async def _progress(batches: Batches, batch: Batch, done: Coroutine[Any, Any, Batch]) -> Batch:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.fields[counts]}"), console=console, transient=False) as bar:
        task = bar.add_task(batch.title, total=batch.total, counts="")
        waiting = asyncio.create_task(done)
        while not waiting.done():
            current = await asyncio.to_thread(batches.get, LOCAL_USER, batch.id)
            bar.update(task, completed=_ended(current), counts=_counts(current))
            await asyncio.wait({waiting}, timeout=0.25)
        waiting.result()
        final = await asyncio.to_thread(batches.get, LOCAL_USER, batch.id)
        bar.update(task, completed=_ended(final), counts=_counts(final))
    return final


def tell_engine(engine: str | None, batches: Batches, batch_id: str) -> None:
    """After a change made here, wake the batch's execution on Temporal (`--engine`, or
    DELEGATE_ENGINE), or start the one a resume or retry needs; without it, a worker finds the
    change at its next look at the store."""
    from ..engine import EngineSettings

    settings = EngineSettings.parse(engine)
    if settings.temporal:
        asyncio.run(_tell(settings, batches, batch_id))


async def _tell(settings: EngineSettings, batches: Batches, batch_id: str) -> None:
    from ..engine.temporal import TemporalEngine, notifier

    connected = await TemporalEngine.connect(settings)
    await notifier(connected, batches, asyncio.get_running_loop()).changed(batch_id)


def _ended(batch: Batch) -> int:
    return sum(batch.counts[s] for s in ("succeeded", "failed", "cancelled"))


def _counts(batch: Batch) -> str:
    return " ".join(f"{status} {n}" for status, n in batch.counts.items() if n)


@batch_app.command("list")
def batch_list(
    user: Annotated[
        str | None,
        typer.Option("--user", metavar="NAME", help="Only this user's batches (`default`: those of the command line)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="At most this many batches.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array, a batch an object.")] = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Every user's batches, newest first, with their progress, tokens and cost.

    Example: delegate batch list --user alice --json
    """
    store = read_store(workspace, db)  # reading creates no store where it is run
    batches: list[Batch] = []
    names: dict[str, str] = {LOCAL_USER: LOCAL_USER}
    if store is not None:
        from ..batch import Batches

        names |= {u.id: u.name for u in store.list_users()}
        owner = None if user is None else next((i for i, n in names.items() if n == user), None)
        if user is not None and owner is None:
            fail(f"no user {user!r}: `delegate users list` names them (`default` is the command line's)")
        batches = Batches(store).list_batches(owner, limit=limit)
    if as_json:
        rows = [{**b.to_dict(), "user": names.get(b.user_id, b.user_id)} for b in batches]
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    if not batches:
        typer.echo("No batches yet: submit one with `delegate batch submit FILE.jsonl --type T`.")
        return
    _print_batches(batches, names)


def _print_batches(batches: list[Batch], names: dict[str, str]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False)
    for name in ("batch", "user", "status", "done", "created", "tokens", "cost"):
        table.add_column(name, no_wrap=True)
    table.add_column("title", ratio=1, no_wrap=True, overflow="ellipsis")
    for b in batches:
        cost = "?" if b.usage.cost_usd is None else cost_text(b.usage.cost_usd)
        table.add_row(
            b.id,
            names.get(b.user_id, b.user_id),
            b.status,
            f"{_ended(b)}/{b.total}",
            b.created_at.strftime("%Y-%m-%d %H:%M"),
            f"{b.usage.input_tokens + b.usage.output_tokens:,}",
            cost,
            b.title,
        )
    Console().print(table)


@batch_app.command()
def status(batch_id: BatchId, as_json: AsJson = False, workspace: Workspace = Path("."), db: Db = None) -> None:
    """A batch's status and its item counts per status."""
    batches = open_batches(workspace, db, read_only=True)
    batch = guarded(lambda: batches.get(OPERATOR, batch_id))
    typer.echo(json.dumps(batch.to_dict(), ensure_ascii=False) if as_json else batch.render())


@batch_app.command()
def items(
    batch_id: BatchId,
    status: Annotated[
        str | None, typer.Option("--status", help="queued, running, succeeded, failed, cancelled")
    ] = None,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 100,
    as_json: AsJson = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """A page of a batch's items, optionally of one status."""
    batches = open_batches(workspace, db, read_only=True)
    rows = guarded(lambda: batches.items(OPERATOR, batch_id, status=status, offset=offset, limit=limit))  # pyright: ignore[reportArgumentType]
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], ensure_ascii=False))
        return
    for row in rows:
        data = row.to_dict()
        summary = (data.get("summary") or data.get("error") or "").replace("\n", " ")[:80]
        typer.echo(f"{data['key']}\t{data['status']}\t{data['attempts']}\t{summary}")


@batch_app.command()
def pause(batch_id: BatchId, workspace: Workspace = Path("."), db: Db = None, engine: EngineOption = None) -> None:
    """No new items start; running ones finish."""
    batches = open_batches(workspace, db)
    changed = guarded(lambda: batches.pause(OPERATOR, batch_id))
    tell_engine(engine, batches, batch_id)
    typer.echo(changed.render())


@batch_app.command()
def resume(batch_id: BatchId, workspace: Workspace = Path("."), db: Db = None, engine: EngineOption = None) -> None:
    """Let a paused batch start items again (a worker runs them)."""
    batches = open_batches(workspace, db)
    changed = guarded(lambda: batches.resume(OPERATOR, batch_id))
    tell_engine(engine, batches, batch_id)
    typer.echo(changed.render())


@batch_app.command()
def cancel(batch_id: BatchId, workspace: Workspace = Path("."), db: Db = None, engine: EngineOption = None) -> None:
    """Cancel for good: queued items never start, running ones are stopped, even across restarts."""
    batches = open_batches(workspace, db)
    changed = guarded(lambda: batches.cancel(OPERATOR, batch_id))
    tell_engine(engine, batches, batch_id)
    typer.echo(changed.render())


@batch_app.command()
def retry(
    batch_id: BatchId,
    key: Annotated[str | None, typer.Option("--key", help="Retry this failed item only.")] = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    engine: EngineOption = None,
) -> None:
    """Queue failed items again: all of them, or one with --key."""
    batches = open_batches(workspace, db)
    count = guarded(lambda: batches.retry(OPERATOR, batch_id, key))
    if count:
        tell_engine(engine, batches, batch_id)
    typer.echo(f"{plural(count, 'item')} queued again; a worker runs {'it' if count == 1 else 'them'}.")


@batch_app.command()
def export(
    batch_id: BatchId,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Results as JSON Lines: key, status, attempts, summary, artifacts, usage (every attempt's), acceptance."""
    batches = open_batches(workspace, db, read_only=True)
    guarded(lambda: batches.get(OPERATOR, batch_id))
    if output is None:
        _write_rows(batches, batch_id, sys.stdout.write)
        return
    partial = output.with_name(output.name + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        _write_rows(batches, batch_id, out.write)
    partial.replace(output)


def _write_rows(batches: Batches, batch_id: str, write: Callable[[str], Any]) -> None:
    for row in guarded(lambda: batches.export_rows(OPERATOR, batch_id)):
        write(json.dumps(row, ensure_ascii=False) + "\n")


@batch_app.command()
@operator_flags
def worker(
    model: WorkerModel = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Items this process runs at once.")] = 500,
    workspace: Workspace = Path("."),
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Run queued and interrupted items of every batch, here or on any machine sharing the database,
    until stopped (Ctrl-C or SIGTERM). Runs of `delegate serve` whose process died are taken over
    too, as a server does (at start, then every 5 s). The same as `delegate worker`."""
    serve_worker(model=model, concurrency=concurrency, name=None, workspace=workspace, db=db, flags=flags)
