"""`delegate runs list|show|events|export|cancel|stop`: runs as the store has them, from any process.

A run whose process died reads `interrupted` (`delegate run --resume ID` continues it); `cancel`
works from another process: the run's owner stops at its next heartbeat, and an interrupted run
is recorded `cancelled` at once. `events --follow` tails a run that another process runs, until
it ends (or its process dies).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._config import CANCEL_WAIT
from .._record import LIVE_STATUSES, STATUSES
from .._text import plural, shown_arguments
from .._usage import cost_text, usage_line
from ._common import Db, Workspace, fail, open_store, read_store
from ._workflow import workflow_lines

if TYPE_CHECKING:
    from .._events import Event
    from .._record import TaskOutput
    from .._store import RunRow, Store
    from ..run import RunResult

runs_app = typer.Typer(help="Runs of the lead agent, as the store has them.", no_args_is_help=True)

RunId = Annotated[str, typer.Argument(help="The run's id.")]
LatestRunId = Annotated[str | None, typer.Argument(help="The run's id (default: the latest run).")]
FOLLOW_INTERVAL = 0.2
"""How often `delegate runs events --follow` looks for new events in the store."""
TEXT_DATA = 160
"""Characters of an event's data shown on a line of `delegate runs events` (`--json` gives all)."""


def register(app: typer.Typer) -> None:
    from . import _approve

    _approve.register(runs_app)
    app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    workspace: Workspace = Path("."),
    db: Db = None,
    status: Annotated[
        str | None, typer.Option("--status", help=f"Only runs with this status: {', '.join(STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 50,
    thread: Annotated[
        str | None,
        typer.Option("--thread", help="Only this thread's runs, in order (a thread's id is its first run's)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array, a run an object.")] = False,
) -> None:
    """The runs, newest first (with --thread: one thread's runs, oldest first)."""
    if status is not None and status not in STATUSES:
        fail(f"unknown status {status!r}: use one of {', '.join(STATUSES)}")
    store = read_store(workspace, db)  # reading creates no store where it is run
    if store is None:
        runs = []
        if thread is not None:
            fail(f"no thread {thread!r}: this workspace has no runs yet")
    elif thread is not None:
        runs = [r for r in store.thread_runs(thread) if status is None or r.status == status][:limit]
        if not runs and not store.thread_runs(thread):
            fail(f"no thread {thread!r}: the thread column of `delegate runs list` names them")
    else:
        runs = store.listing(limit=limit, status=status)  # type: ignore[arg-type]
    if as_json:
        typer.echo(json.dumps([run.to_dict() for run in runs], ensure_ascii=False))
        return
    if not runs:
        typer.echo(_no_runs(store is not None, status, thread))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    # The ids are what `--resume`, `runs show` and `--thread` take: no cell but the prompt is ever cut,
    # and the thread column is there only when a listed run continues a thread (else it repeats the id)
    # and not under --thread (it would say the same on every line).
    threads = thread is None and any(run.thread_id not in (None, run.id) for run in runs)
    rows = [
        [
            run.id,
            run.status,
            run.created_at.strftime("%Y-%m-%d %H:%M"),
            f"{run.usage.input_tokens + run.usage.output_tokens:,}",
            "?" if run.usage.cost_usd is None else cost_text(run.usage.cost_usd),
            *([run.thread_id or run.id] if threads else []),
        ]
        for run in runs
    ]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False)
    names: list[str] = ["run", "status", "started", "tokens", "cost", *(["thread"] if threads else [])]
    for i, name in enumerate(names):
        table.add_column(name, no_wrap=True, min_width=max(len(name), *(len(row[i]) for row in rows)))
    table.add_column("prompt", ratio=1, no_wrap=True, overflow="ellipsis")
    for run, row in zip(runs, rows, strict=True):
        table.add_row(*row, run.prompt[:60])
    Console().print(table)


def _no_runs(stored: bool, status: str | None, thread: str | None) -> str:
    """What `runs list` says when it lists nothing: that the workspace has no runs only when it has
    none, else that none matches the filter."""
    if stored and status is not None:
        return f"No {status} runs" + (f" in thread {thread}." if thread else ".")
    return "No runs yet: start one with `delegate run PROMPT`."


