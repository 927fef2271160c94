"""Connections to the store's database: the URL, one engine for it per process, the settings of
each new connection, lock waits turned into `StoreBusyError`, and inserting many rows at once on
either backend."""

from __future__ import annotations

import functools
import itertools
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError
from sqlalchemy.sql.compiler import SQLCompiler

from .._errors import StoreBusyError, StoreError, UserError, require_extra
from ._rows import EVENT_COLUMNS, SUBAGENT_COLUMNS
from ._schema import claim_event_numbers, events_table, subagents_table

SQLITE_BUSY_TIMEOUT_MS = 10_000
"""How long a SQLite connection waits for another writer before giving up."""
LOCK_TIMEOUT_MS = 10_000
"""How long a PostgreSQL statement waits for a lock another transaction holds before giving up."""


# ---------------------------------------------------------------------------------------------
# Connections


def engine_url(url: str | os.PathLike[str]) -> sa.URL:
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
        require_extra("psycopg", "postgres", "a PostgreSQL store")
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


class SharedEngine:
    """The one engine of a database in this process, as SQLAlchemy advises (an engine is made
    once and kept): a `Store` opened again on the same database (a `Runtime` per request, or per
    run) reuses the statements the engine compiled. Its connections close with the last `Store`
    open on it; the engine is kept (up to `KEPT_IDLE` unused ones) for the next."""

    KEPT_IDLE = 16
    _lock = threading.Lock()
    _kept: ClassVar[dict[str, SharedEngine]] = {}
    """By URL, the most recently opened last."""

    def __init__(self, url: sa.URL) -> None:
        # Shared, its pool must not cap the threads of all the handles at the 15 connections each
        # had: on SQLite (a connection is an open file) it grows as far as they need.
        pooling = {"max_overflow": -1} if url.get_backend_name() == "sqlite" else {}
        self.engine: Engine = sa.create_engine(url, **pooling)
        self.users = 0

    @classmethod
    def acquire(cls, url: sa.URL) -> SharedEngine:
        key = url.render_as_string(hide_password=False)
        with cls._lock:
            shared = cls._kept.pop(key, None) or cls(url)
            cls._kept[key] = shared
            shared.users += 1
            return shared

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users > 0:
                return
            self.engine.dispose()
            idle = [key for key, kept in self._kept.items() if kept.users == 0]
            for key in idle[: max(0, len(idle) - self.KEPT_IDLE)]:
                del self._kept[key]

    @classmethod
    def _forget_in_child(cls) -> None:
        """A forked child makes its own engines: its parent's connections are not its own."""
        cls._lock, cls._kept = threading.Lock(), {}


os.register_at_fork(after_in_child=SharedEngine._forget_in_child)  # pyright: ignore[reportPrivateUsage]


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


def sqlite_on_connect(dbapi_connection: Any, _record: object) -> None:
    # Take BEGIN away from the sqlite3 module (its legacy mode skips BEGIN before DDL and
    # SELECT); `sqlite_on_begin` emits it instead, IMMEDIATE for writes.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _switch_to_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        # In WAL mode NORMAL never corrupts the file and survives a crash of the process; only an
        # OS crash or power cut can lose the last commits. It makes each commit skip an fsync.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    """`PRAGMA journal_mode=WAL`, waiting for the lock as long as any other statement would.

    Switching a new file to WAL takes a lock that another process making the same file may hold,
    and SQLite answers "database is locked" at once there, without its busy timeout: processes
    that open a new store together (a server and its workers) would fail at random.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "database is locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def pg_on_connect(dbapi_connection: Any, _record: object) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS}")
    dbapi_connection.commit()


@contextmanager
def busy_is_ours() -> Generator[None]:
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


def sqlite_on_begin(conn: Connection) -> None:
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
# Small reads, fast


def select_rows(conn: Connection, statement: sa.Select[Any], params: dict[str, Any]) -> Sequence[Sequence[Any]]:
    """The rows of a statement built once (its parameters bound by name), as tuples.

    On SQLite the driver runs the statement's SQL, compiled once: for the small reads that each
    request makes (`GET /runs`), SQLAlchemy's execution costs more than SQLite's own work.
    """
    if conn.dialect.name != "sqlite":
        return [tuple(row) for row in conn.execute(statement, params)]
    compiled = _sqlite_compiled(statement, conn.dialect)
    values = compiled.construct_params(params)
    positions: list[str] = compiled.positiontup or []
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        return cursor.execute(compiled.string, [values[name] for name in positions]).fetchall()
    finally:
        cursor.close()


