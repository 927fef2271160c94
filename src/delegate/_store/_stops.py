"""Stops of one subagent asked from another process (`delegate runs stop`, the HTTP API): kept in
the run's `stop_requests` column until its owner takes them at its next heartbeat."""

from __future__ import annotations

import json
import re

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._errors import UserError
from ._rows import decode_events
from ._schema import events_table, runs_table, subagents_table

_AGENT_ID = re.compile(r"sub[0-9]{1,9}")
"""What a subagent's id looks like (`sub1`, `sub2`, ...)."""


def check_agent_id(run_id: str, agent_id: str) -> None:
    """`UserError` unless `agent_id` looks like a subagent's id."""
    if not _AGENT_ID.fullmatch(agent_id):
        raise UserError(
            f"{agent_id!r} is not a subagent id: use one such as sub3 (`delegate runs show {run_id}` lists them)"
        )


def ask_stop(conn: Connection, run_id: str, agent_id: str, reason: str | None) -> None:
    """Keep the stop of `agent_id` for the run's owner; `UserError` if that subagent ended, or
    never started (the run's events hold no start of it: a stop of it would be taken for nothing)."""
    subagents = subagents_table.c
    status = conn.scalar(sa.select(subagents.status).where(subagents.id == f"{run_id}/{agent_id}"))
    if status is not None and status != "running":
        raise UserError(f"subagent {agent_id} of run {run_id} already ended ({status}): nothing to stop")
    if status is None and not _started(conn, run_id, agent_id):
        raise UserError(f"no subagent {agent_id} in run {run_id}: `delegate runs show {run_id}` lists them")
    held = conn.scalar(sa.select(runs_table.c.stop_requests).where(runs_table.c.id == run_id))
    asked = stop_requests(held) if held is not None else {}
    asked[agent_id] = reason
    update = runs_table.update().where(runs_table.c.id == run_id, runs_table.c.status == "running")
    conn.execute(update.values(stop_requests=json.dumps(asked)))


def stop_requests(text: str) -> dict[str, str | None]:
    """The `stop_requests` column read back: agent id to reason, anything else left out."""
    try:
        found: object = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    asked: dict[str, str | None] = {}
    for agent, reason in found.items():  # pyright: ignore[reportUnknownVariableType]
        if isinstance(agent, str) and (reason is None or isinstance(reason, str)):
            asked[agent] = reason
    return asked


def _started(conn: Connection, run_id: str, agent_id: str) -> bool:
    """Whether the run's stored events hold a `subagent.started` of `agent_id` (read only for a
    subagent with no record: rows of one event of another type are passed over unread)."""
    table = events_table.c
    query = sa.select(events_table).where(table.run_id == run_id, sa.or_(table.n > 1, table.type == "subagent.started"))
    for row in conn.execute(query).mappings():
        if any(e.type == "subagent.started" and e.agent_id == agent_id for e in decode_events(row)):
            return True
    return False
