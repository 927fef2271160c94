"""The handle on the database that every part of the `Store` shares: its engine, its read and
write transactions, and its migrations (see `_schema.py`)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from .._errors import StoreError
from .._time import iso, utc_now
from ._db import SharedEngine, busy_is_ours, engine_url, pg_on_connect, sqlite_on_begin, sqlite_on_connect
from ._schema import CORE_MIGRATIONS, Migration, migrations_table

_MIGRATION_LOCK = 0x64656C6567617465  # "delegate" in ASCII: the PostgreSQL advisory lock key


class Database:
    """One handle on the database: thread-safe, one per process (stores of one database opened in
    one process share its engine). `Store` is this with its queries (users, runs, progress)."""

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
