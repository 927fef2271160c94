"""The runs listing of `GET /runs` (and the page's table): one query a request that checks the
caller's token, filters by prompt text and status, pages, and counts each run's subagents."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from .._record import LIVE_STATUSES, Status
from ._db import select_rows
from ._rows import SUMMARY_COLUMNS, SUMMARY_PROMPT_CHARS, RunSummary, decode_run_summaries
from ._schema import runs_table, subagents_table

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

STORED_LIVE: frozenset[Status] = frozenset({*LIVE_STATUSES, "interrupted"})
"""Statuses a run reads that are all stored `running` (which one is decided on reading)."""


@functools.cache
def _statement(search: bool, status: Status | None, owned: bool = True) -> sa.Select[Any]:
    """The listing for one shape of request, built once (a statement built anew on each call costs
    more than running it); its parameters are bound by name."""
    runs, subs = runs_table.c, subagents_table.c
    of_run = subs.run_id == runs.id
    counted = sa.select(sa.func.count()).where(of_run).correlate(runs_table).scalar_subquery()
    failed = (
        sa.select(sa.func.count())
        .where(of_run, *(subs.status != ok for ok in ("completed", *sorted(LIVE_STATUSES))))
        .correlate(runs_table)
        .scalar_subquery()
    )
    columns = [
        sa.func.substr(runs.prompt, 1, SUMMARY_PROMPT_CHARS).label("prompt") if name == "prompt" else runs[name]
        for name in SUMMARY_COLUMNS
    ]
    query = sa.select(*columns, counted.label("subagent_count"), failed.label("failed_subagents")).order_by(
        runs.created_at.desc(), runs.id.desc()
    )
    if owned:
        query = query.where(runs.user_id == sa.bindparam("user_id"))
    if search:
        query = query.where(runs.prompt.icontains(sa.bindparam("q"), escape="/"))
    if status in STORED_LIVE:
        return query.where(runs.status == "running")  # paged once read, see `run_listing`
    if status is not None:
        query = query.where(runs.status == status)
    return query.limit(sa.bindparam("limit")).offset(sa.bindparam("offset"))


def run_listing(
    conn: Connection, user_id: str | None, *, limit: int, offset: int, query: str | None, status: Status | None
) -> list[RunSummary]:
    """The page of `user_id`'s runs (every run's when None: the CLI's) that match (see
    `Store.run_summaries`), with their subagent counts, read in one statement."""
    params: dict[str, Any] = {"user_id": user_id, "limit": limit, "offset": offset}
    if query:
        params["q"] = query.replace("/", "//").replace("%", "/%").replace("_", "/_")  # matched as typed
    rows = select_rows(conn, _statement(bool(query), status, user_id is not None), params)
    width = len(SUMMARY_COLUMNS)
    runs = decode_run_summaries([row[:width] for row in rows])
    for run, row in zip(runs, rows, strict=True):
        run.subagent_count, run.failed_subagents = int(row[width]), int(row[width + 1])
    if status in STORED_LIVE:
        runs = [run for run in runs if run.status == status][offset : offset + limit]
    return runs
