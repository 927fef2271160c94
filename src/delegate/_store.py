"""The store: users, runs, their events and subagent records, in SQLite or PostgreSQL.

One `Store` owns one SQLAlchemy engine; the same Core statements run on both backends.

- SQLite (the default, `<workspace>/.delegate/delegate.db`) runs in WAL mode with a 10 s busy
  timeout and foreign keys on, set on every new connection. Writes open with `BEGIN IMMEDIATE`, so
  a writer waits for the lock up front instead of failing half-way with "database is locked".
- PostgreSQL (`postgresql://...`, driven by psycopg 3) is for several machines sharing one store.
  Each connection waits at most `LOCK_TIMEOUT_MS` for a lock (`lock_timeout`).

A write that cannot get the lock in that time (another process holds it: a `delegate batch
worker`, a `sqlite3` shell) raises `StoreBusyError`: the server answers it with a 503 and a
`Retry-After`, the CLI with a message; nothing was written.

Migrations are named functions recorded in the `migrations` table and applied in order, once.
Another module adds its own tables by passing its own list to `Store.migrate`:

```python
def _create_batches(conn: Connection) -> None:
    sa.Table("batches", sa.MetaData(), sa.Column("id", sa.Text, primary_key=True)).create(conn)

BATCH_MIGRATIONS = [Migration("batch.0001_batches", _create_batches)]
store.migrate(BATCH_MIGRATIONS)   # the core migrations first, then these; each name applied once
```

Names are global to the database, so prefix them with the module (`batch.`). A migration never
changes once released: a new schema change is a new migration at the end of the list.

Everything read back is validated (JSON columns, status values, timestamps): a row that was
damaged outside delegate raises `StoreError` naming the table, row and column, never garbage.
Timestamps are timezone-aware UTC datetimes, stored as ISO 8601 text on both backends (so they
sort as text and compare the same everywhere).
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

import sqlalchemy as sa
from pydantic import AwareDatetime, TypeAdapter
from pydantic_core import PydanticSerializationError, from_json, to_json
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError

from ._errors import StoreError, UserError
from ._events import Event, EventType
from ._lease import new_owner, owner_alive
from ._record import STATUSES, Status, TaskOutput
from ._text import safe_json, safe_text
from ._usage import Usage

__all__ = [
    "FINAL_STATUSES",
    "RUN_HEARTBEAT",
    "RUN_LEASE_TTL",
    "Checkpoint",
    "Migration",
    "RunRow",
    "RunStatus",
    "Store",
    "StoreBusyError",
    "StoreError",
    "SubagentStatus",
    "UserRow",
]

RunStatus = Status
"""The status of a run (see `delegate._record.Status`). `running` while its process holds the
run's lease; `interrupted` once that process is gone (read so at once on its own machine, after
`RUN_LEASE_TTL` elsewhere): it can be resumed. The others are final."""

FINAL_STATUSES: frozenset[str] = frozenset({"completed", "error", "cancelled", "aborted", "timed_out"})

RUN_LEASE_TTL = 10.0
"""Seconds a run's owner may go without a heartbeat before its run reads `interrupted`."""
RUN_HEARTBEAT = 1.0
"""How often the owner of a run beats (and looks for a cancellation asked from elsewhere)."""

SubagentStatus = Status
"""A subagent is `running`, then ends like an agent does (completed, aborted, error, ...)."""

SQLITE_BUSY_TIMEOUT_MS = 10_000
"""How long a SQLite connection waits for another writer before giving up."""
LOCK_TIMEOUT_MS = 10_000
"""How long a PostgreSQL statement waits for a lock another transaction holds before giving up."""

_MIGRATION_LOCK = 0x64656C6567617465  # "delegate" in ASCII: the PostgreSQL advisory lock key
_T = TypeVar("_T")


class StoreBusyError(StoreError):
    """Another process held the database's write lock for longer than the store waits; nothing was
    written. Try again in a moment (`retry_after` seconds is a fair guess)."""

    retry_after = 2

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "the store is busy: another process (a `delegate batch worker`, or a tool holding the "
            f"database open) holds its write lock{f' ({detail})' if detail else ''}; nothing was written, "
            "try again in a moment"
        )


@dataclass(frozen=True, slots=True)
class Migration:
    """One named schema step. `apply` runs inside the migration transaction; never edit a released one."""

    name: str
    apply: Callable[[Connection], None]


@dataclass(kw_only=True, slots=True)
class UserRow:
    """A user of the HTTP API, as stored (without its token, of which only a hash is kept)."""

    id: str
    name: str
    created_at: AwareDatetime
    token_created_at: AwareDatetime | None = None
    revoked_at: AwareDatetime | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


