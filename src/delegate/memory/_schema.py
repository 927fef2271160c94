"""The memory tables (`Store.migrate` applies `MEMORY_MIGRATIONS`; `Notes(store)` asks it to), and
the database's own full-text index of the notes: FTS5 on SQLite, a `tsvector` on PostgreSQL.

A released migration never changes: a new schema change is a new migration at the end of the list,
with a frozen copy of any table it builds."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._store import Migration


def memory_tables(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table]:
    """The schema the queries use (`memory.0001_notes` and `memory.0002_todos` build it)."""
    text = sa.Text
    notes = sa.Table(
        "memory_notes",
        metadata,
        # INTEGER PRIMARY KEY is SQLite's rowid: the FTS5 index's `content_rowid`.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("user_id", text, nullable=False),
        # The workspace's root ('' for a note of the `user` scope: every workspace of its user).
        sa.Column("workspace", text, nullable=False),
        # `local` (its user, in its workspace), `project` (every user of its workspace), `user`.
        sa.Column("scope", text, nullable=False),
        # '' for the lead's notes; the subagent type whose own memory (`memory:`) it is, else.
        sa.Column("agent", text, nullable=False),
        sa.Column("text", text, nullable=False),
        sa.Column("run_id", text),
        sa.Column("written_by", text),
        sa.Column("created_at", text, nullable=False),
        sa.Column("updated_at", text, nullable=False),
        sa.Index("memory_notes_by_user", "user_id", "workspace", "updated_at"),
        sa.Index("memory_notes_by_workspace", "workspace", "scope"),
    )
    todos = sa.Table(
        "memory_todos",
        metadata,
        sa.Column("run_id", text, primary_key=True),
        sa.Column("agent_id", text, primary_key=True),
        sa.Column("todos", text, nullable=False),  # JSON: [{"content", "status"}, ...]
        sa.Column("updated_at", text, nullable=False),
    )
    return notes, todos


NOTES, TODOS = memory_tables(sa.MetaData())

_SQLITE_INDEX = (
    # An external-content index over the notes' text, stemmed (porter) as PostgreSQL's `english` is.
    "CREATE VIRTUAL TABLE memory_fts USING fts5(text, content='memory_notes', content_rowid='id', "
    "tokenize='porter unicode61')",
    "CREATE TRIGGER memory_notes_ai AFTER INSERT ON memory_notes BEGIN "
    "INSERT INTO memory_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER memory_notes_ad AFTER DELETE ON memory_notes BEGIN "
    "INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER memory_notes_au AFTER UPDATE OF text ON memory_notes BEGIN "
    "INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO memory_fts(rowid, text) VALUES (new.id, new.text); END",
)
_PG_INDEX = (
    "ALTER TABLE memory_notes ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED",
    "CREATE INDEX memory_notes_tsv ON memory_notes USING GIN (tsv)",
)


def _m0001_notes(conn: Connection) -> None:
    """The notes, and their full-text index."""
    metadata = sa.MetaData()
    notes, _ = memory_tables(metadata)
    notes.create(conn)
    for statement in _SQLITE_INDEX if conn.dialect.name == "sqlite" else _PG_INDEX:
        conn.exec_driver_sql(statement)


def _m0002_todos(conn: Connection) -> None:
    """Each agent's todo list of a run (`todo_write`), kept for `runs show` and a resume."""
    metadata = sa.MetaData()
    _, todos = memory_tables(metadata)
    todos.create(conn)


MEMORY_MIGRATIONS: tuple[Migration, ...] = (
    Migration("memory.0001_notes", _m0001_notes),
    Migration("memory.0002_todos", _m0002_todos),
)
"""Our steps for `Store.migrate`; `Notes(store)` and `TodoStore(store)` apply them."""
