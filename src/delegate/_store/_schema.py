"""The store's schema: the core tables as the queries use them, the frozen `0001_core` tables, and
the core migrations that take a database from one to the other (`Store.migrate` runs them)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection


@dataclass(frozen=True, slots=True)
class Migration:
    """One named schema step. `apply` runs inside the migration transaction; never edit a released one."""

    name: str
    apply: Callable[[Connection], None]

    @classmethod
    def creating(cls, name: str, tables: Callable[[sa.MetaData], object]) -> Migration:
        """The migration `name` that creates the tables `tables` builds (a frozen schema function:
        core's `0001_core`, `batch.0001_tables`, `eval.0001_tables`)."""
        return cls(name, functools.partial(_create, tables))


def _create(tables: Callable[[sa.MetaData], object], conn: Connection) -> None:
    metadata = sa.MetaData()
    tables(metadata)
    metadata.create_all(conn)


# ---------------------------------------------------------------------------------------------
# Schema. `_core_tables` is the schema the queries (`_store.py`, `_db.py`) use, and migration 0001
# creates it. When a later migration changes a table, first copy today's function into 0001 so it
# stays frozen (on a fresh database 0001 runs before the change; the tests fail loudly if this is
# forgotten).


def _core_tables(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table, sa.Table, sa.Table]:
    text = sa.Text  # every column without nullable=False may hold NULL
    users = sa.Table(
        "users",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("name", text, nullable=False, unique=True),
        sa.Column("token_hash", text, nullable=False, unique=True),
        sa.Column("created_at", text, nullable=False),
        # Added by core.0003_user_tokens: when the current token was made; set while revoked.
        sa.Column("token_created_at", text),
        sa.Column("revoked_at", text),
    )
    runs = sa.Table(
        "runs",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("user_id", text, sa.ForeignKey("users.id")),
        sa.Column("prompt", text, nullable=False),
        sa.Column("model", text, nullable=False),
        sa.Column("status", text, nullable=False),
        sa.Column("final", text),
        sa.Column("usage", text, nullable=False),
        sa.Column("error", text),
        sa.Column("created_at", text, nullable=False),
        sa.Column("completed_at", text),
        sa.Column("workspace", text),
        # The number of the run's last event: bumped by each add_events, which takes the run's row
        # lock doing so, so concurrent writers on PostgreSQL number a run's events in turn.
        sa.Column("event_count", sa.Integer, nullable=False, server_default="0"),
        sa.Index("runs_by_user", "user_id", "created_at"),
    )
    events = sa.Table(
        "events",
        metadata,
        # BIGINT on PostgreSQL; on SQLite only INTEGER PRIMARY KEY is the autoincrementing rowid.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("run_id", text, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", text, nullable=False),
        sa.Column("ts", sa.Double, nullable=False),
        sa.Column("agent_id", text, nullable=False),
        sa.Column("parent_agent_id", text),
        sa.Column("tool_call_id", text),
        sa.Column("data", text, nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="events_run_seq"),
    )
    subagents = sa.Table(
        "subagents",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("run_id", text, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("parent_agent_id", text),
        sa.Column("type", text, nullable=False),
        sa.Column("description", text, nullable=False),
        sa.Column("tool_call_id", text),
        sa.Column("status", text, nullable=False),
        sa.Column("stop_reason", text),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("usage", text, nullable=False),
        sa.Column("summary", text, nullable=False),
        sa.Column("artifacts", text, nullable=False),
        sa.Column("skipped", text, nullable=False),
        sa.Column("acceptance", text, nullable=False),
        sa.Column("error", text),
        sa.Column("started_at", text, nullable=False),
        sa.Column("completed_at", text),
        # Added by 0002_subagent_results: the model, the typed result (JSON), the file holding the
        # whole result, and the place in the order the lead called the run's subagents.
        sa.Column("model", text),
        sa.Column("result", text),
        sa.Column("result_file", text),
        sa.Column("seq", sa.Integer),
        sa.Index("subagents_by_run", "run_id", "started_at"),
    )
    return users, runs, events, subagents


def _core_tables_0001(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table, sa.Table, sa.Table]:
    """The schema as `0001_core` created it (frozen)."""
    text = sa.Text
    users = sa.Table(
        "users",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("name", text, nullable=False, unique=True),
        sa.Column("token_hash", text, nullable=False, unique=True),
        sa.Column("created_at", text, nullable=False),
    )
    runs = sa.Table(
        "runs",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("user_id", text, sa.ForeignKey("users.id")),
        sa.Column("prompt", text, nullable=False),
        sa.Column("model", text, nullable=False),
        sa.Column("status", text, nullable=False),
        sa.Column("final", text),
        sa.Column("usage", text, nullable=False),
        sa.Column("error", text),
        sa.Column("created_at", text, nullable=False),
        sa.Column("completed_at", text),
        sa.Column("workspace", text),
        # The number of the run's last event: bumped by each add_events, which takes the run's row
        # lock doing so, so concurrent writers on PostgreSQL number a run's events in turn.
        sa.Column("event_count", sa.Integer, nullable=False, server_default="0"),
        sa.Index("runs_by_user", "user_id", "created_at"),
    )
    events = sa.Table(
        "events",
        metadata,
        # BIGINT on PostgreSQL; on SQLite only INTEGER PRIMARY KEY is the autoincrementing rowid.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("run_id", text, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", text, nullable=False),
        sa.Column("ts", sa.Double, nullable=False),
        sa.Column("agent_id", text, nullable=False),
        sa.Column("parent_agent_id", text),
        sa.Column("tool_call_id", text),
        sa.Column("data", text, nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="events_run_seq"),
    )
    subagents = sa.Table(
        "subagents",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("run_id", text, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("parent_agent_id", text),
        sa.Column("type", text, nullable=False),
        sa.Column("description", text, nullable=False),
        sa.Column("tool_call_id", text),
        sa.Column("status", text, nullable=False),
        sa.Column("stop_reason", text),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("usage", text, nullable=False),
        sa.Column("summary", text, nullable=False),
        sa.Column("artifacts", text, nullable=False),
        sa.Column("skipped", text, nullable=False),
        sa.Column("acceptance", text, nullable=False),
        sa.Column("error", text),
        sa.Column("started_at", text, nullable=False),
        sa.Column("completed_at", text),
        sa.Index("subagents_by_run", "run_id", "started_at"),
    )
    return users, runs, events, subagents


def _lease_columns() -> list[sa.Column[Any]]:
    """The columns migration core.0004 adds to `runs`: the lease of the process running it, and
    how the lead ended (with `final`, what `delegate run --json` prints)."""
    return [
        sa.Column("owner", sa.Text),
        sa.Column("heartbeat_at", sa.Text),
        sa.Column("cancel_requested", sa.Integer, nullable=False, server_default="0"),
        sa.Column("stop_reason", sa.Text),
        sa.Column("steps", sa.Integer, nullable=False, server_default="0"),
    ]


def _resume_columns() -> list[sa.Column[Any]]:
    """The columns migration core.0005 adds to `runs`: what the run was started with besides its
    prompt and model, for its resume: its uploaded files (JSON, NULL: none) and run-wide budgets."""
    return [
        sa.Column("uploaded_files", sa.Text),
        sa.Column("token_budget", sa.BigInteger),
        sa.Column("max_requests", sa.BigInteger),
    ]


def _warnings_column() -> sa.Column[Any]:
    """The column migration core.0007 adds to `runs`: what was wrong as the run started (an MCP
    server that did not start, a definition file skipped), a JSON array of lines (NULL: none)."""
    return sa.Column("warnings", sa.Text)


def _result_column() -> sa.Column[Any]:
    """The column migration core.0014 adds to `runs`: the lead's typed result (its definition's
    `output_schema`), as JSON (NULL: it has none): the `result` of `runs show --json`."""
    return sa.Column("result", sa.Text)


def _thread_columns() -> list[sa.Column[Any]]:
    """The columns migration core.0011 adds to `runs`: the thread a run belongs to (the id of its
    thread's first run; a run that continues none starts a thread of its own) and the run it
    continues (NULL: none). Each run is continued at most once (a unique index): two continues of
    one run race to one winner, so a thread is a chain, never a fork."""
    return [sa.Column("thread_id", sa.Text), sa.Column("previous_run_id", sa.Text)]


def _limits_column() -> sa.Column[Any]:
    """The column migration core.0015 adds to `runs`: every limit the run was started with
    (`RunLimits.to_dict`, JSON), so its resume runs under them all. It fills the column of each
    run stored before from the two budgets 0005 kept (`token_budget`, `max_requests`), which no
    run writes since."""
    return sa.Column("limits", sa.Text)


def _workflow_column() -> sa.Column[Any]:
    """The column migration core.0018 adds to `runs`: the workflow the run is (JSON: its script,
    description and args; NULL: the run is the lead's), what its resume runs again."""
    return sa.Column("workflow", sa.Text)


def _eval_column() -> sa.Column[Any]:
    """The column migration core.0019 adds to `runs`: the evaluation attempt the run is (JSON:
    `eval_id`, `arm`, `task`, `attempt`; NULL: the run is no attempt of an eval, see docs/eval.md)."""
    return sa.Column("eval", sa.Text)


def _gates_column() -> sa.Column[Any]:
    """The column migration core.0020 adds to `runs`: every rule that can stop a call of the run
    (its permission rules, mode and command hooks: `Gates.stored`, JSON), so that a resume, or a
    process that takes the run over, runs under them (NULL: a run stored before, resumed under the
    rules of the process that resumes it)."""
    return sa.Column("gates", sa.Text)


def _home_columns() -> list[sa.Column[Any]]:
    """The columns migration core.0022 adds to `runs`: where its files are, beside the folder's
    path (`workspace`): the host it runs on (`workspace_host`) and the folder's id
    (`workspace_id`, see `delegate.workspace.Home`). A process goes on with the run only in a
    folder of that id (NULL: a run stored before, resumed only at the same path)."""
    return [sa.Column("workspace_host", sa.Text), sa.Column("workspace_id", sa.Text)]


def _event_pack_column() -> sa.Column[Any]:
    """The column migration core.0006 adds to `events`: how many events the row holds. A row of
    one event (`n` = 1) is that event, `data` its data. A row of several holds the events numbered
    `seq - n + 1` to `seq` of its run, in order: `data` is a JSON array of one
    `[type, ts, agent_id, parent_agent_id, tool_call_id, data]` per event, and the other columns
    are those of the last one. The recorder stores each batch of a run's events so, a few dozen
    to a row: a row costs the writer more than the JSON text of the events it holds."""
    return sa.Column("n", sa.Integer, nullable=False, server_default="1")


def _subagent_key_column() -> sa.Column[Any]:
    """The column migration core.0006 adds to `subagents`: the key of a finished subagent kept
    for a resume (its lead's tool call id and the prompt's index; NULL: it starts afresh then).
    The record is its checkpoint: before, a `checkpoints` row repeated it."""
    return sa.Column("key", sa.Text)


def _background_columns() -> tuple[list[sa.Column[Any]], list[sa.Column[Any]]]:
    """The columns migration core.0010 adds: to `runs`, the subagents asked to stop from another
    process (`delegate runs stop`, the HTTP API; a JSON object of agent id to reason, NULL: none),
    taken by the run's owner at its next heartbeat; to `subagents`, whether the lead started it in
    the background and how many follow-ups it took."""
    runs = [sa.Column("stop_requests", sa.Text)]
    subagents = [
        sa.Column("background", sa.Integer, nullable=False, server_default="0"),
        sa.Column("messages", sa.Integer, nullable=False, server_default="0"),
    ]
    return runs, subagents


def _isolation_columns() -> list[sa.Column[Any]]:
    """The columns migration core.0012_isolation adds to `subagents`: where it wrote (`shared`,
    `overlay`, `read-only`; NULL for records stored before: `shared`), what its layer changed and
    what conflicted (JSON arrays; NULL: none), and where its kept layer is."""
    return [
        sa.Column("isolation", sa.Text),
        sa.Column("changes", sa.Text),
        sa.Column("conflicts", sa.Text),
        sa.Column("layer", sa.Text),
    ]


def _pricing_column() -> sa.Column[Any]:
    """The column migration core.0021 adds to `subagents`: which price its requests were charged at
    (`genai-prices:openai`, `usd-per-million:...`; NULL: none, or stored before)."""
    return sa.Column("pricing", sa.Text)


def _depth_column() -> sa.Column[Any]:
    """The column migration core.0023 adds to `subagents`: its level below the lead (1: the lead
    started it; 2 and more: a subagent did, named by `parent_agent_id`; see `RunLimits.max_depth`)."""
    return sa.Column("depth", sa.Integer, nullable=False, server_default="1")


def _conversation_column() -> sa.Column[Any]:
    """The column migration core.0016 adds to `subagents`: the conversation of a subagent whose
    last stretch of work (its task, or its last follow-up) completed, what a follow-up continues
    (NULL: none kept). A JSON object: `messages` (its messages), `follow_ups` (the lead's tool
    call ids of the follow-ups it took) and `system`, the key of its system prompt, kept once a
    run in a `checkpoints` row of kind `system` (`{"system": TEXT}`): every subagent of a type
    shares it. Before, each completed subagent's conversation was a `checkpoints` row of its own
    (`conversation`, `{agent_id}#{messages}`), its system prompt repeated in each."""
    return sa.Column("conversation", sa.Text)


def _checkpoint_table(metadata: sa.MetaData) -> sa.Table:
    """What a run did so far, for resuming it: one row per model answer, tool result or subagent."""
    return sa.Table(
        "checkpoints",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.UniqueConstraint("run_id", "kind", "key", name="checkpoints_run_key"),
    )


def _waiting_column() -> sa.Column[Any]:
    """The column migration core.0009 adds to `runs`: how many of its calls wait for a person's
    decision (see `approvals`). A run stored `running` whose process lives reads `waiting` while
    it is more than 0; its lease and every query on `running` stay as they were."""
    return sa.Column("waiting", sa.Integer, nullable=False, server_default="0")


def _running_column() -> sa.Column[Any]:
    """The column migration core.0024 adds to `runs`: how many of its subagents were running at its
    recorder's last write (started, not yet ended), so a listing says what a live run is doing
    (`subagent_count` counts only the ended ones, whose records are stored). Read only while the
    run is live: a run whose process died may have left it above 0."""
    return sa.Column("running_subagents", sa.Integer, nullable=False, server_default="0")


def _always_column() -> sa.Column[Any]:
    """The column migration core.0017 adds to `approvals`: whether the decision approved the rest of
    the run's calls of its rule too. Before, the reason "always" said so, and any person's reason
    could: `"reason": "always"` over HTTP approved the rule for the rest of the run without a word."""
    return sa.Column("always", sa.Boolean, nullable=False, server_default=sa.false())


def _approvals_table(metadata: sa.MetaData) -> sa.Table:
    """Calls that wait for a person (an `ask` permission rule), and the decisions given: one row a
    call, `decision` NULL while it waits, then `approve` or `deny`. The decision is stored before
    the call acts on it, so a run resumed after its process died finds it and asks nobody twice."""
    text = sa.Text
    return sa.Table(
        "approvals",
        metadata,
        sa.Column("run_id", text, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("call_id", text, primary_key=True),
        sa.Column("agent_id", text, nullable=False),
        sa.Column("parent_agent_id", text),
        sa.Column("subagent_type", text),
        sa.Column("description", text),
        sa.Column("tool", text, nullable=False),
        sa.Column("arguments", text, nullable=False),
        sa.Column("rule", text),
        sa.Column("requested_at", text, nullable=False),
        sa.Column("decision", text),
        sa.Column("reason", text),
        sa.Column("decided_at", text),
    )


_metadata = sa.MetaData()
users_table, runs_table, events_table, subagents_table = _core_tables(_metadata)
_stop_columns, _record_columns = _background_columns()
for _column in [
    *_lease_columns(),
    *_resume_columns(),
    _warnings_column(),
    _result_column(),
    *_thread_columns(),
    _limits_column(),
    _gates_column(),
    _waiting_column(),
    _running_column(),
    *_stop_columns,
    _workflow_column(),
    _eval_column(),
    *_home_columns(),
]:
    runs_table.append_column(_column)
sa.Index("runs_previous_run", runs_table.c.previous_run_id, unique=True)
sa.Index("runs_by_thread", runs_table.c.thread_id, runs_table.c.created_at)
events_table.append_column(_event_pack_column())
subagents_table.append_column(_subagent_key_column())
for _column in [*_isolation_columns(), *_record_columns, _conversation_column(), _pricing_column(), _depth_column()]:
    subagents_table.append_column(_column)
checkpoints_table = _checkpoint_table(_metadata)
approvals_table = _approvals_table(_metadata)
approvals_table.append_column(_always_column())
migrations_table = sa.Table(
    "migrations",
    sa.MetaData(),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("applied_at", sa.Text, nullable=False),
)


def _m0002_subagent_results(conn: Connection) -> None:
    for column in ("model TEXT", "result TEXT", "result_file TEXT", "seq INTEGER"):
        conn.execute(sa.text(f"ALTER TABLE subagents ADD COLUMN {column}"))


def _m0003_user_tokens(conn: Connection) -> None:
    """Tokens that can be revoked and replaced: when the current token was made, and whether the
    user is revoked (`delegate users revoke|token`)."""
    conn.exec_driver_sql("ALTER TABLE users ADD COLUMN token_created_at TEXT")
    conn.exec_driver_sql("ALTER TABLE users ADD COLUMN revoked_at TEXT")
    conn.execute(users_table.update().values(token_created_at=users_table.c.created_at))


claim_event_numbers = sa.text("UPDATE runs SET event_count = event_count + :n WHERE id = :run_id RETURNING event_count")
"""Reserve `n` event numbers of a run; returns the last one (None for an unknown run). Text, the
same on both backends: an `update()` is compiled once for each database a process opens (1 ms)."""


def _m0004_run_leases(conn: Connection) -> None:
    for column in _lease_columns():
        default = f" DEFAULT {column.server_default.arg} NOT NULL" if column.server_default is not None else ""  # type: ignore[attr-defined]
        conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}{default}")
    metadata = sa.MetaData()
    sa.Table("runs", metadata, sa.Column("id", sa.Text, primary_key=True))  # for the foreign key
    _checkpoint_table(metadata).create(conn)


def _m0005_run_resume_inputs(conn: Connection) -> None:
    for column in _resume_columns():
        conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0006_packed_progress(conn: Connection) -> None:
    for table, column in (("events", _event_pack_column()), ("subagents", _subagent_key_column())):
        default = f" DEFAULT {column.server_default.arg} NOT NULL" if column.server_default is not None else ""  # type: ignore[attr-defined]
        conn.exec_driver_sql(
            f"ALTER TABLE {table} ADD COLUMN {column.name} {column.type.compile(conn.dialect)}{default}"
        )


def _m0007_run_warnings(conn: Connection) -> None:
    column = _warnings_column()
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0008_finish_reason(conn: Connection) -> None:
    """A lead's recorded model answers (checkpoints of kind `answer`, a `ModelResponse` as JSON)
    name what the provider said `finish_reason`, no longer `stop_reason` (the word for why an
    agent ended): an interrupted run stored before resumes with its answers whole."""
    checkpoints = sa.table("checkpoints", sa.column("id"), sa.column("kind"), sa.column("data"))
    answers = conn.execute(sa.select(checkpoints.c.id, checkpoints.c.data).where(checkpoints.c.kind == "answer"))
    for row_id, text in answers.all():
        data: dict[str, Any] = json.loads(text)
        if "stop_reason" in data:
            data["finish_reason"] = data.pop("stop_reason")
            update = checkpoints.update().where(checkpoints.c.id == row_id).values(data=json.dumps(data))
            conn.execute(update)


def _m0014_lead_result(conn: Connection) -> None:
    column = _result_column()
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0011_threads(conn: Connection) -> None:
    """Threads: each run gets the thread it belongs to (a run stored before is a thread of its
    own) and the run it continues, which no two runs may share."""
    for column in _thread_columns():
        conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")
    conn.exec_driver_sql("UPDATE runs SET thread_id = id")
    conn.exec_driver_sql("CREATE UNIQUE INDEX runs_previous_run ON runs (previous_run_id)")
    conn.exec_driver_sql("CREATE INDEX runs_by_thread ON runs (thread_id, created_at)")


def _m0015_run_limits(conn: Connection) -> None:
    column = _limits_column()
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")
    runs = sa.table("runs", sa.column("id"), sa.column("token_budget"), sa.column("max_requests"), sa.column("limits"))
    budgeted = sa.or_(runs.c.token_budget.is_not(None), runs.c.max_requests.is_not(None))
    for run_id, tokens, requests in conn.execute(
        sa.select(runs.c.id, runs.c.token_budget, runs.c.max_requests).where(budgeted)
    ).all():
        given = {"token_budget": tokens, "max_requests": requests}
        limits = json.dumps({k: v for k, v in given.items() if v is not None})
        conn.execute(runs.update().where(runs.c.id == run_id).values(limits=limits))


def _m0021_pricing(conn: Connection) -> None:
    column = _pricing_column()
    conn.exec_driver_sql(f"ALTER TABLE subagents ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0023_subagent_depth(conn: Connection) -> None:
    column = _depth_column()
    kind = column.type.compile(conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE subagents ADD COLUMN {column.name} {kind} NOT NULL DEFAULT 1")


def _m0024_running_subagents(conn: Connection) -> None:
    column = _running_column()
    kind = column.type.compile(conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {kind} NOT NULL DEFAULT 0")


def _m0012_isolation(conn: Connection) -> None:
    for column in _isolation_columns():
        conn.exec_driver_sql(f"ALTER TABLE subagents ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0009_approvals(conn: Connection) -> None:
    column = _waiting_column()
    conn.exec_driver_sql(
        f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)} DEFAULT 0 NOT NULL"
    )
    metadata = sa.MetaData()
    sa.Table("runs", metadata, sa.Column("id", sa.Text, primary_key=True))  # for the foreign key
    _approvals_table(metadata).create(conn)


def _m0010_background(conn: Connection) -> None:
    runs, subagents = _background_columns()
    for table, columns in (("runs", runs), ("subagents", subagents)):
        for column in columns:
            default = f" DEFAULT {column.server_default.arg} NOT NULL" if column.server_default is not None else ""  # type: ignore[attr-defined]
            conn.exec_driver_sql(
                f"ALTER TABLE {table} ADD COLUMN {column.name} {column.type.compile(conn.dialect)}{default}"
            )


def _m0017_approval_always(conn: Connection) -> None:
    """`approvals.always`, set where the stored reason marked the rule approved always (what the
    runs stored until now read their rules back from), so a run interrupted before keeps them."""
    column = _always_column()
    kind = column.type.compile(conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE approvals ADD COLUMN always {kind} NOT NULL DEFAULT FALSE")
    rows = sa.table("approvals", sa.column("decision"), sa.column("reason"), sa.column("always"))
    marked = sa.and_(rows.c.decision == "approve", rows.c.reason == "always")
    conn.execute(rows.update().where(marked).values(always=True))


def _m0013_cost(conn: Connection) -> None:
    """A usage stored before costs were kept (no `cost_usd`) reads an unknown cost (null) when it
    made a request, not a cost of nothing: the runs', the subagents' and the lead's recorded
    answers'. (A run's cost budget is kept with its other limits, `runs.limits`.)"""
    for table in ("runs", "subagents"):
        rows = sa.table(table, sa.column("id"), sa.column("usage"))
        for row_id, text in conn.execute(sa.select(rows.c.id, rows.c.usage)).all():
            usage: dict[str, Any] | None = json.loads(text)
            if usage is not None and "cost_usd" not in usage:
                usage["cost_usd"] = None if usage.get("requests") else 0.0
                conn.execute(rows.update().where(rows.c.id == row_id).values(usage=json.dumps(usage)))
    checkpoints = sa.table("checkpoints", sa.column("id"), sa.column("kind"), sa.column("data"))
    answers = conn.execute(sa.select(checkpoints.c.id, checkpoints.c.data).where(checkpoints.c.kind == "answer"))
    for row_id, text in answers.all():
        data: dict[str, Any] = json.loads(text)
        usage = data.get("usage")
        if isinstance(usage, dict) and "cost_usd" not in usage:  # pyright: ignore[reportUnnecessaryIsInstance]
            usage["cost_usd"] = None if usage.get("requests") else 0.0
            conn.execute(checkpoints.update().where(checkpoints.c.id == row_id).values(data=json.dumps(data)))


def _m0016_subagent_conversations(conn: Connection) -> None:
    """Each completed subagent's conversation moves from its `checkpoints` row into its own row
    (`subagents.conversation`), its system prompt kept once a run (see `_conversation_column`):
    an interrupted run stored before resumes, and continues, with them. A conversation whose
    subagent is no longer `completed` at that count of follow-ups (a later follow-up did not
    complete, or its record was never stored) is not kept: nothing reads it (a follow-up and the
    model-calls route both need the subagent completed)."""
    column = _conversation_column()
    conn.exec_driver_sql(f"ALTER TABLE subagents ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")
    checkpoints = sa.table(
        "checkpoints",
        sa.column("id", sa.BigInteger),
        *(sa.column(c, sa.Text) for c in ("run_id", "kind", "key", "data")),
    )
    kept = sa.select(checkpoints.c.id, checkpoints.c.run_id, checkpoints.c.data).where(
        checkpoints.c.kind == "conversation", checkpoints.c.key.like("%#%")
    )
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    moved: list[int] = []
    for row_id, run_id, text in conn.execute(kept.order_by(checkpoints.c.id)).all():
        moved.append(row_id)
        found: dict[str, Any] = json.loads(text)
        agent = (run_id, str(found.get("agent_id", "")))
        if agent not in latest or int(latest[agent].get("messages", 0)) <= int(found.get("messages", 0)):
            latest[agent] = found
    subagents = sa.table(
        "subagents",
        sa.column("messages", sa.Integer),
        *(sa.column(c, sa.Text) for c in ("id", "status", "conversation")),
    )
    systems: set[tuple[str, str]] = set()
    for (run_id, agent_id), found in latest.items():
        row = conn.execute(
            sa.select(subagents.c.status, subagents.c.messages).where(subagents.c.id == f"{run_id}/{agent_id}")
        ).first()
        if row is None or row.status != "completed" or row.messages != int(found.get("messages", 0)):
            continue
        system = str(found.get("system", ""))
        ref = system_key(system)
        if (run_id, ref) not in systems:
            systems.add((run_id, ref))
            values = {"run_id": run_id, "kind": SYSTEM, "key": ref, "data": json.dumps({"system": system})}
            conn.execute(checkpoints.insert().values(values))
        stored: dict[str, Any] = {"system": ref, "follow_ups": found.get("follow_ups") or []}
        stored["messages"] = found.get("conversation", [])
        update = subagents.update().where(subagents.c.id == f"{run_id}/{agent_id}")
        conn.execute(update.values(conversation=json.dumps(stored)))
    for start in range(0, len(moved), 500):
        conn.execute(checkpoints.delete().where(checkpoints.c.id.in_(moved[start : start + 500])))


def _m0018_workflows(conn: Connection) -> None:
    column = _workflow_column()
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0019_eval_tags(conn: Connection) -> None:
    column = _eval_column()
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


SYSTEM = "system"
"""The kind of the checkpoint that keeps a subagent's system prompt once a run (key: `system_key`)."""


@functools.lru_cache(maxsize=64)
def system_key(system: str) -> str:
    """The key of a system prompt's `checkpoints` row (kind `system`): a digest of its text, so
    that the same prompt is kept once a run whoever writes it first (see `_conversation_column`)."""
    return hashlib.sha256(system.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _m0020_run_gates(conn: Connection) -> None:
    column = _gates_column()
    conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def _m0022_run_homes(conn: Connection) -> None:
    for column in _home_columns():
        conn.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


CORE_MIGRATIONS: tuple[Migration, ...] = (
    Migration.creating("0001_core", _core_tables_0001),
    Migration("core.0002_subagent_results", _m0002_subagent_results),
    Migration("core.0003_user_tokens", _m0003_user_tokens),
    Migration("core.0004_run_leases", _m0004_run_leases),
    Migration("core.0005_run_resume_inputs", _m0005_run_resume_inputs),
    Migration("core.0006_packed_progress", _m0006_packed_progress),
    Migration("core.0007_run_warnings", _m0007_run_warnings),
    Migration("core.0008_finish_reason", _m0008_finish_reason),
    Migration("core.0009_approvals", _m0009_approvals),
    Migration("core.0010_background", _m0010_background),
    Migration("core.0011_threads", _m0011_threads),
    Migration("core.0012_isolation", _m0012_isolation),
    Migration("core.0013_cost", _m0013_cost),
    Migration("core.0014_lead_result", _m0014_lead_result),
    Migration("core.0015_run_limits", _m0015_run_limits),
    Migration("core.0016_subagent_conversations", _m0016_subagent_conversations),
    Migration("core.0017_approval_always", _m0017_approval_always),
    Migration("core.0018_workflows", _m0018_workflows),
    Migration("core.0019_eval_tags", _m0019_eval_tags),
    Migration("core.0020_run_gates", _m0020_run_gates),
    Migration("core.0021_pricing", _m0021_pricing),
    Migration("core.0022_run_homes", _m0022_run_homes),
    Migration("core.0023_subagent_depth", _m0023_subagent_depth),
    Migration("core.0024_running_subagents", _m0024_running_subagents),
)