@dataclass(kw_only=True, slots=True)
class RunRow:
    """A run of the lead agent, as stored."""

    id: str
    user_id: str | None
    prompt: str
    model: str
    status: RunStatus
    final: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    workspace: str | None = None
    created_at: AwareDatetime
    completed_at: AwareDatetime | None = None
    event_count: int = 0
    owner: str | None = None
    """The process holding the run's lease (`host|pid|token`), while it runs."""
    heartbeat_at: AwareDatetime | None = None
    cancel_requested: bool = False
    """Another process asked for the run to be cancelled; its owner does so at its next beat."""
    stop_reason: str | None = None
    steps: int = 0
    uploaded_files: list[dict[str, Any]] | None = None
    """The files uploaded earlier in the conversation the run was started with (None: it offers no
    `list_uploaded_files`), given back to it when it resumes."""
    token_budget: int | None = None
    """The run-wide budgets given for this run (`Runtime.run`, `POST /runs`; None: the runtime's),
    kept for its resume."""
    max_requests: int | None = None


@dataclass(kw_only=True, slots=True)
class Checkpoint:
    """One thing a run did, kept so that resuming it does not do it again.

    `kind` is `answer` (a model answer of the lead, `key` its step), `tool` (a tool result of the
    lead, `key` its tool call id) or `subagent` (a finished subagent's record, `key` the lead's
    tool call id and the prompt's index). `data` is a JSON object.
    """

    run_id: str
    kind: str
    key: str
    data: dict[str, Any]


_user_row: TypeAdapter[UserRow] = TypeAdapter(UserRow)
_run_row: TypeAdapter[RunRow] = TypeAdapter(RunRow)
_event_type: TypeAdapter[EventType] = TypeAdapter(EventType)
_event_data: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_usage: TypeAdapter[Usage] = TypeAdapter(Usage)
_aware: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)

# ---------------------------------------------------------------------------------------------
# Schema. `_core_tables` is the schema the queries below use, and migration 0001 creates it. When
# a later migration changes a table, first copy today's function into 0001 so it stays frozen
# (on a fresh database 0001 runs before the change; the tests fail loudly if this is forgotten).


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


_metadata = sa.MetaData()
_users, _runs, _events, _subagents = _core_tables(_metadata)
for _column in [*_lease_columns(), *_resume_columns()]:
    _runs.append_column(_column)
_checkpoints = _checkpoint_table(_metadata)
_migrations = sa.Table(
    "migrations",
    sa.MetaData(),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("applied_at", sa.Text, nullable=False),
)


def _m0001_core(conn: Connection) -> None:
    metadata = sa.MetaData()
    _core_tables_0001(metadata)
    metadata.create_all(conn)


def _m0002_subagent_results(conn: Connection) -> None:
    for column in ("model TEXT", "result TEXT", "result_file TEXT", "seq INTEGER"):
        conn.execute(sa.text(f"ALTER TABLE subagents ADD COLUMN {column}"))


def _m0003_user_tokens(conn: Connection) -> None:
    """Tokens that can be revoked and replaced: when the current token was made, and whether the
    user is revoked (`delegate users revoke|token`)."""
    conn.exec_driver_sql("ALTER TABLE users ADD COLUMN token_created_at TEXT")
    conn.exec_driver_sql("ALTER TABLE users ADD COLUMN revoked_at TEXT")
    conn.execute(_users.update().values(token_created_at=_users.c.created_at))


_claim_event_numbers = (
    _runs.update()
    .where(_runs.c.id == sa.bindparam("run_id"))
    .values(event_count=_runs.c.event_count + sa.bindparam("n"))
    .returning(_runs.c.event_count)
)
"""Reserve `n` event numbers of a run; returns the last one (None for an unknown run)."""


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


CORE_MIGRATIONS: tuple[Migration, ...] = (
    Migration("0001_core", _m0001_core),
    Migration("core.0002_subagent_results", _m0002_subagent_results),
    Migration("core.0003_user_tokens", _m0003_user_tokens),
    Migration("core.0004_run_leases", _m0004_run_leases),
    Migration("core.0005_run_resume_inputs", _m0005_run_resume_inputs),
)


# ---------------------------------------------------------------------------------------------