@runs_app.command("show")
def runs_show(
    run_id: LatestRunId = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    as_json: Annotated[bool, typer.Option("--json", help="The same JSON object as `delegate run --json`.")] = False,
) -> None:
    """One run (default: the latest): its status, final answer, usage and subagents."""
    from ..run import stored_result

    store, run_id = _stored(workspace, db, run_id)
    result = stored_result(store, run_id)
    if result is None:
        fail(f"no run {run_id!r}: list the runs with `delegate runs list`")
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
        return
    usage = result.usage
    typer.echo(f"run {result.run_id}: {result.status}" + (f" ({result.error})" if result.error else ""))
    typer.echo(f"usage: {usage_line(usage)}")
    _show_agents(store, result)
    if result.status in ("running", "waiting"):  # what `delegate runs stop` takes: not recorded until they end
        for agent_id, data in _running_subagents(store, run_id, {sub.id for sub in result.subagents}):
            phase = f" · phase {data['phase']}" if data.get("phase") else ""
            typer.echo(f"  {agent_id} [running] {data.get('type')}: {data.get('description')}{phase}")
    for agent_id, todos in result.todos.items():
        done = sum(t["status"] == "completed" for t in todos)
        typer.echo(f"  todos of {agent_id} ({done}/{len(todos)} completed):")
        for todo in todos:
            mark = {"completed": "[x]", "in_progress": "[>]"}.get(todo["status"], "[ ]")
            typer.echo(f"    {mark} {todo['content']}")
    for call in result.pending_approvals:  # what `delegate runs approve` takes, with what it would decide
        rule = f" (rule {call['rule']})" if call.get("rule") else ""
        text = shown_arguments(call.get("arguments") or {})
        typer.echo(f"  waiting for a person: {call['call_id']} {call['agent_id']} {call['tool']}{rule}")
        typer.echo(f"    arguments ({len(text):,} characters): " + text.replace("\n", "\n    "))
    if result.pending_approvals:
        typer.echo(f"decide with `delegate runs approve {result.run_id} CALL_ID ...` or `--all` (`--deny` to refuse)")
    if result.final:
        from ._render import print_answer

        print_answer(result.final)


