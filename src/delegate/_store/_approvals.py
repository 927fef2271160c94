"""Calls waiting for a person, and the decisions given, in the store (table `approvals`).

A call under an `ask` permission rule is stored (`request`) before anyone is asked; a decision is
stored (`decide`) before the call acts on it, the first one given winning. The run's `waiting`
column counts its calls still undecided, so every listing reads the run `waiting` without a join.
A run that ends closes the calls still waiting (`close`): none of them will run, so none is listed
as waiting or takes a decision. An interrupted run's stay open (a decision may still be given),
until it is resumed (`reopen`): the questions of a process that died go with it, and the resumed
run asks again for the calls it makes again (replayed: the same ids), only for those.
Any process on the same store may decide: the run's own process finds the decision at its next
heartbeat (see `delegate.run._approvals`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter
from pydantic_core import from_json, to_json
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .._errors import StoreError, UserError
from .._record import DECISIONS, ApprovalRow, Decision
from .._time import iso, utc_now
from ._schema import approvals_table, runs_table

__all__ = ["DECISIONS", "ApprovalRow", "Decision", "close", "decide", "decided", "get", "listed", "reopen", "request"]


_row: TypeAdapter[ApprovalRow] = TypeAdapter(ApprovalRow)


def decode(row: sa.RowMapping) -> ApprovalRow:
    values = dict(row)
    try:
        values["arguments"] = from_json(values["arguments"])
        return _row.validate_python(values)
    except ValueError as exc:
        raise StoreError(
            f"approvals row {values.get('call_id')!r} (run {values.get('run_id')!r}) holds data delegate cannot "
            f"read ({exc}); it was changed outside delegate or by another version"
        ) from None


def request(conn: Connection, row: ApprovalRow) -> ApprovalRow:
    """Store a call that waits (`row`), unless it is stored already (a resumed run asks again for
    the same call): then the stored one, with its decision if one was given."""
    found = get(conn, row.run_id, row.call_id)
    if found is not None:
        return found
    values: dict[str, Any] = {
        "run_id": row.run_id,
        "call_id": row.call_id,
        "agent_id": row.agent_id,
        "parent_agent_id": row.parent_agent_id,
        "subagent_type": row.subagent_type,
        "description": row.description,
        "tool": row.tool,
        "arguments": to_json(row.arguments).decode(),
        "rule": row.rule,
        "requested_at": iso(row.requested_at),
        "decision": row.decision,
        "reason": row.reason,
        "decided_at": iso(row.decided_at),
        "always": row.always,
    }
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(approvals_table)
    insert = insert.values(values).on_conflict_do_nothing().returning(approvals_table.c.call_id)
    if conn.execute(insert).first() is None:
        # stored by another transaction since `get` looked (PostgreSQL's read committed): that one
        return get(conn, row.run_id, row.call_id) or row
    _count(conn, row.run_id)
    return row


def decide(
    conn: Connection, run_id: str, call_id: str, decision: Decision, reason: str | None, always: bool = False
) -> ApprovalRow:
    """Record the decision of a waiting call (`always`: an approval of its rule's later calls too);
    `UserError` when there is no such call or it was decided already (the first decision stands),
    or a decision that is neither, or a denial `always`."""
    if decision not in DECISIONS:
        raise UserError(f"decision {decision!r}: give approve or deny")
    if always and decision != "approve":
        raise UserError("only an approval can be given always (for the rest of the run's calls of its rule)")
    found = get(conn, run_id, call_id)
    if found is None:
        raise UserError(f"run {run_id} has no call {call_id!r} waiting for a decision: `delegate runs show` lists them")
    if found.decision is not None:
        raise UserError(f"call {call_id} of run {run_id} was decided already ({found.decision}): nothing to do")
    now = utc_now()
    table = approvals_table.c
    update = approvals_table.update().where(table.run_id == run_id, table.call_id == call_id, table.decision.is_(None))
    values = {"decision": decision, "reason": reason, "decided_at": iso(now), "always": always}
    if conn.execute(update.values(values)).rowcount != 1:
        # decided (or closed) by another transaction since it was read (PostgreSQL's read committed)
        stored = get(conn, run_id, call_id)
        raise UserError(f"call {call_id} of run {run_id} was decided already ({stored and stored.decision})")
    _count(conn, run_id)
    found.decision, found.reason, found.decided_at, found.always = decision, reason, now, always
    return found


_CLOSE = sa.text(
    "UPDATE approvals SET decision = 'deny', reason = :reason, decided_at = :decided_at"
    " WHERE run_id = :run_id AND decision IS NULL"
)
"""Deny a run's calls still waiting (`close`). Text, the same on both backends: every run that
ends runs it, and an `update()` is compiled once for each database a process opens (0.5 ms)."""


def close(conn: Connection, run_id: str, status: str) -> None:
    """The run ended (`status`): its calls still waiting will never run. They are denied, the
    reason saying so, and no longer listed as waiting nor open to a decision."""
    reason = f"the run ended ({status}) before anyone decided"
    if conn.execute(_CLOSE, {"reason": reason, "decided_at": iso(utc_now()), "run_id": run_id}).rowcount:
        conn.execute(runs_table.update().where(runs_table.c.id == run_id).values(waiting=0))


def reopen(conn: Connection, run_id: str) -> None:
    """The interrupted run `run_id` is resumed: its calls still undecided are forgotten (their
    decisions kept). A call the resumed run makes again asks again, under the same id; one it does
    not make (its answer was not yet stored, or the rules that asked are not the resumed run's) is
    never listed as waiting, nor closed as denied, in a run that may run it."""
    table = approvals_table.c
    if conn.execute(approvals_table.delete().where(table.run_id == run_id, table.decision.is_(None))).rowcount:
        conn.execute(runs_table.update().where(runs_table.c.id == run_id).values(waiting=0))


def get(conn: Connection, run_id: str, call_id: str) -> ApprovalRow | None:
    table = approvals_table.c
    query = sa.select(approvals_table).where(table.run_id == run_id, table.call_id == call_id)
    row = conn.execute(query).mappings().first()
    return None if row is None else decode(row)


def listed(conn: Connection, run_id: str, *, pending: bool, under: str | None = None) -> list[ApprovalRow]:
    table = approvals_table.c
    query = sa.select(approvals_table).where(table.run_id == run_id).order_by(table.requested_at, table.call_id)
    if pending:
        query = query.where(table.decision.is_(None))
    if under is not None:  # the id and `<id>_...` (a LIKE pattern, its own wildcards escaped)
        like = under.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "\\_%"
        query = query.where(sa.or_(table.call_id == under, table.call_id.like(like, escape="\\")))
    return [decode(row) for row in conn.execute(query).mappings()]


def decided(conn: Connection, run_id: str, call_ids: list[str]) -> list[ApprovalRow]:
    """The calls of `call_ids` that have a decision."""
    table = approvals_table.c
    query = sa.select(approvals_table).where(
        table.run_id == run_id, table.call_id.in_(call_ids), table.decision.is_not(None)
    )
    return [decode(row) for row in conn.execute(query).mappings()]


def _count(conn: Connection, run_id: str) -> None:
    table = approvals_table.c
    waiting = (
        sa.select(sa.func.count())
        .select_from(approvals_table)
        .where(table.run_id == run_id, table.decision.is_(None))
        .scalar_subquery()
    )
    conn.execute(runs_table.update().where(runs_table.c.id == run_id).values(waiting=waiting))