class Store:
    """Users, runs, events and subagent records in one database. Thread-safe; build one per process."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(delegate_write=True)
        if engine.dialect.name == "sqlite" and not event.contains(engine, "connect", _sqlite_on_connect):
            event.listen(engine, "connect", _sqlite_on_connect)
            event.listen(engine, "begin", _sqlite_on_begin)
        if engine.dialect.name == "postgresql" and not event.contains(engine, "connect", _pg_on_connect):
            event.listen(engine, "connect", _pg_on_connect)

    @classmethod
    def open(cls, url: str | os.PathLike[str], *, migrate: bool = True) -> Self:
        """Open `sqlite:///PATH`, a plain file path, or `postgresql://...`; apply the core migrations.

        The SQLite file's folder is created if missing.
        """
        store = cls(sa.create_engine(_engine_url(url)))
        if migrate:
            store.migrate()
        return store

    @classmethod
    def for_workspace(cls, root: str | os.PathLike[str], *, migrate: bool = True) -> Self:
        """The workspace's own store, `<root>/.delegate/delegate.db`."""
        return cls.open(Path(root) / ".delegate" / "delegate.db", migrate=migrate)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def write(self) -> Generator[Connection]:
        """A write transaction (`BEGIN IMMEDIATE` on SQLite), committed when the block ends.

        Raises `StoreBusyError` when another process holds the lock past the wait (nothing written),
        and `StoreError` for a database that cannot be reached or used (a constraint that a row
        breaks stays SQLAlchemy's `IntegrityError`, for the caller to turn into its own message).
        """
        with self._database_errors(), _busy_is_ours(), self._writer.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Generator[Connection]:
        """A read-only transaction: one consistent snapshot on SQLite, rolled back at the end."""
        with self._database_errors(), _busy_is_ours(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def _database_errors(self) -> Generator[None]:
        try:
            yield
        except IntegrityError:
            raise
        except (SQLAlchemyError, sqlite3.Error, UnicodeError, OSError) as exc:
            where = self.engine.url.render_as_string(hide_password=True)
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise StoreError(f"the database {where} cannot be used: {reason}") from exc

    # -- migrations -------------------------------------------------------------------------------

    def migrate(self, extra: Sequence[Migration] = ()) -> list[str]:
        """Apply the core migrations, then `extra`, each one not yet recorded; return the names applied.

        All of it is one transaction, under a lock (`BEGIN IMMEDIATE` on SQLite, an advisory lock
        on PostgreSQL), so processes that start together apply each migration exactly once.
        """
        steps = [*CORE_MIGRATIONS, *extra]
        names = [m.name for m in steps]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"migration names must be unique; repeated: {', '.join(duplicated)}")
        applied_now: list[str] = []
        if self._all_applied(names):
            return applied_now  # no write lock taken: a busy store does not stop a server from opening
        with self.write() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
            _migrations.create(conn, checkfirst=True)
            done = set(conn.scalars(sa.select(_migrations.c.name)))
            for step in steps:
                if step.name in done:
                    continue
                step.apply(conn)
                conn.execute(_migrations.insert().values(name=step.name, applied_at=_iso(_now())))
                applied_now.append(step.name)
        return applied_now

    def _all_applied(self, names: list[str]) -> bool:
        with self.read() as conn:
            if not sa.inspect(conn).has_table(_migrations.name):
                return False
            return set(names) <= set(conn.scalars(sa.select(_migrations.c.name)))

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in the order they were applied."""
        with self.read() as conn:
            query = sa.select(_migrations.c.name).order_by(_migrations.c.applied_at, _migrations.c.name)
            return list(conn.scalars(query))

    # -- users ----------------------------------------------------------------------------------

    def add_user(self, name: str) -> tuple[str, str]:
        """Create a user of the HTTP API; return `(user_id, token)`. Only the token's hash is kept."""
        name = name.strip()
        if not name:
            raise UserError("a user needs a name: pass a non-empty NAME")
        user_id = uuid.uuid4().hex
        token = secrets.token_urlsafe(32)
        now = _iso(_now())
        values = {"id": user_id, "name": name, "token_hash": _hash_token(token), "created_at": now}
        values["token_created_at"] = now
        try:
            with self.write() as conn:
                conn.execute(_users.insert().values(values))
        except IntegrityError:
            raise UserError(f"a user named {name!r} already exists: pick another name") from None
        return user_id, token

    def user_for_token(self, token: str) -> str | None:
        """The id of the user holding `token`, or None for an unknown or revoked token."""
        query = sa.select(_users.c.id).where(_users.c.token_hash == _hash_token(token), _users.c.revoked_at.is_(None))
        with self.read() as conn:
            return conn.scalar(query)

    def list_users(self) -> list[UserRow]:
        """Every user of the HTTP API, by name (tokens are never stored, only their hashes)."""
        query = sa.select(_users).order_by(_users.c.name)
        with self.read() as conn:
            return [_decode_user(row) for row in conn.execute(query).mappings()]

    def revoke_user(self, name: str) -> UserRow:
        """Refuse the user's tokens from now on (its runs and batches are kept); raises `UserError`
        for an unknown name. `new_token` gives the user a working token again."""
        now = _iso(_now())
        # The hash is replaced too, so the old token can never come back.
        values = {"revoked_at": now, "token_hash": _hash_token(secrets.token_urlsafe(32))}
        return self._change_user(name, values, keep_revoked=True)

    def new_token(self, name: str) -> tuple[UserRow, str]:
        """A new token for the user (printed once); the old one stops working at once, and a
        revoked user is let in again. Raises `UserError` for an unknown name."""
        token = secrets.token_urlsafe(32)
        values = {"token_hash": _hash_token(token), "token_created_at": _iso(_now()), "revoked_at": None}
        return self._change_user(name, values, keep_revoked=False), token

    def _change_user(self, name: str, values: dict[str, Any], *, keep_revoked: bool) -> UserRow:
        name = name.strip()
        with self.write() as conn:
            query = _users.update().where(_users.c.name == name)
            if keep_revoked:  # revoking twice keeps the first time
                values = {**values, "revoked_at": sa.func.coalesce(_users.c.revoked_at, values["revoked_at"])}
            row = conn.execute(query.values(values).returning(*_users.c)).mappings().first()
        if row is None:
            raise UserError(f"no user named {name!r}: `delegate users list` shows them")
        return _decode_user(row)

    # -- runs -------------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        prompt: str,
        model: str,
        user_id: str | None = None,
        workspace: str | None = None,
        run_id: str | None = None,
        owner: str | None = None,
        uploaded_files: list[dict[str, Any]] | None = None,
        token_budget: int | None = None,
        max_requests: int | None = None,
    ) -> RunRow:
        """Record a new run, `running`, its lease held by `owner` (default: a new owner id of this
        process, see `delegate._lease`), who keeps it with `heartbeat`. `run_id` defaults to a fresh id;
        `uploaded_files` and the run-wide budgets are kept for the run's resume."""
        now = _now()
        owner = owner or new_owner()
        run = RunRow(
            id=run_id or uuid.uuid4().hex,
            user_id=user_id,
            prompt=safe_text(prompt),
            model=model,
            status="running",
            workspace=workspace,
            created_at=now,
            owner=owner,
            heartbeat_at=now,
            uploaded_files=uploaded_files,
            token_budget=token_budget,
            max_requests=max_requests,
        )
        with self.write() as conn:
            conn.execute(_runs.insert().values(_run_values(run)))
        return run

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        final: str | None = None,
        usage: Usage | None = None,
        error: str | None = None,
        *,
        owner: str | None = None,
        stop_reason: str | None = None,
        steps: int = 0,
    ) -> bool:
        """Record how a run ended. The first call wins: False if the run had already finished, or if
        `owner` is given and no longer holds the run's lease (another process took the run over).

        Raises `StoreError` for an unknown run.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"finish_run needs a final status, not {status!r}")
        with self.write() as conn:
            values = {"stop_reason": stop_reason, "steps": steps}
            return self._finish(conn, run_id, status, final, usage, error, owner, values)

    def _finish(
        self,
        conn: Connection,
        run_id: str,
        status: RunStatus,
        final: str | None,
        usage: Usage | None,
        error: str | None,
        owner: str | None,
        extra: dict[str, Any],
    ) -> bool:
        values = {
            **extra,
            "status": status,
            "final": None if final is None else safe_text(final),
            "usage": _usage.dump_json(usage or Usage()).decode(),
            "error": None if error is None else safe_text(error),
            "completed_at": _iso(_now()),
            "owner": None,
        }
        where = [_runs.c.id == run_id, _runs.c.status.in_(("running", "interrupted"))]
        if owner is not None:
            where.append(_runs.c.owner == owner)
        if conn.execute(_runs.update().where(*where).values(values)).rowcount == 1:
            return True
        if conn.scalar(sa.select(_runs.c.id).where(_runs.c.id == run_id)) is None:
            raise StoreError(f"no run {run_id!r} in the store")
        return False

    def get_run(self, run_id: str, user_id: str | None = None) -> RunRow | None:
        """The run, or None if there is none, or if `user_id` is given and the run is another user's.

        A `running` run whose owner is gone reads `interrupted`.
        """
        query = sa.select(_runs).where(_runs.c.id == run_id)
        if user_id is not None:
            query = query.where(_runs.c.user_id == user_id)
        with self.read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _decode_run(row)

    def list_runs(
        self, user_id: str | None = None, *, limit: int = 50, offset: int = 0, status: RunStatus | None = None
    ) -> list[RunRow]:
        """Runs, newest first: `user_id`'s own, or every run when it is None; only `status` ones if given."""
        query = sa.select(_runs).order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
        if user_id is not None:
            query = query.where(_runs.c.user_id == user_id)
        live = status in ("running", "interrupted")
        if status is not None:
            query = query.where(_runs.c.status.in_(("running", "interrupted")) if live else _runs.c.status == status)
        if not live:
            query = query.limit(limit).offset(offset)
        with self.read() as conn:
            seen: dict[str, bool] = {}
            runs = [_decode_run(row, seen) for row in conn.execute(query).mappings()]
        if live:  # which of them is interrupted is decided on reading
            runs = [r for r in runs if r.status == status][offset : offset + limit]
        return runs

    def heartbeat(self, run_id: str, owner: str, usage: Usage | None = None) -> tuple[bool, bool]:
        """Renew `owner`'s lease of a run (and store its usage so far); return `(held, cancel_requested)`.

        `held` is False when the run ended or another process took it over: stop working on it.
        """
        values: dict[str, Any] = {"heartbeat_at": _iso(_now())}
        if usage is not None:
            values["usage"] = _usage.dump_json(usage).decode()
        with self.write() as conn:
            update = _runs.update().where(_runs.c.id == run_id, _runs.c.owner == owner, _runs.c.status == "running")
            held = conn.execute(update.values(values)).rowcount == 1
            cancel = held and bool(conn.scalar(sa.select(_runs.c.cancel_requested).where(_runs.c.id == run_id)))
        return held, cancel

    def claim_run(self, run_id: str, owner: str, user_id: str | None = None) -> RunRow:
        """Take over an interrupted run for `owner`, to resume it; `UserError` if it cannot be resumed.

        Exactly one of several processes claiming the same run at once wins.
        """
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status == "running":
            raise UserError(f"run {run_id} is still running (in process {run.owner}): it cannot be resumed")
        if run.status != "interrupted":
            raise UserError(f"run {run_id} already ended ({run.status}): only an interrupted run can be resumed")
        values = {"owner": owner, "heartbeat_at": _iso(_now()), "status": "running", "cancel_requested": 0}
        taken = [_runs.c.id == run_id, _runs.c.status == "running"]
        taken.append(_runs.c.owner == run.owner if run.owner is not None else _runs.c.owner.is_(None))
        with self.write() as conn:
            if conn.execute(_runs.update().where(*taken).values(values)).rowcount != 1:
                raise UserError(f"run {run_id} was just taken over by another process")
        run.status, run.owner, run.cancel_requested = "running", owner, False
        return run

    def request_cancel(self, run_id: str, user_id: str | None = None) -> RunRow:
        """Cancel a run from any process: an interrupted run is recorded `cancelled` at once; a
        running one is asked to stop (its owner does so at its next heartbeat). `UserError` if it ended."""
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status == "interrupted":
            with self.write() as conn:
                where = [_runs.c.id == run_id, _runs.c.status == "running"]
                if run.owner is not None:
                    where.append(_runs.c.owner == run.owner)
                conn.execute(
                    _runs.update()
                    .where(*where)
                    .values(status="cancelled", owner=None, error="cancelled", completed_at=_iso(_now()))
                )
        elif run.status == "running":
            with self.write() as conn:
                update = _runs.update().where(_runs.c.id == run_id, _runs.c.status == "running")
                conn.execute(update.values(cancel_requested=1))
        else:
            raise UserError(f"run {run_id} already ended ({run.status}): nothing to cancel")
        found = self.get_run(run_id, user_id)
        assert found is not None
        return found

    def interrupted_runs(self, user_id: str | None = None) -> list[RunRow]:
        """Runs whose process is gone, oldest first: what a restarted server resumes."""
        return list(reversed(self.list_runs(user_id, status="interrupted", limit=10_000)))

    # -- progress: events, checkpoints and subagent records together --------------------------

    def record(
        self,
        events: Sequence[Event] = (),
        checkpoints: Sequence[Checkpoint] = (),
        subagents: Sequence[tuple[str, TaskOutput]] = (),
    ) -> None:
        """Store a run's progress in one transaction: what a run's recorder writes as it goes.
        `subagents` are `(run_id, record)` pairs.

        Checkpoints already stored (same run, kind and key) are kept as they were: the first wins.
        """
        event_rows = [_event_values(ev) for ev in events]
        checkpoint_rows = [_checkpoint_values(c) for c in checkpoints]
        subagent_rows = [_subagent_values(run_id, r) for run_id, r in subagents]
        with self.write() as conn:
            if event_rows:
                _insert_events(conn, event_rows)
            if checkpoint_rows:
                _insert(conn, _checkpoints, checkpoint_rows, conflict="nothing")
            if subagent_rows:
                _upsert_subagents(conn, subagent_rows)

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """A run's checkpoints, in the order they were stored."""
        query = sa.select(_checkpoints).where(_checkpoints.c.run_id == run_id).order_by(_checkpoints.c.id)
        with self.read() as conn:
            return [_decode_checkpoint(row) for row in conn.execute(query).mappings()]

    # -- events ---------------------------------------------------------------------------------

    def add_events(self, events: Iterable[Event]) -> None:
        """Append events in one transaction; each run's events are numbered 1, 2, 3, ... in order.

        Built for batches: thousands of events go in one `executemany`. Each run must exist.
        """
        rows = [_event_values(ev) for ev in events]
        if rows:
            with self.write() as conn:
                _insert_events(conn, rows)

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """A run's events in order, from number `after_seq + 1` on (numbers start at 1, no gaps).

        A reader that has seen `n` events asks for `after_seq=n` to get only the new ones.
        """
        query = (
            sa.select(_events)
            .where(_events.c.run_id == run_id, _events.c.seq > after_seq)
            .order_by(_events.c.seq)
            .limit(limit)
        )
        with self.read() as conn:
            return [_decode_event(row) for row in conn.execute(query).mappings()]

    # -- subagents --------------------------------------------------------------------------------

    def add_subagent_records(self, run_id: str, records: Iterable[TaskOutput]) -> None:
        """Store a run's subagent records (`TaskOutput.to_dict`'s shape), each checked first.

        A record whose id is already stored replaces it, so a subagent can be recorded when it
        starts and again when it ends, and recording the same end twice stores it once.
        """
        rows = [_subagent_values(run_id, r) for r in records]
        if rows:
            with self.write() as conn:
                _upsert_subagents(conn, rows)

    def subagent_records(self, run_id: str) -> list[TaskOutput]:
        """A run's subagent records, in the order the lead called them (`TaskOutput.seq`)."""
        query = (
            sa.select(_subagents)
            .where(_subagents.c.run_id == run_id)
            .order_by(_subagents.c.seq, _subagents.c.started_at, _subagents.c.id)
        )
        with self.read() as conn:
            return [_decode_subagent(run_id, row) for row in conn.execute(query).mappings()]