@runs_app.command("events")
def runs_events(
    run_id: LatestRunId = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON Lines: one JSON object an event, a line each (not one array).")
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Go on printing new events until the run ends (or its process dies).")
    ] = False,
) -> None:
    """A run's events in order (default: the latest run's); --follow tails a live run, whichever process runs it."""
    from ..run import stored_events

    store, run_id = _stored(workspace, db, run_id)
    _known(store, run_id)
    show = _json_line if as_json else _text_line
    if not follow:
        for seq, event in _all_events(store, run_id):
            typer.echo(show(seq, event))
        return

    async def tail() -> None:
        step = stored_events(store, run_id, 0)
        while True:
            found, done = await step()
            for seq, event in found:
                typer.echo(show(seq, event))
            if done:
                return
            if not found:
                await asyncio.sleep(FOLLOW_INTERVAL)

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@runs_app.command("export")
def runs_export(run_id: LatestRunId = None, workspace: Workspace = Path("."), db: Db = None) -> None:
    """The run (default: the latest), its subagent records and every event, as one JSON document."""
    from ..run import stored_run

    store, run_id = _stored(workspace, db, run_id)
    found = stored_run(store, run_id)
    if found is None:
        fail(f"no run {run_id!r}: list the runs with `delegate runs list`")
    run, data = found
    head = data | {"uploaded_files": run.uploaded_files}
    # Written as it is read, a page of events at a time: a run of any length is exported whole.
    out = sys.stdout
    out.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "events": [')
    for seq, event in _all_events(store, run_id):
        out.write(("" if seq == 1 else ", ") + _json_line(seq, event))
    out.write("]}\n")


@runs_app.command("cancel")
def runs_cancel(
    run_id: RunId,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Cancel a run, whichever process runs it; wait (a little) until it is recorded cancelled."""
    store = open_store(workspace, db)
    run = store.request_cancel(run_id)
    deadline = time.monotonic() + CANCEL_WAIT
    while run.status in LIVE_STATUSES and time.monotonic() < deadline:
        time.sleep(0.1)
        found = store.get_run(run_id)
        assert found is not None
        run = found
    if run.status in LIVE_STATUSES:
        typer.echo(f"run {run_id}: cancellation asked; its process has not stopped yet", err=True)
        raise typer.Exit(1)
    typer.echo(f"run {run_id}: {run.status}")


def _stored(workspace: Path, db: str | None, run_id: str | None) -> tuple[Store, str]:
    """The store and the run a reading command is about: `run_id`, or the latest run. Exit 2
    when there is no store or no run yet (nothing is created)."""
    store = read_store(workspace, db)
    if store is None:
        fail(
            "no runs yet: start one with `delegate run PROMPT`"
            if run_id is None
            else f"no run {run_id!r}: list the runs with `delegate runs list`"
        )
    if run_id is None:
        latest = store.list_runs(None, limit=1)
        if not latest:
            fail("no runs yet: start one with `delegate run PROMPT`")
        run_id = latest[0].id
    return store, run_id


@runs_app.command("stop")
def runs_stop(
    run_id: RunId,
    agent_id: Annotated[str, typer.Argument(help="The subagent's id (sub1, sub2, ...: see `delegate runs show`).")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why, for the record and for the lead.")] = None,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Stop one subagent of a running run, whichever process runs it: it ends cancelled (stop
    reason `stopped`), and the lead gets its result and goes on. Waits (a little) until it is recorded."""
    store = open_store(workspace, db)
    store.request_stop(run_id, agent_id, reason)
    deadline = time.monotonic() + CANCEL_WAIT
    while (record := _record_of(store, run_id, agent_id)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if record is None:
        typer.echo(f"run {run_id}: stopping {agent_id} asked; its process has not stopped it yet", err=True)
        raise typer.Exit(1)
    why = f" ({record.stop_reason})" if record.stop_reason else ""
    typer.echo(f"run {run_id}: {agent_id} {record.status}{why}")


def _show_agents(store: Store, result: RunResult) -> None:
    """A workflow's record (with its script), then each subagent of the run that ended, a
    workflow's with its phase and the script's line that started it."""
    if result.workflow is not None:
        run = store.get_run(result.run_id)
        script = run.workflow.get("script") if run is not None and run.workflow is not None else None
        for line in workflow_lines(result.workflow, script if isinstance(script, str) else None):
            typer.echo(line)
    placed = {a["id"]: a for a in (result.workflow or {}).get("agents", []) if a.get("id")}
    for sub in in_tree(result.subagents):
        kind = (" (background)" if sub.background else "") + (
            f", {plural(sub.messages, 'follow-up')}" if sub.messages else ""
        )
        where = _placed(placed.get(sub.id))
        below = f" (depth {sub.depth}, started by {sub.parent_agent_id})" if sub.depth > 1 else ""
        typer.echo(
            f"{'  ' * sub.depth}{sub.id} [{sub.status}] {sub.type}: {sub.description}{kind}{where}{below} · "
            f"{cost_text(sub.usage.cost_usd)}"
        )


def in_tree(records: list[TaskOutput]) -> list[TaskOutput]:
    """`records` with each nested subagent right after its parent (and its parent's earlier
    children), the lead's subagents in call order."""
    ids = {r.id for r in records}
    children: dict[str | None, list[TaskOutput]] = {}
    for record in records:
        children.setdefault(record.parent_agent_id if record.parent_agent_id in ids else None, []).append(record)
    ordered: list[TaskOutput] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        record = stack.pop()
        ordered.append(record)
        stack.extend(reversed(children.get(record.id, [])))
    return ordered


def _placed(agent: dict[str, Any] | None) -> str:
    """Where a workflow's agent came from: " · phase review, line 9" ("" for the lead's)."""
    if agent is None:
        return ""
    parts = [f"phase {agent['phase']}"] if agent.get("phase") else []
    if agent.get("line"):
        parts.append(f"line {agent['line']}")
    return f" · {', '.join(parts)}" if parts else ""


def _record_of(store: Store, run_id: str, agent_id: str) -> TaskOutput | None:
    """`agent_id`'s record once it ended (None while it runs, or before it is stored)."""
    for record in store.subagent_records(run_id):
        if record.id == agent_id and record.status != "running":
            return record
    run = store.get_run(run_id)
    if run is not None and run.status not in LIVE_STATUSES:
        fail(f"run {run_id} ended ({run.status}) before {agent_id} was recorded stopped")
    return None


def _known(store: Store, run_id: str) -> RunRow:
    run = store.get_run(run_id)
    if run is None:
        fail(f"no run {run_id!r}: list the runs with `delegate runs list`")
    return run


def _running_subagents(store: Store, run_id: str, ended: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The subagents of a live run that started (their `subagent.started` events) and have no
    record yet, with their type and description, in the order they started."""
    started: dict[str, dict[str, Any]] = {}
    for _, event in _all_events(store, run_id):
        if event.type == "subagent.started" and event.agent_id not in ended:
            started[event.agent_id] = event.data
        elif event.type == "subagent.completed":
            started.pop(event.agent_id, None)
    return list(started.items())


def _all_events(store: Store, run_id: str) -> Iterator[tuple[int, Event]]:
    """Every stored event of the run with its number, read a page at a time."""
    from ..run import PAGE

    seq = 0
    while page := store.events(run_id, seq, PAGE):
        for event in page:
            seq += 1
            yield seq, event


def _json_line(seq: int, event: Event) -> str:
    return json.dumps({"seq": seq, **event.to_dict()}, ensure_ascii=False)


def _text_line(seq: int, event: Event) -> str:
    """`seq time agent type data`, the data cut to one short line."""
    at = datetime.fromtimestamp(event.ts, UTC).strftime("%H:%M:%S.%f")[:-3]
    data = json.dumps(event.data, ensure_ascii=False).replace("\n", " ")
    data = data if len(data) <= TEXT_DATA else data[: TEXT_DATA - 1] + "…"
    return f"{seq:>5} {at} {event.agent_id} {event.type} {data}"
