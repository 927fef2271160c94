"""The migrations of the batch tables (`Store.migrate` applies them, `Batches(store)` asks it to),
and the frozen schemas they build. A released migration never changes: a new schema change is a
new migration at the end of `BATCH_MIGRATIONS`, with a frozen copy of any table it builds."""

from __future__ import annotations

import json
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._store import Migration


def batch_tables_0001(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table, sa.Table]:
    """The schema as migration `batch.0001_tables` created it (frozen)."""
    text = sa.Text
    batches = sa.Table(
        "batches",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("user_id", text, nullable=False),
        sa.Column("run_id", text, nullable=True),
        sa.Column("tool_call_id", text, nullable=True),
        sa.Column("title", text, nullable=False),
        sa.Column("subagent_type", text, nullable=False),
        sa.Column("model", text, nullable=True),
        sa.Column("max_running", sa.Integer, nullable=False),
        sa.Column("max_live", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("state", text, nullable=False),
        # Bumped by resume and retry, so a worker starts a fresh serving session.
        sa.Column("epoch", sa.Integer, nullable=False, server_default="0"),
        sa.Column("item_count", sa.Integer, nullable=False),
        sa.Column("created_at", text, nullable=False),
        sa.Column("finished_at", text, nullable=True),
        sa.UniqueConstraint("user_id", "run_id", "tool_call_id", name="batches_tool_call"),
        sa.Index("batches_by_user", "user_id", "created_at"),
        sa.Index("batches_by_state", "state", "finished_at"),
    )
    items = sa.Table(
        "batch_items",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("batch_id", text, sa.ForeignKey("batches.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("key", text, nullable=False),
        sa.Column("prompt", text, nullable=False),
        sa.Column("criteria", text, nullable=True),
        sa.Column("status", text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("interruptions", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", text, nullable=True),
        sa.Column("not_before", text, nullable=True),
        sa.Column("outcome", text, nullable=True),
        sa.Column("summary", text, nullable=True),
        sa.Column("artifacts", text, nullable=True),
        sa.Column("skipped", text, nullable=True),
        sa.Column("steps", sa.Integer, nullable=True),
        sa.Column("usage", text, nullable=True),
        sa.Column("acceptance", text, nullable=True),
        sa.Column("error", text, nullable=True),
        sa.Column("created_at", text, nullable=False),
        sa.Column("started_at", text, nullable=True),
        sa.Column("finished_at", text, nullable=True),
        sa.UniqueConstraint("batch_id", "key", name="batch_items_key"),
        sa.Index("batch_items_by_seq", "batch_id", "seq"),
        sa.Index("batch_items_by_status", "batch_id", "status", "seq"),
        sa.Index("batch_items_by_owner", "lease_owner"),
    )
    workers = sa.Table(
        "batch_workers",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("name", text, nullable=False),
        sa.Column("host", text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        # Free slots at the last heartbeat: workers with none do not count when shares are worked out.
        sa.Column("free", sa.Integer, nullable=False, server_default="1"),
        sa.Column("started_at", text, nullable=False),
        sa.Column("heartbeat_at", text, nullable=False),
    )
    return batches, items, workers


def _m0002_item_results(conn: Connection) -> None:
    for column in ("result TEXT", "token_budget INTEGER", "max_requests INTEGER"):
        conn.execute(sa.text(f"ALTER TABLE batch_items ADD COLUMN {column}"))


def batch_items_0003(metadata: sa.MetaData) -> sa.Table:
    """`batch_items` as migration `batch.0003_item_records` left it (frozen): the record of an
    item's last attempt in one column, `record`, in place of `summary`, `artifacts`, `skipped`,
    `steps`, `acceptance` and `result` (`usage` stays, the record's own, for sums)."""
    text = sa.Text
    return sa.Table(
        "batch_items",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("batch_id", text, sa.ForeignKey("batches.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("key", text, nullable=False),
        sa.Column("prompt", text, nullable=False),
        sa.Column("criteria", text, nullable=True),
        sa.Column("status", text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("interruptions", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", text, nullable=True),
        sa.Column("not_before", text, nullable=True),
        # How the last attempt ended and why the item failed, when its record does not say it: an
        # attempt that ended without a subagent, an item cancelled or whose workers died too often.
        sa.Column("outcome", text, nullable=True),
        sa.Column("error", text, nullable=True),
        sa.Column("created_at", text, nullable=False),
        sa.Column("token_budget", sa.Integer, nullable=True),
        sa.Column("max_requests", sa.Integer, nullable=True),
        sa.Column("started_at", text, nullable=True),
        sa.Column("finished_at", text, nullable=True),
        # The subagent record of the last attempt that ran one: `TaskOutput.to_dict` as JSON.
        sa.Column("record", text, nullable=True),
        # Its usage again, alone: the database sums a batch's spending from it without reading every
        # record whole (at 20,000 items, summing from the records took twice as long).
        sa.Column("usage", text, nullable=True),
        sa.UniqueConstraint("batch_id", "key", name="batch_items_key"),
        sa.Index("batch_items_by_seq", "batch_id", "seq"),
        sa.Index("batch_items_by_status", "batch_id", "status", "seq"),
        sa.Index("batch_items_by_owner", "lease_owner"),
    )


def batch_items_0004(metadata: sa.MetaData) -> sa.Table:
    """`batch_items` as migration `batch.0004_item_usage_totals` left it (frozen): `batch_items_0003`
    with `usage` renamed `total_usage`, what all the item's attempts spent."""
    text = sa.Text
    return sa.Table(
        "batch_items",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("batch_id", text, sa.ForeignKey("batches.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("key", text, nullable=False),
        sa.Column("prompt", text, nullable=False),
        sa.Column("criteria", text, nullable=True),
        sa.Column("status", text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("interruptions", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_owner", text, nullable=True),
        sa.Column("not_before", text, nullable=True),
        # How the last attempt ended and why the item failed, when its record does not say it: an
        # attempt that ended without a subagent, an item cancelled or whose workers died too often.
        sa.Column("outcome", text, nullable=True),
        sa.Column("error", text, nullable=True),
        sa.Column("created_at", text, nullable=False),
        sa.Column("token_budget", sa.Integer, nullable=True),
        sa.Column("max_requests", sa.Integer, nullable=True),
        sa.Column("started_at", text, nullable=True),
        sa.Column("finished_at", text, nullable=True),
        # The subagent record of the last attempt that ran one: `TaskOutput.to_dict` as JSON.
        sa.Column("record", text, nullable=True),
        # What every attempt's subagent spent, summed (`Usage.to_dict` as JSON), each added in the
        # transaction that stores its attempt; the database sums a batch's spending from it.
        sa.Column("total_usage", text, nullable=True),
        sa.UniqueConstraint("batch_id", "key", name="batch_items_key"),
        sa.Index("batch_items_by_seq", "batch_id", "seq"),
        sa.Index("batch_items_by_status", "batch_id", "status", "seq"),
        sa.Index("batch_items_by_owner", "lease_owner"),
    )


_MOVED_0003 = ("summary", "artifacts", "skipped", "steps", "acceptance", "result")
_STATUSES_0003 = ("running", "waiting", "completed", "aborted", "error", "timed_out", "cancelled", "interrupted")


def _m0003_item_records(conn: Connection) -> None:
    """Each item keeps the subagent record of its last attempt whole (see `_records_0003`), in
    place of the six columns that held parts of it (`usage` stays, for sums). SQLite before 3.35
    cannot drop a column, so there the table is built again (SQLite's own recipe: a new table,
    the rows copied, the old one dropped); PostgreSQL drops them."""
    if conn.dialect.name != "sqlite":
        conn.exec_driver_sql("ALTER TABLE batch_items ADD COLUMN record TEXT")
        _records_0003(conn, "batch_items")
        for column in _MOVED_0003:
            conn.exec_driver_sql(f"ALTER TABLE batch_items DROP COLUMN {column}")
        return
    for index in ("batch_items_by_seq", "batch_items_by_status", "batch_items_by_owner"):
        conn.exec_driver_sql(f"DROP INDEX {index}")
    conn.exec_driver_sql("ALTER TABLE batch_items RENAME TO batch_items_0002")
    metadata = sa.MetaData()
    sa.Table("batches", metadata, sa.Column("id", sa.Text, primary_key=True))  # for the foreign key
    items = batch_items_0003(metadata)
    items.create(conn)
    kept = ", ".join(c.name for c in items.columns if c.name != "record")
    conn.exec_driver_sql(f"INSERT INTO batch_items ({kept}) SELECT {kept} FROM batch_items_0002")
    _records_0003(conn, "batch_items_0002")
    conn.exec_driver_sql("DROP TABLE batch_items_0002")


def _records_0003(conn: Connection, source: str) -> None:
    """Write into `batch_items.record` the record each item of `source` (the table as batch.0002
    left it) holds in parts: the items whose last attempt gave back a subagent's output (`summary`
    set). What the old columns did not keep is unknown: the subagent's id (`sub1`, as every item's
    was), its model (`""`, as the run store reads one stored without), stop reason, tool call and
    times (null). `outcome` and `error` stay in their columns only where they are the item's word,
    not the record's: a cancelled item, one whose workers died too often (5 times, then)."""
    rows = conn.execute(
        sa.text(
            "SELECT i.id, i.key, i.status, i.interruptions, i.outcome, i.error, i.summary, i.artifacts, i.skipped, "
            f"i.steps, i.usage, i.acceptance, i.result, b.subagent_type, b.title FROM {source} i "
            "JOIN batches b ON b.id = i.batch_id WHERE i.summary IS NOT NULL"
        )
    ).all()
    moved: list[dict[str, Any]] = []
    for row in rows:
        status = row.outcome if row.outcome in _STATUSES_0003 else "error"
        own = row.status == "cancelled" or row.interruptions >= 5 or status != row.outcome
        usage: dict[str, Any] = json.loads(row.usage) if row.usage else {}
        if "cost_usd" not in usage:  # stored before costs were kept: unknown when it made a request
            usage["cost_usd"] = None if usage.get("requests") else 0.0
        record = {
            "id": "sub1",
            "type": row.subagent_type,
            "description": f"{row.title} [{row.key}]"[:200],
            "tool_call_id": None,
            "parent_agent_id": "batch",
            "status": status,
            "stop_reason": None,
            "summary": row.summary,
            "result": None if row.result is None else json.loads(row.result),
            "result_file": None,
            "steps": row.steps or 0,
            "usage": usage,
            "artifacts": [_artifact_0003(a) for a in json.loads(row.artifacts or "[]")],
            "skipped": [_skipped_0003(s) for s in json.loads(row.skipped or "[]")],
            "acceptance": None if row.acceptance is None else json.loads(row.acceptance),
            "error": None if own or status == "completed" else row.error,
            "model": "",
            "started_at": None,
            "completed_at": None,
            "background": False,
            "messages": 0,
            "isolation": "shared",
            "changes": [],
            "conflicts": [],
            "layer": None,
        }
        moved.append(
            {
                "b_id": row.id,
                "record": json.dumps(record, ensure_ascii=False),
                "usage": json.dumps(usage),
                "outcome": row.outcome if own else None,
                "error": row.error if own or status == "completed" else None,
            }
        )
    if moved:
        names = ("record", "usage", "outcome", "error")
        columns: list[sa.ColumnClause[Any]] = [sa.column(name) for name in ("id", *names)]
        table = sa.table("batch_items", *columns)
        update = table.update().where(table.c.id == sa.bindparam("b_id"))
        conn.execute(update.values({name: sa.bindparam(name) for name in names}), moved)


def _artifact_0003(value: Any) -> dict[str, Any]:
    """An artifact as a record holds it. delegate's runner gave these; another one may have given
    any shape, kept whole as the JSON text of `path`."""
    shaped = _shaped_0003(value, {"path": str, "size": int, "fs_type": str})
    if shaped is not None and shaped["fs_type"] in ("file", "directory", "symlink"):
        return shaped
    return {"path": _text_0003(value), "relative_path": "", "size": 0, "fs_type": "file", "modified_at": None}


def _skipped_0003(value: Any) -> dict[str, Any]:
    shaped = _shaped_0003(value, {"path": str, "reason": str})
    return shaped if shaped is not None else {"path": _text_0003(value), "reason": "stored in another shape"}


def _shaped_0003(value: object, shape: dict[str, type]) -> dict[str, Any] | None:
    """`value` when it is an object whose keys in `shape` hold values of those types, else None."""
    if not isinstance(value, dict):
        return None
    found = cast(dict[str, Any], value)
    return found if all(type(found.get(key)) is kind for key, kind in shape.items()) else None


def _text_0003(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _m0004_item_usage_totals(conn: Connection) -> None:
    """`batch_items.usage` becomes `total_usage`: what all of an item's attempts spent, not its last
    attempt's alone. Before, each attempt's usage replaced the one before it (and `retry` cleared
    it), so what earlier attempts spent was not kept anywhere: an existing item's total is its last
    attempt's usage, which is what the column holds. A rename (SQLite 3.25+, PostgreSQL), so an
    older delegate still writing `usage` fails loudly instead of storing an attempt's usage as the
    item's total."""
    conn.exec_driver_sql("ALTER TABLE batch_items RENAME COLUMN usage TO total_usage")


def _m0005_batch_engine(conn: Connection) -> None:
    """`batches.engine`: which engine serves the batch. NULL (every batch before) is the embedded
    engine's in-process workers; `temporal` is served by Temporal workflows, never by those workers."""
    conn.exec_driver_sql("ALTER TABLE batches ADD COLUMN engine TEXT")


def _m0006_item_claims(conn: Connection) -> None:
    """`batch_items.claim`: which claim started the item's current attempt (a Temporal batch
    workflow names each of its claims), so a claim run again after its worker died answers the
    items it took the first time instead of leaving them `running` with nothing to run them. NULL
    for every item before, and for the embedded engine's claims."""
    conn.exec_driver_sql("ALTER TABLE batch_items ADD COLUMN claim TEXT")


def _m0007_item_limits(conn: Connection) -> None:
    """`batch_items.limits`: every run limit an item's subagent runs under (`RunLimits` fields by
    name, JSON), the cost budget included, in place of `token_budget` and `max_requests`, which are
    copied into it and then no longer written (kept: an older delegate reading them finds NULL,
    no limit, only for items submitted after this)."""
    conn.exec_driver_sql("ALTER TABLE batch_items ADD COLUMN limits TEXT")
    budgeted = conn.execute(
        sa.text(
            "SELECT id, token_budget, max_requests FROM batch_items "
            "WHERE token_budget IS NOT NULL OR max_requests IS NOT NULL"
        )
    ).all()
    moved = [
        {
            "b_id": row.id,
            "limits": json.dumps(
                {
                    name: value
                    for name, value in (("token_budget", row.token_budget), ("max_requests", row.max_requests))
                    if value is not None
                }
            ),
        }
        for row in budgeted
    ]
    if moved:
        table = sa.table("batch_items", sa.column("id"), sa.column("limits"))
        conn.execute(
            table.update().where(table.c.id == sa.bindparam("b_id")).values(limits=sa.bindparam("limits")), moved
        )


def _m0008_item_fences(conn: Connection) -> None:
    """`batch_items.run_fence` and `run_live`: which execution of the item's current attempt holds
    it (a Temporal activity's attempt number: Temporal runs an item's activity again on another
    worker when the first worker's heartbeats stop reaching it, though that worker may still be
    running the item), and whose result may be stored. An older execution stops when it sees a
    newer fence, and its result is refused. NULL for every item before, and for the embedded
    engine's items (their worker's lease is their fence)."""
    conn.exec_driver_sql("ALTER TABLE batch_items ADD COLUMN run_fence INTEGER")
    conn.exec_driver_sql("ALTER TABLE batch_items ADD COLUMN run_live INTEGER")


def _m0009_batch_homes(conn: Connection) -> None:
    """`batches.workspace`, `workspace_host` and `workspace_id`: the folder the batch was submitted
    in (its path, host and id, as a run's home: `delegate.workspace.Home`). A worker runs its items
    only in a folder of that id (NULL, every batch before: in any worker's folder, as before)."""
    for name in ("workspace", "workspace_host", "workspace_id"):
        conn.exec_driver_sql(f"ALTER TABLE batches ADD COLUMN {name} TEXT")


def _m0010_item_turns(conn: Connection) -> None:
    """`batch_items.turns`: the model calls and tool calls of an item's last attempt, as the events
    of its subagent that told them, so that a wrong item can be read call by call (NULL before)."""
    conn.exec_driver_sql("ALTER TABLE batch_items ADD COLUMN turns TEXT")


BATCH_MIGRATIONS: tuple[Migration, ...] = (
    Migration.creating("batch.0001_tables", batch_tables_0001),
    Migration("batch.0002_item_results", _m0002_item_results),
    Migration("batch.0003_item_records", _m0003_item_records),
    Migration("batch.0004_item_usage_totals", _m0004_item_usage_totals),
    Migration("batch.0005_batch_engine", _m0005_batch_engine),
    Migration("batch.0006_item_claims", _m0006_item_claims),
    Migration("batch.0007_item_limits", _m0007_item_limits),
    Migration("batch.0008_item_fences", _m0008_item_fences),
    Migration("batch.0009_batch_homes", _m0009_batch_homes),
    Migration("batch.0010_item_turns", _m0010_item_turns),
)
"""Our steps for `Store.migrate`; `Batches(store)` applies them."""