# ---------------------------------------------------------------------------------------------
# Connections


def _engine_url(url: str | os.PathLike[str]) -> sa.URL:
    text = os.fspath(url)
    if "://" not in text:
        text = f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        parsed = sa.make_url(text)
    except ArgumentError:
        raise UserError(
            f"{text!r} is not a database URL: use sqlite:///PATH, a file path or postgresql://..."
        ) from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend != "sqlite":
        shown = parsed.render_as_string(hide_password=True)
        raise UserError(f"unsupported database {shown!r}: use sqlite:///PATH, a file path or postgresql://...")
    if not parsed.database or parsed.database == ":memory:" or parsed.database.startswith("file:"):
        raise UserError("the store needs a SQLite file, not an in-memory database: pass sqlite:///PATH")
    path = Path(parsed.database).expanduser()
    _refuse_a_file_that_is_not_a_store(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return parsed


SQLITE_HEADER = b"SQLite format 3\x00"
FRESH_FILE_SECONDS = 30.0
"""An empty store file younger than this is one being created (SQLite makes the file, then writes)."""


def _refuse_a_file_that_is_not_a_store(path: Path) -> None:
    """A file where the store should be that is not a SQLite database (overwritten, truncated) is a
    `UserError`: opening it would either fail later with a traceback or, for an empty file, start a
    fresh store silently, and every user, token, run and batch would seem gone."""
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return  # a new store
    except IsADirectoryError:
        raise UserError(f"the store {str(path)!r} is a folder, not a SQLite database: pass another --db") from None
    except OSError as exc:
        raise UserError(f"the store {str(path)!r} cannot be read ({exc.strerror}): check its permissions") from None
    if not head and time.time() - path.stat().st_mtime < FRESH_FILE_SECONDS:
        return  # another process is creating the store this moment: SQLite writes its header soon
    if head != SQLITE_HEADER:
        what = "is empty" if not head else "is not a SQLite database"
        raise UserError(
            f"the store {str(path)!r} {what}, so it was overwritten or damaged: restore it from a backup, or "
            "move it away to start a new, empty store (every user, token, run and batch would then be gone)"
        )


def _sqlite_on_connect(dbapi_connection: Any, _record: object) -> None:
    # Take BEGIN away from the sqlite3 module (its legacy mode skips BEGIN before DDL and
    # SELECT); `_sqlite_on_begin` emits it instead, IMMEDIATE for writes.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # The timeout first: switching a new file to WAL takes a lock that another process may hold.
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # In WAL mode NORMAL never corrupts the file and survives a crash of the process; only an
        # OS crash or power cut can lose the last commits. It makes each commit skip an fsync.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _pg_on_connect(dbapi_connection: Any, _record: object) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS}")
    dbapi_connection.commit()


@contextmanager
def _busy_is_ours() -> Generator[None]:
    """SQLite's "database is locked" and PostgreSQL's lock timeout, as `StoreBusyError`."""
    try:
        yield
    except OperationalError as exc:
        original = exc.orig
        message = str(original)
        pg_lock_timeout = getattr(getattr(original, "diag", None), "sqlstate", None) == "55P03"
        if pg_lock_timeout or "database is locked" in message or "database is busy" in message:
            raise StoreBusyError(message.splitlines()[0] if message else "") from None
        raise


def _sqlite_on_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get("delegate_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _upsert(conn: Connection) -> Callable[[sa.Table], Any]:
    """The dialect's INSERT that supports ON CONFLICT (both spell it the same way)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


# ---------------------------------------------------------------------------------------------
# Values in and out


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError(f"timestamps must be timezone-aware, got {moment!r}")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _json_text(value: Any) -> str:
    """JSON text of `value`, its strings made valid UTF-8 first if they need it (see `_text.py`)."""
    try:
        return to_json(value, fallback=str).decode()
    except PydanticSerializationError:
        return to_json(safe_json(value), fallback=str).decode()


def _event_values(ev: Event) -> dict[str, Any]:
    return {
        "run_id": ev.run_id,
        "type": ev.type,
        "ts": ev.ts,
        "agent_id": safe_text(ev.agent_id),
        "parent_agent_id": ev.parent_agent_id,
        "tool_call_id": None if ev.tool_call_id is None else safe_text(ev.tool_call_id),
        "data": _json_text(ev.data),
    }


def _checkpoint_values(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "run_id": checkpoint.run_id,
        "kind": checkpoint.kind,
        "key": safe_text(checkpoint.key),
        "data": _json_text(checkpoint.data),
    }


def _insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Number `rows` after each run's last event (taking the run's row lock) and insert them."""
    seq: dict[str, int] = {}
    for run_id, n in Counter(row["run_id"] for row in rows).items():
        last = conn.scalar(_claim_event_numbers, {"run_id": run_id, "n": n})
        if last is None:
            raise StoreError(f"no run {run_id!r}: create the run before adding its events")
        seq[run_id] = last - n
    for row in rows:
        row["seq"] = seq[row["run_id"]] = seq[row["run_id"]] + 1
    _insert(conn, _events, rows)


def _upsert_subagents(conn: Connection, rows: list[dict[str, Any]]) -> None:
    _insert(conn, _subagents, rows, conflict="update")


def _insert(
    conn: Connection, table: sa.Table, rows: list[dict[str, Any]], conflict: Literal["nothing", "update"] | None = None
) -> None:
    """Insert `rows` (all with the same keys) into `table`; on a conflict with a row already there
    (its primary key or a unique constraint), keep that row (`nothing`) or replace it (`update`:
    by `id`).

    On SQLite the driver takes many rows in one statement: SQLite then runs one step for all of
    them, and the thread lets go of the GIL once, not once a row, which under a busy event loop
    made each row wait for the loop's switch interval.
    """
    if conn.dialect.name != "sqlite":
        insert = _upsert(conn)(table)
        if conflict == "nothing":
            insert = insert.on_conflict_do_nothing()
        elif conflict == "update":
            update = {c.name: insert.excluded[c.name] for c in table.columns if c.name != "id"}
            insert = insert.on_conflict_do_update(index_elements=["id"], set_=update)
        conn.execute(insert, rows)
        return
    columns = tuple(rows[0])
    per_statement = min(_SQLITE_ROWS, _SQLITE_VARIABLES // len(columns))
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            cursor.execute(
                _sqlite_insert(table.name, columns, len(chunk), conflict),
                [row[c] for row in chunk for c in columns],
            )
    finally:
        cursor.close()


_SQLITE_VARIABLES = 32_766
"""SQLite's limit on the parameters of one statement (SQLITE_MAX_VARIABLE_NUMBER, since 3.32)."""
_SQLITE_ROWS = 500
"""Rows per statement: measured fastest (3 µs a row, 4-6 µs with 4,000 rows or one at a time);
the full statements are the same SQL each time, so the driver reuses them prepared."""


@functools.lru_cache(maxsize=256)
def _sqlite_insert(table: str, columns: tuple[str, ...], n: int, conflict: str | None) -> str:
    row = f"({', '.join('?' * len(columns))})"
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * n)}"
    if conflict == "nothing":
        return sql + " ON CONFLICT DO NOTHING"
    if conflict == "update":
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "id")
        return sql + f" ON CONFLICT (id) DO UPDATE SET {updates}"
    return sql


