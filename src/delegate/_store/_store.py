"""The `Store` class: one handle on the database, with its transactions, migrations and queries."""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import uuid
from collections.abc import Collection, Generator, Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from .._errors import StoreError, UserError
from .._events import Event
from .._lease import new_owner
from .._record import END_STATUSES, LIVE_STATUSES, Status, TaskOutput
from .._text import safe_text
from .._time import iso, utc_now
from .._usage import Usage
from . import _approvals  # pyright: ignore[reportPrivateUsage]
from ._approvals import ApprovalRow, Decision
from ._db import (
    SharedEngine,
    busy_is_ours,
    engine_url,
    insert_events,
    insert_rows,
    pg_on_connect,
    select_rows,
    sqlite_on_begin,
    sqlite_on_connect,
    upsert_subagents,
)
from ._listing import run_listing
from ._rows import (
    CHECKPOINT_COLUMNS,
    EVENTS_PER_ROW,
    Checkpoint,
    KeptConversation,
    RunRow,
    RunSummary,
    UserRow,
    checkpoint_values,
    conversation_checkpoint,
    decode_checkpoint,
    decode_events,
    decode_run,
    decode_subagent,
    decode_user,
    event_rows,
    json_text,
    kept_systems,
    run_values,
    subagent_values,
    system_rows,
    usage_adapter,
)
from ._schema import (
    CORE_MIGRATIONS,
    SYSTEM,
    Migration,
    checkpoints_table,
    events_table,
    migrations_table,
    runs_table,
    subagents_table,
    users_table,
)
from ._stops import ask_stop, check_agent_id, stop_requests
from ._threads import ThreadSummary, already_continued, continuable, latest_run, thread_rows, threads_of

_MIGRATION_LOCK = 0x64656C6567617465  # "delegate" in ASCII: the PostgreSQL advisory lock key


_RECORD = [c for c in subagents_table.c if c.name != "conversation"]
"""A subagent row's columns but its conversation: what a record is read from."""
_KEPT_CONVERSATION = [subagents_table.c[n] for n in ("id", "type", "key", "messages", "conversation")]
"""What `conversation_checkpoint` reads of a subagent row."""

_FINISH_TEXT = (
    "UPDATE runs SET status = :status, final = :final, usage = :usage, error = :error, completed_at = :completed_at,"
    " stop_reason = :stop_reason, steps = :steps, result = :result, owner = NULL"
    " WHERE id = :run_id AND status IN ('running', 'interrupted')"
)
_FINISH = sa.text(_FINISH_TEXT)
"""How a run ends (`Store.finish_run`). Text, the same on both backends: an `update()` is compiled
once for each database a process opens (1 ms of each run in a new workspace)."""
_FINISH_OWNED = sa.text(_FINISH_TEXT + " AND owner = :owner")
"""The same, if `owner` still holds the run's lease."""


def _hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


_user_of_token = sa.select(users_table.c.id).where(
    users_table.c.token_hash == sa.bindparam("token_hash"), users_table.c.revoked_at.is_(None)
)
_name_of_token = sa.select(users_table.c.name).where(
    users_table.c.token_hash == sa.bindparam("token_hash"), users_table.c.revoked_at.is_(None)
)