@functools.lru_cache(maxsize=64)
def _sqlite_compiled(statement: sa.Select[Any], dialect: sa.Dialect) -> SQLCompiler:
    return statement.compile(dialect=dialect)


# ---------------------------------------------------------------------------------------------
# Many rows at once


def insert_events(conn: Connection, rows: list[list[Any]]) -> None:
    """Number the events of `rows` (`_rows.event_rows`) after each run's last event (taking the
    run's row lock) and insert them: each row's `seq` is the number of its last event."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts[row[0]] += row[1]  # its run and how many events it holds
    seq: dict[str, int] = {}
    for run_id, n in counts.items():
        last = conn.scalar(claim_event_numbers, {"run_id": run_id, "n": n})
        if last is None:
            raise StoreError(f"no run {run_id!r}: create the run before adding its events")
        seq[run_id] = last - n
    for row in rows:
        row[-1] = seq[row[0]] = seq[row[0]] + row[1]
    insert_rows(conn, events_table, EVENT_COLUMNS, rows)


def upsert_subagents(conn: Connection, rows: list[tuple[Any, ...]]) -> None:
    insert_rows(conn, subagents_table, SUBAGENT_COLUMNS, rows, conflict="update")


def insert_rows(
    conn: Connection,
    table: sa.Table,
    columns: tuple[str, ...],
    rows: Sequence[Sequence[Any]],
    conflict: Literal["nothing", "update"] | None = None,
) -> None:
    """Insert `rows` (each the values of `columns`, in order) into `table`; on a conflict with a
    row already there (its primary key or a unique constraint), keep that row (`nothing`) or
    replace it (`update`: by `id`), or raise SQLAlchemy's `IntegrityError` (None), on both backends.

    On SQLite the driver takes many rows in one statement: SQLite then runs one step for all of
    them, and the thread lets go of the GIL once, not once a row, which under a busy event loop
    made each row wait for the loop's switch interval. The statements hold a power of two of rows,
    at most `_SQLITE_ROWS` (700 rows: 21 of 32, then 16, 8 and 4), so the few there are stay
    prepared in the driver's cache: preparing one of 100 rows costs more than inserting them.
    """
    if conn.dialect.name != "sqlite":
        insert = _upsert(conn)(table)
        if conflict == "nothing":
            insert = insert.on_conflict_do_nothing()
        elif conflict == "update":
            update = {c.name: insert.excluded[c.name] for c in table.columns if c.name != "id"}
            insert = insert.on_conflict_do_update(index_elements=["id"], set_=update)
        conn.execute(insert, [dict(zip(columns, row, strict=True)) for row in rows])
        return
    most = 1 << (min(_SQLITE_ROWS, _SQLITE_VARIABLES // len(columns)).bit_length() - 1)
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        start = 0
        while start < len(rows):
            size = min(most, 1 << ((len(rows) - start).bit_length() - 1))
            sql = _sqlite_insert(table.name, columns, size, conflict)
            values = list(itertools.chain.from_iterable(rows[start : start + size]))
            try:
                cursor.execute(sql, values)
            except sqlite3.IntegrityError as exc:  # as SQLAlchemy raises it on PostgreSQL
                raise IntegrityError(sql, values, exc) from exc
            start += size
    finally:
        cursor.close()


_SQLITE_VARIABLES = 32_766
"""SQLite's limit on the parameters of one statement (SQLITE_MAX_VARIABLE_NUMBER, since 3.32)."""
_SQLITE_ROWS = 32
"""The most rows of one statement. A statement is prepared once for each connection, and a run
in a workspace of its own opens a new one: the upsert of 512 subagents' rows (29 columns each)
took longer to prepare than to run. Writer thread, µs a subagent's upsert (fan-out of 1,000, a
store made before the run): 512 rows a statement 12.8-14.2, 64 8.0-8.3, 32 7.8, 16 7.6-7.9; on
a connection that has them prepared, 7.2 whatever the size (one row at a time, `executemany`:
7.4)."""


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