def _run_values(run: RunRow) -> dict[str, Any]:
    values = asdict(run)
    values["usage"] = _usage.dump_json(run.usage).decode()
    values["created_at"] = _iso(run.created_at)
    values["completed_at"] = None if run.completed_at is None else _iso(run.completed_at)
    values["heartbeat_at"] = None if run.heartbeat_at is None else _iso(run.heartbeat_at)
    values["cancel_requested"] = int(run.cancel_requested)
    values["uploaded_files"] = None if run.uploaded_files is None else _json_text(run.uploaded_files)
    return values


_SUBAGENT_JSON = ("usage", "artifacts", "skipped", "acceptance", "result")


def _subagent_values(run_id: str, record: TaskOutput) -> dict[str, Any]:
    """One `subagents` row: the record's `to_dict`, its nested values as JSON text."""
    if record.status not in STATUSES:
        raise StoreError(f"invalid subagent record {record.id!r}: unknown status {record.status!r}")
    if record.started_at is None:
        raise StoreError(f"invalid subagent record {record.id!r}: it has no started_at")
    values = record.to_dict()
    values["id"] = f"{run_id}/{record.id}"
    values["run_id"] = run_id
    values["seq"] = record.seq
    for name in _SUBAGENT_JSON:
        values[name] = _json_text(values[name])
    for name in ("description", "summary", "error", "type", "model"):
        if values[name] is not None:
            values[name] = safe_text(values[name])
    values["started_at"] = _iso(record.started_at)
    values["completed_at"] = None if record.completed_at is None else _iso(record.completed_at)
    return values


