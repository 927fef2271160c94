"""Threads in the store: a run may continue an earlier one, and the chain of runs is a thread.

A run's `thread_id` is the id of its thread's first run; its `previous_run_id` the run it
continues. No two runs continue the same run (the unique index `runs_previous_run`): two
continues of one run race inside the database, on SQLite and PostgreSQL alike, and the loser is
told which run won. A run still going (`running`, `waiting`) or `interrupted` cannot be continued
until it ends: the check and the insert are one write transaction (see `Store.create_run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import AwareDatetime

from .._errors import UserError
from .._time import iso
from .._usage import Usage
from ._rows import SUMMARY_COLUMNS, SUMMARY_PROMPT_CHARS, RunRow, RunSummary, decode_run, decode_run_summaries
from ._schema import runs_table

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from ._store import Store

__all__ = [
    "ThreadSummary",
    "already_continued",
    "continuable",
    "latest_run",
    "thread_rows",
    "threads_of",
    "why_not_continuable",
]


@dataclass(kw_only=True, slots=True)
class ThreadSummary:
    """A thread as `GET /threads` lists it: its runs' summaries, oldest first."""

    thread_id: str
    runs: list[RunSummary]

    @property
    def updated_at(self) -> AwareDatetime:
        return self.runs[-1].created_at

    def to_dict(self) -> dict[str, Any]:
        """`thread_id`, the last run's `status` and id, how many `turns`, the first `prompt`, the
        `usage` of all its runs together, when it was created and last continued."""
        first, last = self.runs[0], self.runs[-1]
        return {
            "thread_id": self.thread_id,
            "status": last.status,
            "last_run_id": last.id,
            "turns": len(self.runs),
            "prompt": first.prompt,
            "usage": sum((r.usage for r in self.runs), Usage()).to_dict(),
            "created_at": iso(first.created_at),
            "updated_at": iso(last.created_at),
        }


def continuable(conn: Connection, run_id: str, user_id: str | None) -> str:
    """The thread of `run_id` if it can be continued now (in the caller's write transaction);
    `UserError` saying why not and what to do: no such run (of `user_id`), or it has not ended."""
    query = sa.select(runs_table).where(runs_table.c.id == run_id)
    if user_id is not None:
        query = query.where(runs_table.c.user_id == user_id)
    row = conn.execute(query).mappings().first()
    if row is None:
        raise UserError(f"no run {run_id!r} to continue: list the runs with `delegate runs list`")
    run = decode_run(row)
    why = why_not_continuable(run)
    if why is not None:
        raise UserError(why)
    return run.thread_id or run.id


def why_not_continuable(run: RunRow) -> str | None:
    """Why `run` cannot be continued now, and what to do (None: it can be): it has not ended."""
    status = str(run.status)  # `waiting` is named before every store knows it
    if status == "running":
        return (
            f"run {run.id} is still running: wait for it to end (or cancel it: `delegate runs cancel {run.id}`), "
            "then continue it"
        )
    if status == "waiting":
        return (
            f"run {run.id} is waiting for a person to approve a call: decide with `delegate runs approve {run.id}` "
            "and let it end, then continue it"
        )
    if status == "interrupted":
        return (
            f"run {run.id} was interrupted: resume it (`delegate run --resume {run.id}`) or cancel it "
            f"(`delegate runs cancel {run.id}`), then continue it"
        )
    return None


def already_continued(store: Store, run_id: str, user_id: str | None) -> UserError:
    """The error of a continue that lost the race: which run continued `run_id`, and which run
    of the thread to continue instead."""
    with store.read() as conn:
        query = sa.select(runs_table.c.id, runs_table.c.thread_id).where(runs_table.c.previous_run_id == run_id)
        winner = conn.execute(query).first()
    if winner is None:  # not a lost race after all: a run id given twice
        return UserError(f"run {run_id} could not be continued: a run of that id exists already")
    last = store.thread_runs(winner.thread_id, user_id)[-1].id
    return UserError(
        f"run {run_id} was already continued by run {winner.id} (thread {winner.thread_id}): "
        f"continue the thread's last run, {last}"
    )


def _thread_page(user_id: str | None, limit: int, offset: int) -> sa.Select[Any]:
    r = runs_table.c
    latest = sa.func.max(r.created_at).label("updated_at")
    page = sa.select(r.thread_id).group_by(r.thread_id).order_by(latest.desc(), r.thread_id.desc())
    if user_id is not None:
        page = page.where(r.user_id == user_id)
    return page.limit(limit).offset(offset)


def threads_of(store: Store, user_id: str | None, limit: int, offset: int) -> list[ThreadSummary]:
    """The threads of `user_id` (every one when None), the last continued first: two reads."""
    columns = [
        sa.func.substr(runs_table.c.prompt, 1, SUMMARY_PROMPT_CHARS).label("prompt")
        if name == "prompt"
        else runs_table.c[name]
        for name in SUMMARY_COLUMNS
    ]
    with store.read() as conn:
        ids = list(conn.scalars(_thread_page(user_id, limit, offset)))
        query = (
            sa.select(*columns)
            .where(runs_table.c.thread_id.in_(ids))
            .order_by(runs_table.c.created_at, runs_table.c.id)
        )
        rows = [tuple(row) for row in conn.execute(query)] if ids else []
    found: dict[str, list[RunSummary]] = {thread_id: [] for thread_id in ids}
    for run in decode_run_summaries(rows):
        found[run.thread_id or run.id].append(run)
    return [ThreadSummary(thread_id=t, runs=runs) for t, runs in found.items() if runs]


def thread_rows(store: Store, thread_id: str, user_id: str | None) -> list[RunRow]:
    """The runs of a thread (of `user_id`, when given), in order; empty for an unknown thread."""
    query = (
        sa.select(runs_table)
        .where(runs_table.c.thread_id == thread_id)
        .order_by(runs_table.c.created_at, runs_table.c.id)
    )
    if user_id is not None:
        query = query.where(runs_table.c.user_id == user_id)
    with store.read() as conn:
        seen: dict[str, bool] = {}
        return [decode_run(row, seen) for row in conn.execute(query).mappings()]


def latest_run(store: Store, user_id: str | None, workspace: str | None) -> RunRow | None:
    """The newest run (of `user_id`, in `workspace`, when given): what `--continue` with no id takes."""
    query = sa.select(runs_table).order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc()).limit(1)
    if user_id is not None:
        query = query.where(runs_table.c.user_id == user_id)
    if workspace is not None:
        query = query.where(runs_table.c.workspace == workspace)
    with store.read() as conn:
        row = conn.execute(query).mappings().first()
    return None if row is None else decode_run(row)