class Store:
    """Users, runs, events and subagent records in one database. Thread-safe; build one per process."""

    def __init__(self, engine: Engine, *, shared: SharedEngine | None = None) -> None:
        self.engine = engine
        self._shared = shared
        self._closed = False
        self._writer = engine.execution_options(delegate_write=True)
        if engine.dialect.name == "sqlite" and not event.contains(engine, "connect", sqlite_on_connect):
            event.listen(engine, "connect", sqlite_on_connect)
            event.listen(engine, "begin", sqlite_on_begin)
        if engine.dialect.name == "postgresql" and not event.contains(engine, "connect", pg_on_connect):
            event.listen(engine, "connect", pg_on_connect)

    @classmethod
    def open(cls, url: str | os.PathLike[str], *, migrate: bool = True) -> Self:
        """Open `sqlite:///PATH`, a plain file path, or `postgresql://...`; apply the core migrations.

        The SQLite file's folder is created if missing. Stores of one database opened in one
        process share its engine (see `SharedEngine`).
        """
        shared = SharedEngine.acquire(engine_url(url))
        store = cls(shared.engine, shared=shared)
        if migrate:
            try:
                store.migrate()
            except BaseException:
                store.close()
                raise
        return store

    @classmethod
    def for_workspace(cls, root: str | os.PathLike[str], *, migrate: bool = True) -> Self:
        """The workspace's own store, `<root>/.delegate/delegate.db`."""
        return cls.open(Path(root) / ".delegate" / "delegate.db", migrate=migrate)

    def close(self) -> None:
        """Close this handle; the database's connections close with the last handle open on it."""
        if self._closed:
            return
        self._closed = True
        if self._shared is None:
            self.engine.dispose()
        else:
            self._shared.release()

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
        with self._database_errors(), busy_is_ours(), self._writer.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Generator[Connection]:
        """A read-only transaction: one consistent snapshot on SQLite, rolled back at the end."""
        with self._database_errors(), busy_is_ours(), self.engine.connect() as conn:
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
            migrations_table.create(conn, checkfirst=True)
            done = set(conn.scalars(sa.select(migrations_table.c.name)))
            for step in steps:
                if step.name in done:
                    continue
                step.apply(conn)
                conn.execute(migrations_table.insert().values(name=step.name, applied_at=iso(utc_now())))
                applied_now.append(step.name)
        return applied_now

    def _all_applied(self, names: list[str]) -> bool:
        """Whether all of `names` are recorded; False too when that cannot be read (no table yet,
        or anything else: `migrate` then looks again under the write lock, and says what failed)."""
        with self.read() as conn:
            try:
                return set(names) <= set(conn.exec_driver_sql("SELECT name FROM migrations").scalars())
            except DBAPIError:
                return False

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this database, in the order they were applied."""
        with self.read() as conn:
            query = sa.select(migrations_table.c.name).order_by(migrations_table.c.applied_at, migrations_table.c.name)
            return list(conn.scalars(query))

    # -- users ----------------------------------------------------------------------------------

    def add_user(self, name: str) -> tuple[str, str]:
        """Create a user of the HTTP API; return `(user_id, token)`. Only the token's hash is kept."""
        name = name.strip()
        if not name:
            raise UserError("a user needs a name: pass a non-empty NAME")
        user_id = uuid.uuid4().hex
        token = secrets.token_urlsafe(32)
        now = iso(utc_now())
        values = {"id": user_id, "name": name, "token_hash": _hash_token(token), "created_at": now}
        values["token_created_at"] = now
        try:
            with self.write() as conn:
                conn.execute(users_table.insert().values(values))
        except IntegrityError:
            raise UserError(f"a user named {name!r} already exists: pick another name") from None
        return user_id, token

    def user_for_token(self, token: str) -> str | None:
        """The id of the user holding `token`, or None for an unknown or revoked token."""
        with self.read() as conn:
            return conn.scalar(_user_of_token, {"token_hash": _hash_token(token)})

    def held_tokens(self, tokens: Collection[str]) -> set[str]:
        """Those of `tokens` that a user still holds (not revoked, not replaced by a new one):
        one read, however many tokens (a server checks the tokens of its open streams with it)."""
        hashes = {_hash_token(token): token for token in tokens}
        if not hashes:
            return set()
        query = sa.select(users_table.c.token_hash).where(
            users_table.c.token_hash.in_(list(hashes)), users_table.c.revoked_at.is_(None)
        )
        with self.read() as conn:
            return {hashes[found] for found in conn.scalars(query)}

    def list_users(self) -> list[UserRow]:
        """Every user of the HTTP API, by name (tokens are never stored, only their hashes)."""
        query = sa.select(users_table).order_by(users_table.c.name)
        with self.read() as conn:
            return [decode_user(row) for row in conn.execute(query).mappings()]

    def revoke_user(self, name: str) -> UserRow:
        """Refuse the user's tokens from now on (its runs and batches are kept); raises `UserError`
        for an unknown name. `new_token` gives the user a working token again."""
        now = iso(utc_now())
        # The hash is replaced too, so the old token can never come back.
        values = {"revoked_at": now, "token_hash": _hash_token(secrets.token_urlsafe(32))}
        return self._change_user(name, values, keep_revoked=True)

    def new_token(self, name: str) -> tuple[UserRow, str]:
        """A new token for the user (printed once); the old one stops working at once, and a
        revoked user is let in again. Raises `UserError` for an unknown name."""
        token = secrets.token_urlsafe(32)
        values = {"token_hash": _hash_token(token), "token_created_at": iso(utc_now()), "revoked_at": None}
        return self._change_user(name, values, keep_revoked=False), token

    def _change_user(self, name: str, values: dict[str, Any], *, keep_revoked: bool) -> UserRow:
        name = name.strip()
        with self.write() as conn:
            query = users_table.update().where(users_table.c.name == name)
            if keep_revoked:  # revoking twice keeps the first time
                values = {**values, "revoked_at": sa.func.coalesce(users_table.c.revoked_at, values["revoked_at"])}
            row = conn.execute(query.values(values).returning(*users_table.c)).mappings().first()
        if row is None:
            raise UserError(f"no user named {name!r}: `delegate users list` shows them")
        return decode_user(row)

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
        limits: dict[str, Any] | None = None,
        warnings: Sequence[str] = (),
        previous_run_id: str | None = None,
        workflow: dict[str, Any] | None = None,
        eval_tag: dict[str, Any] | None = None,
    ) -> RunRow:
        """Record a new run, `running`, its lease held by `owner` (default: a new owner id of this
        process, see `delegate._lease`), who keeps it with `heartbeat`. `run_id` defaults to a fresh id;
        `uploaded_files`, `limits` (its `RunLimits.to_dict`) and a `workflow` are kept for the run's
        resume; `warnings` are what was wrong as it started (`RunRow.warnings`); `eval_tag` says
        which evaluation attempt the run is (`RunRow.eval`).

        With `previous_run_id` the run continues that run (of `user_id`), in its thread: `UserError`
        if there is no such run, if it has not ended, or if another run continued it first (exactly
        one of several continues of one run wins; see `_threads.py`)."""
        now = utc_now()
        owner = owner or new_owner()
        new_id = run_id or uuid.uuid4().hex
        run = RunRow(
            id=new_id,
            user_id=user_id,
            prompt=safe_text(prompt),
            model=model,
            status="running",
            workspace=workspace,
            created_at=now,
            owner=owner,
            heartbeat_at=now,
            uploaded_files=uploaded_files,
            limits=limits,
            warnings=list(warnings),
            thread_id=new_id,
            previous_run_id=previous_run_id,
            workflow=workflow,
            eval=eval_tag,
        )
        try:
            with self.write() as conn:
                if previous_run_id is not None:
                    run.thread_id = continuable(conn, previous_run_id, user_id)
                values = run_values(run)  # not compiled for each database, as an `insert()` is: 2.1 -> 0.7 ms
                insert_rows(conn, runs_table, tuple(values), [tuple(values.values())])
        except IntegrityError:
            if previous_run_id is None:
                raise
            raise already_continued(self, previous_run_id, user_id) from None
        return run

    def finish_run(
        self,
        run_id: str,
        status: Status,
        final: str | None = None,
        usage: Usage | None = None,
        error: str | None = None,
        *,
        owner: str | None = None,
        stop_reason: str | None = None,
        steps: int = 0,
        result: Any = None,
    ) -> bool:
        """Record how a run ended (`result`: the lead's typed result as JSON data, if it has one).
        The first call wins: False if the run had already finished, or if `owner` is given and no
        longer holds the run's lease (another process took the run over).

        Raises `StoreError` for an unknown run.
        """
        if status not in END_STATUSES:
            raise ValueError(f"finish_run needs a final status, not {status!r}")
        with self.write() as conn:
            values = {
                "stop_reason": stop_reason,
                "steps": steps,
                "result": None if result is None else json_text(result),
            }
            return self._finish(conn, run_id, status, final, usage, error, owner, values)

    def _finish(
        self,
        conn: Connection,
        run_id: str,
        status: Status,
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
            "usage": usage_adapter.dump_json(usage or Usage()).decode(),
            "error": None if error is None else safe_text(error),
            "completed_at": iso(utc_now()),
            "run_id": run_id,
        }
        if owner is not None:
            values["owner"] = owner
        if conn.execute(_FINISH_OWNED if owner is not None else _FINISH, values).rowcount == 1:
            _approvals.close(conn, run_id, status)
            return True
        if conn.scalar(sa.select(runs_table.c.id).where(runs_table.c.id == run_id)) is None:
            raise StoreError(f"no run {run_id!r} in the store")
        return False

    def get_run(self, run_id: str, user_id: str | None = None) -> RunRow | None:
        """The run, or None if there is none, or if `user_id` is given and the run is another user's.
        A `running` run whose owner is gone reads `interrupted`."""
        query = sa.select(runs_table).where(runs_table.c.id == run_id)
        if user_id is not None:
            query = query.where(runs_table.c.user_id == user_id)
        with self.read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else decode_run(row)

    def list_runs(
        self, user_id: str | None = None, *, limit: int = 50, offset: int = 0, status: Status | None = None
    ) -> list[RunRow]:
        """Runs, newest first: `user_id`'s own, or every run when it is None; only `status` ones if given."""
        query = sa.select(runs_table).order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc())
        if user_id is not None:
            query = query.where(runs_table.c.user_id == user_id)
        live = status in ("running", "waiting", "interrupted")
        if status is not None:
            query = query.where(
                runs_table.c.status.in_(("running", "interrupted")) if live else runs_table.c.status == status
            )
        if not live:
            query = query.limit(limit).offset(offset)
        with self.read() as conn:
            seen: dict[str, bool] = {}
            runs = [decode_run(row, seen) for row in conn.execute(query).mappings()]
        if live:  # which of them is interrupted is decided on reading
            runs = [r for r in runs if r.status == status][offset : offset + limit]
        return runs

    def listing(self, *, limit: int = 50, offset: int = 0, status: Status | None = None) -> list[RunSummary]:
        """Every run, newest first, as a listing shows it (`delegate runs list`: the lines of `GET
        /runs`, subagent counts included), only `status` ones if given."""
        with self.read() as conn:
            return run_listing(conn, None, limit=limit, offset=offset, query=None, status=status)

    def run_summaries(
        self, token: str, *, limit: int = 50, offset: int = 0, query: str | None = None, status: Status | None = None
    ) -> list[RunSummary] | None:
        """The runs of the user holding `token`, newest first, as a listing shows them (see
        `RunSummary`, with how many subagents each ran and how many of those failed); only those
        whose prompt holds `query` (any case) and that read `status`, when given. None for an
        unknown or revoked token.

        The token is checked in the same call, on the same connection, as the listing (what
        `GET /runs` needs: one trip to the store a request), and never cached, so a token revoked
        by any process is refused from the next call on.
        """
        with self.read() as conn:
            found = select_rows(conn, _user_of_token, {"token_hash": _hash_token(token)})
            if not found:
                return None
            return run_listing(conn, found[0][0], limit=limit, offset=offset, query=query, status=status)

    def user_name_for_token(self, token: str) -> str | None:
        """The name of the user holding `token`, or None for an unknown or revoked token."""
        with self.read() as conn:
            return conn.scalar(_name_of_token, {"token_hash": _hash_token(token)})

    def heartbeat(
        self, run_id: str, owner: str, usage: Usage | None = None
    ) -> tuple[bool, bool, dict[str, str | None]]:
        """Renew `owner`'s lease of a run (and store its usage so far); return `(held,
        cancel_requested, stop_requests)`: `stop_requests` are the subagents asked to stop from
        another process since the last beat (agent id to reason, see `request_stop`), taken.

        `held` is False when the run ended or another process took it over: stop working on it.
        """
        values: dict[str, Any] = {"heartbeat_at": iso(utc_now())}
        if usage is not None:
            values["usage"] = usage_adapter.dump_json(usage).decode()
        stops: dict[str, str | None] = {}
        runs = runs_table.c
        with self.write() as conn:
            update = runs_table.update().where(runs.id == run_id, runs.owner == owner, runs.status == "running")
            held = conn.execute(update.values(values)).rowcount == 1
            cancel = False
            if held:
                row = conn.execute(sa.select(runs.cancel_requested, runs.stop_requests).where(runs.id == run_id)).one()
                cancel = bool(row.cancel_requested)
                if row.stop_requests is not None:
                    stops = stop_requests(row.stop_requests)
                    conn.execute(runs_table.update().where(runs.id == run_id).values(stop_requests=None))
        return held, cancel, stops

    def request_stop(self, run_id: str, agent_id: str, reason: str | None = None, user_id: str | None = None) -> RunRow:
        """Ask the process running a run to stop one of its subagents (foreground or background),
        from any process: its owner stops it at its next heartbeat, and the lead gets its result
        (`cancelled`, stop reason `stopped`, `reason`). `UserError` if the run is unknown (or
        another user's), not running, or the subagent already ended or never started."""
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status not in LIVE_STATUSES:
            raise UserError(f"run {run_id} is {run.status}, not running: it has no subagent to stop")
        check_agent_id(run_id, agent_id)
        with self.write() as conn:
            ask_stop(conn, run_id, agent_id, reason)
        return run

    def release_run(self, run_id: str, owner: str, usage: Usage | None = None) -> bool:
        """Let go of `owner`'s lease of a running run (storing its usage so far), so that it reads
        `interrupted` at once, from any process, and can be resumed; False if `owner` did not hold it."""
        values: dict[str, Any] = {"owner": None}
        if usage is not None:
            values["usage"] = usage_adapter.dump_json(usage).decode()
        with self.write() as conn:
            update = runs_table.update().where(
                runs_table.c.id == run_id, runs_table.c.owner == owner, runs_table.c.status == "running"
            )
            return conn.execute(update.values(values)).rowcount == 1

    def claim_run(
        self, run_id: str, owner: str, user_id: str | None = None, *, warnings: Sequence[str] | None = None
    ) -> RunRow:
        """Take over an interrupted run for `owner`, to resume it; `UserError` if it cannot be resumed.
        `warnings` (if given) replace the run's: what was wrong as it started again.

        Exactly one of several processes claiming the same run at once wins. A run asked to cancel
        before its process died is cancelled instead; its subagents asked to stop stay asked.
        """
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status in LIVE_STATUSES:
            raise UserError(f"run {run_id} is still {run.status} (in process {run.owner}): it cannot be resumed")
        if run.status == "interrupted" and run.cancel_requested:  # asked before its process died
            run = self.request_cancel(run_id, user_id)
        if run.status != "interrupted":
            raise UserError(f"run {run_id} already ended ({run.status}): only an interrupted run can be resumed")
        values: dict[str, Any] = {"owner": owner, "heartbeat_at": iso(utc_now()), "status": "running"}
        if warnings is not None:
            run.warnings = list(warnings)
            values["warnings"] = run_values(run)["warnings"]
        taken = [runs_table.c.id == run_id, runs_table.c.status == "running"]
        taken.append(runs_table.c.owner == run.owner if run.owner is not None else runs_table.c.owner.is_(None))
        with self.write() as conn:
            if conn.execute(runs_table.update().where(*taken).values(values)).rowcount != 1:
                raise UserError(f"run {run_id} was just taken over by another process")
            _approvals.reopen(conn, run_id)
        run.status, run.owner, run.cancel_requested, run.waiting = "running", owner, False, 0
        return run

    def request_cancel(self, run_id: str, user_id: str | None = None) -> RunRow:
        """Cancel a run from any process: an interrupted run is recorded `cancelled` at once; a
        running one is asked to stop (its owner does so at its next heartbeat). `UserError` if it ended."""
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status == "interrupted":
            with self.write() as conn:
                where = [runs_table.c.id == run_id, runs_table.c.status == "running"]
                if run.owner is not None:
                    where.append(runs_table.c.owner == run.owner)
                ended = runs_table.update().where(*where)
                ended = ended.values(status="cancelled", owner=None, error="cancelled", completed_at=iso(utc_now()))
                if conn.execute(ended).rowcount == 1:
                    _approvals.close(conn, run_id, "cancelled")
        elif run.status in LIVE_STATUSES:
            with self.write() as conn:
                update = runs_table.update().where(runs_table.c.id == run_id, runs_table.c.status == "running")
                conn.execute(update.values(cancel_requested=1))
        else:
            raise UserError(f"run {run_id} already ended ({run.status}): nothing to cancel")
        found = self.get_run(run_id, user_id)
        assert found is not None
        return found

    def thread_runs(self, thread_id: str, user_id: str | None = None) -> list[RunRow]:
        """A thread's runs (`user_id`'s, when given), oldest first; empty for an unknown thread."""
        return thread_rows(self, thread_id, user_id)

    def list_threads(self, user_id: str | None = None, *, limit: int = 50, offset: int = 0) -> list[ThreadSummary]:
        """Threads (`user_id`'s, or all when None), the last continued first."""
        return threads_of(self, user_id, limit, offset)

    def latest_run(self, user_id: str | None = None, workspace: str | None = None) -> RunRow | None:
        """The newest run (`user_id`'s, of `workspace`, when given), or None."""
        return latest_run(self, user_id, workspace)

    def interrupted_runs(self, user_id: str | None = None) -> list[RunRow]:
        """Runs whose process is gone, oldest first: what a restarted server resumes."""
        return list(reversed(self.list_runs(user_id, status="interrupted", limit=10_000)))

    # -- approvals: calls waiting for a person (see `_approvals.py`) -----------------------------

    def request_approval(self, row: ApprovalRow) -> ApprovalRow:
        """Store a call that waits for a person; the stored one (and its decision) if it was already."""
        with self.write() as conn:
            return _approvals.request(conn, row)

    def decide_approval(
        self,
        run_id: str,
        call_id: str,
        decision: Decision,
        reason: str | None = None,
        user_id: str | None = None,
        *,
        always: bool = False,
    ) -> ApprovalRow:
        """Record a person's decision on a waiting call of `user_id`'s run (any run: None), the first
        standing; `always` approves its rule's later calls too. `UserError`: no such run or call."""
        if self.get_run(run_id, user_id) is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        with self.write() as conn:
            return _approvals.decide(conn, run_id, call_id, decision, reason, always)

    def approvals(self, run_id: str, *, pending: bool = False, under: str | None = None) -> list[ApprovalRow]:
        """A run's calls that waited for a person, in the order they asked (`pending`: only those
        waiting; `under`: only those of that call id or `<id>_...`)."""
        with self.read() as conn:
            return _approvals.listed(conn, run_id, pending=pending, under=under)

    def approval_decisions(self, run_id: str, call_ids: list[str]) -> list[ApprovalRow]:
        """Those of `call_ids` that have been decided (what a waiting run looks for at each beat)."""
        with self.read() as conn:
            return _approvals.decided(conn, run_id, call_ids) if call_ids else []

    # -- progress: events, checkpoints and subagent records together --------------------------

    def record(
        self,
        events: Sequence[Event] = (),
        checkpoints: Sequence[Checkpoint] = (),
        subagents: Sequence[tuple[str, TaskOutput, str | None, KeptConversation | None]] = (),
        usage: tuple[str, str, Usage] | None = None,
    ) -> None:
        """Store a run's progress in one transaction: what a run's recorder writes as it goes.
        `usage` is `(run_id, owner, usage so far)`: stored while `owner` holds the running run.
        `subagents` are `(run_id, record, key, conversation)`: a finished subagent with a `key` is
        kept for a resume (its record is its checkpoint, see `checkpoints`), and one that completed
        keeps its conversation in the same row (its system prompt once a run: `system_rows`).

        Checkpoints already stored (same run, kind and key) are kept as they were: the first wins.
        """
        events_rows = event_rows(events)
        checkpoint_rows = [checkpoint_values(c) for c in checkpoints]
        subagent_rows = [subagent_values(run_id, r, key, kept) for run_id, r, key, kept in subagents]
        for run_id in {s[0] for s in subagents if s[3] is not None}:
            checkpoint_rows += system_rows(run_id, [s[3] for s in subagents if s[0] == run_id])
        with self.write() as conn:
            if events_rows:
                insert_events(conn, events_rows)
            if checkpoint_rows:
                insert_rows(conn, checkpoints_table, CHECKPOINT_COLUMNS, checkpoint_rows, conflict="nothing")
            if subagent_rows:
                upsert_subagents(conn, subagent_rows)
            if usage is not None:
                run_id, owner, spent = usage
                held = runs_table.c
                update = runs_table.update().where(held.id == run_id, held.owner == owner, held.status == "running")
                conn.execute(update.values(usage=usage_adapter.dump_json(spent).decode()))

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """A run's checkpoints: its lead's answers and tool results in the order they were
        stored, then its finished subagents kept for a resume (kind `subagent`, `data` their
        record's `to_dict` and `seq`) in the order the lead called them, each followed by its
        conversation when it completed (kind `conversation`, see `conversation_checkpoint`)."""
        query = (
            sa.select(checkpoints_table).where(checkpoints_table.c.run_id == run_id).order_by(checkpoints_table.c.id)
        )
        subagents = subagents_table.c
        finished = (
            sa.select(subagents_table)
            .where(subagents.run_id == run_id, subagents.key.is_not(None))
            .order_by(subagents.seq, subagents.started_at, subagents.id)
        )
        with self.read() as conn:
            found = [decode_checkpoint(row) for row in conn.execute(query).mappings()]
            rows = conn.execute(finished).mappings().all()
        systems = kept_systems(found)
        for row in rows:
            record = decode_subagent(run_id, row)
            data = {"record": record.to_dict(), "seq": record.seq}
            found.append(Checkpoint(run_id=run_id, kind="subagent", key=row["key"], data=data))
            conversation = conversation_checkpoint(run_id, row, systems)
            if conversation is not None:
                found.append(conversation)
        return found

    def subagent_conversation(self, run_id: str, agent_id: str) -> dict[str, Any] | None:
        """The conversation a completed subagent of a run keeps (the `data` of its `conversation`
        checkpoint, see `conversation_checkpoint`), or None: read alone, without the run's others."""
        query = sa.select(*_KEPT_CONVERSATION).where(subagents_table.c.id == f"{run_id}/{agent_id}")
        c = checkpoints_table.c
        with self.read() as conn:
            row = conn.execute(query).mappings().first()
            if row is None or row["conversation"] is None:
                return None
            systems = conn.execute(sa.select(checkpoints_table).where(c.run_id == run_id, c.kind == SYSTEM)).mappings()
            found = conversation_checkpoint(run_id, row, kept_systems(decode_checkpoint(s) for s in systems))
        return None if found is None else found.data

    def checkpoint(self, run_id: str, kind: str, key: str) -> dict[str, Any] | None:
        """One checkpoint's data (see `Checkpoint`), or None: read alone, without the run's others."""
        c = checkpoints_table.c
        query = sa.select(checkpoints_table).where(c.run_id == run_id, c.kind == kind, c.key == key)
        with self.read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else decode_checkpoint(row).data

    # -- events ---------------------------------------------------------------------------------

    def add_events(self, events: Iterable[Event]) -> None:
        """Append events in one transaction; each run's events are numbered 1, 2, 3, ... in order.

        Built for batches: thousands of events go in one `executemany`. Each run must exist.
        """
        rows = event_rows(list(events))
        if rows:
            with self.write() as conn:
                insert_events(conn, rows)

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """A run's events in order, from number `after_seq + 1` on (numbers start at 1, no gaps),
        at most `limit` of them.

        A reader that has seen `n` events asks for `after_seq=n` to get only the new ones.
        """
        # A row's `seq` is the number of the last event it holds, and it holds one to
        # `EVENTS_PER_ROW`: the first `limit` rows past `after_seq` hold the first `limit` events
        # past it, and no row past `after_seq + limit + EVENTS_PER_ROW - 1` holds one of them.
        seq = events_table.c.seq
        query = sa.select(events_table).where(events_table.c.run_id == run_id, seq > after_seq).order_by(seq)
        if limit is not None:
            query = query.where(seq < after_seq + limit + EVENTS_PER_ROW).limit(limit)
        found: list[Event] = []
        with self.read() as conn:
            for row in conn.execute(query).mappings():
                held = decode_events(row)
                found += held[max(0, after_seq - (row["seq"] - len(held))) :]
                if limit is not None and len(found) >= limit:
                    break
        return found[:limit]

    # -- subagents --------------------------------------------------------------------------------

    def add_subagent_records(self, run_id: str, records: Iterable[TaskOutput]) -> None:
        """Store a run's subagent records (`TaskOutput.to_dict`'s shape), each checked first.

        A record whose id is already stored replaces it, so a subagent can be recorded when it
        starts and again when it ends, and recording the same end twice stores it once.
        """
        rows = [subagent_values(run_id, r) for r in records]  # none kept for a resume
        if rows:
            with self.write() as conn:
                upsert_subagents(conn, rows)

    def subagent_record(self, run_id: str, agent_id: str) -> TaskOutput | None:
        """One subagent's record of a run, or None: read by its key, not among the run's others."""
        query = sa.select(*_RECORD).where(subagents_table.c.id == f"{run_id}/{agent_id}")
        with self.read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None or row["run_id"] != run_id else decode_subagent(run_id, row)

    def subagent_records(self, run_id: str) -> list[TaskOutput]:
        """A run's subagent records, in the order the lead called them (`TaskOutput.seq`)."""
        query = (
            sa.select(*_RECORD)
            .where(subagents_table.c.run_id == run_id)
            .order_by(subagents_table.c.seq, subagents_table.c.started_at, subagents_table.c.id)
        )
        with self.read() as conn:
            return [decode_subagent(run_id, row) for row in conn.execute(query).mappings()]