def _decode(adapter: TypeAdapter[_T], row: Mapping[Any, Any], table: str, json_columns: tuple[str, ...]) -> _T:
    """Validate one stored row into its dataclass, or raise StoreError saying where it is damaged."""
    values: dict[str, Any] = {str(key): value for key, value in row.items()}
    column = ""
    try:
        for column in json_columns:
            values[column] = from_json(values[column])
        column = ""
        return adapter.validate_python(values)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError too
        where = f" column {column!r}" if column else ""
        raise StoreError(
            f"{table} row {values.get('id')!r}{where} holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def _decode_user(row: sa.RowMapping) -> UserRow:
    return _decode(_user_row, {k: v for k, v in row.items() if k != "token_hash"}, "users", ())


def _decode_run(row: sa.RowMapping, seen: dict[str, bool] | None = None) -> RunRow:
    """A stored run; one stored `running` whose owner is gone reads `interrupted` (`seen`: what
    was found of each owner so far in this listing, see `owner_alive`)."""
    run = _decode(_run_row, row, "runs", ("usage",) if row["uploaded_files"] is None else ("usage", "uploaded_files"))
    if run.status == "running" and not owner_alive(run.owner, run.heartbeat_at, _now(), RUN_LEASE_TTL, seen):
        run.status = "interrupted"  # stored `running`; its owner is gone
    return run


def _decode_checkpoint(row: sa.RowMapping) -> Checkpoint:
    try:
        return Checkpoint(run_id=row["run_id"], kind=row["kind"], key=row["key"], data=from_json(row["data"]))
    except ValueError as exc:
        raise StoreError(
            f"checkpoints row {row['id']!r} (run {row['run_id']!r}) holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def _decode_subagent(run_id: str, row: sa.RowMapping) -> TaskOutput:
    values: dict[str, Any] = {str(key): value for key, value in row.items()}
    column = ""
    try:
        for column in _SUBAGENT_JSON:
            values[column] = None if values[column] is None else from_json(values[column])
        column = ""
        values["id"] = values["id"].removeprefix(f"{run_id}/")
        values["model"] = values["model"] or ""
        for moment in ("started_at", "completed_at"):
            if values[moment] is not None:
                values[moment] = _aware.validate_python(values[moment])
        return TaskOutput.from_dict(values, seq=values.pop("seq") or 0)
    except ValueError as exc:
        where = f" column {column!r}" if column else ""
        raise StoreError(
            f"subagents row {row['id']!r}{where} holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def _decode_event(row: sa.RowMapping) -> Event:
    try:
        return Event(
            type=_event_type.validate_python(row["type"]),
            run_id=row["run_id"],
            agent_id=row["agent_id"],
            parent_agent_id=row["parent_agent_id"],
            tool_call_id=row["tool_call_id"],
            data=_event_data.validate_json(row["data"]),
            ts=row["ts"],
        )
    except ValueError as exc:
        raise StoreError(
            f"events row {row['id']!r} (run {row['run_id']!r}, number {row['seq']}) holds data delegate "
            f"cannot read ({exc}); it was changed outside delegate or by another version"
        ) from None
