"""Notes: what agents (and their users) keep from one run for the next, per user and workspace,
searched with the database's own full-text search (FTS5 on SQLite, a `tsvector` on PostgreSQL).

A note has a scope, as Claude Code's agent `memory:` field names them:
- `local`: its user's, in its workspace (the lead's notes, and a type's with `memory: local`);
- `project`: its workspace's, for every user who works there (`memory: project`);
- `user`: its user's, in every workspace (`memory: user`).

A reader (a user in a workspace) sees its own `local` and `user` notes and the workspace's
`project` notes. Without a workspace (the HTTP API's owner scope) a user sees the notes it wrote,
wherever: never another user's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import AwareDatetime, TypeAdapter

from .._errors import StoreError, UserError
from .._store import Store
from .._text import safe_text
from .._time import iso, utc_now
from ._model import Note, Reader, Scope, note_text
from ._schema import MEMORY_MIGRATIONS, NOTES

MAX_SEARCH_WORDS = 16
"""The words of a query that are searched for (a longer query is cut: its ranking barely moves)."""
_scope: TypeAdapter[Scope] = TypeAdapter(Scope)
_moment: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)
"""A stored time, read back: one without a timezone is refused (see `delegate._time`)."""

_WORD = re.compile(r"\w+")
_FTS = sa.table("memory_fts", sa.column("rowid"), sa.column("rank"))
_TSV: sa.ColumnClause[Any] = sa.literal_column("memory_notes.tsv")


def _decode(row: sa.RowMapping) -> Note:
    try:
        return Note(
            id=int(row["id"]),
            user_id=str(row["user_id"]),
            workspace=str(row["workspace"]),
            scope=_scope.validate_python(row["scope"]),
            agent=str(row["agent"]),
            text=str(row["text"]),
            run_id=row["run_id"],
            written_by=row["written_by"],
            created_at=_moment.validate_python(row["created_at"]),
            updated_at=_moment.validate_python(row["updated_at"]),
        )
    except (ValueError, TypeError) as exc:
        raise StoreError(f"memory_notes row {row.get('id')!r} cannot be read back: {exc}") from None


def _visible(reader: Reader) -> sa.ColumnElement[bool]:
    c = NOTES.c
    if reader.workspace is None:
        return c.user_id == reader.user_id
    mine = c.user_id == reader.user_id
    here = c.workspace == reader.workspace
    return sa.or_(
        sa.and_(c.scope == "user", mine),
        sa.and_(c.scope == "local", mine, here),
        sa.and_(c.scope == "project", here),
    )


class Notes:
    """The notes in a `Store`. Thread-safe, like the store; every call is scoped to a `Reader`."""

    def __init__(self, store: Store, *, migrate: bool = True) -> None:
        self.store = store
        if migrate:
            store.migrate(MEMORY_MIGRATIONS)

    def write(
        self,
        reader: Reader,
        text: str,
        *,
        scope: Scope = "local",
        agent: str = "",
        run_id: str | None = None,
        written_by: str | None = None,
    ) -> Note:
        """Keep a new note of `reader`'s (its workspace: `''` for the `user` scope)."""
        if reader.workspace is None and scope != "user":
            raise UserError(f"a {scope} note belongs to a workspace: name one")
        now = iso(utc_now())
        values = {
            "user_id": reader.user_id,
            "workspace": "" if scope == "user" else reader.workspace,
            "scope": scope,
            "agent": agent,
            "text": note_text(text),
            "run_id": run_id,
            "written_by": written_by,
            "created_at": now,
            "updated_at": now,
        }
        with self.store.write() as conn:
            row = conn.execute(NOTES.insert().values(values).returning(*NOTES.c)).mappings().one()
        return _decode(row)

    def replace(
        self,
        reader: Reader,
        note_id: int,
        text: str,
        *,
        agent: str | None = None,
        run_id: str | None = None,
        written_by: str | None = None,
    ) -> Note:
        """Change the text of a note `reader` sees (of `agent`'s memory, when given); `UserError`
        when there is none of that id."""
        values = {"text": note_text(text), "updated_at": iso(utc_now()), "run_id": run_id, "written_by": written_by}
        mine = [NOTES.c.id == note_id, _visible(reader), *_narrowed(agent, None)]
        query = NOTES.update().where(*mine).values(values).returning(*NOTES.c)
        with self.store.write() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            raise UserError(_no_note(note_id))
        return _decode(row)

    def forget(self, reader: Reader, note_id: int, *, agent: str | None = None) -> Note:
        """Delete a note `reader` sees (of `agent`'s memory, when given), returning it; `UserError`
        when there is none of that id."""
        mine = [NOTES.c.id == note_id, _visible(reader), *_narrowed(agent, None)]
        with self.store.write() as conn:
            found = conn.execute(sa.select(NOTES).where(*mine)).mappings().first()
            if found is None:
                raise UserError(_no_note(note_id))
            conn.execute(NOTES.delete().where(NOTES.c.id == note_id))
        return _decode(found)

    def get(self, reader: Reader, note_id: int) -> Note | None:
        with self.store.read() as conn:
            row = conn.execute(sa.select(NOTES).where(NOTES.c.id == note_id, _visible(reader))).mappings().first()
        return None if row is None else _decode(row)

    def latest(
        self, reader: Reader, *, limit: int = 20, offset: int = 0, agent: str | None = None, scope: Scope | None = None
    ) -> list[Note]:
        """The notes `reader` sees, the most recently written first (`agent`, `scope`: only those)."""
        query = sa.select(NOTES).where(_visible(reader), *_narrowed(agent, scope))
        query = query.order_by(NOTES.c.updated_at.desc(), NOTES.c.id.desc()).limit(limit).offset(offset)
        with self.store.read() as conn:
            return [_decode(row) for row in conn.execute(query).mappings()]

    def count(self, reader: Reader, *, agent: str | None = None, scope: Scope | None = None) -> int:
        query = sa.select(sa.func.count()).select_from(NOTES).where(_visible(reader), *_narrowed(agent, scope))
        with self.store.read() as conn:
            return int(conn.scalar(query) or 0)

    def search(self, reader: Reader, query: str, *, limit: int = 10) -> list[Note]:
        """The notes `reader` sees that match any word of `query`, the best match first (the
        database's ranking: FTS5's bm25, PostgreSQL's `ts_rank`), then the most recent."""
        words = _WORD.findall(safe_text(query).lower())[:MAX_SEARCH_WORDS]
        if not words:
            raise UserError("the search has no words: give the words to look for")
        with self.store.read() as conn:
            if conn.dialect.name == "sqlite":
                match = " OR ".join(f'"{w}"' for w in words)
                statement = (
                    sa.select(NOTES)
                    .select_from(NOTES.join(_FTS, _FTS.c.rowid == NOTES.c.id))
                    .where(sa.text("memory_fts MATCH :match").bindparams(match=match), _visible(reader))
                    .order_by(_FTS.c.rank, NOTES.c.updated_at.desc())
                )
            else:
                asked = sa.func.to_tsquery("english", " | ".join(words))
                statement = (
                    sa.select(NOTES)
                    .where(_TSV.op("@@")(asked), _visible(reader))
                    .order_by(sa.func.ts_rank(_TSV, asked).desc(), NOTES.c.updated_at.desc())
                )
            return [_decode(row) for row in conn.execute(statement.limit(limit)).mappings()]


def _narrowed(agent: str | None, scope: Scope | None) -> Sequence[sa.ColumnElement[bool]]:
    found: list[sa.ColumnElement[bool]] = []
    if agent is not None:
        found.append(NOTES.c.agent == agent)
    if scope is not None:
        found.append(NOTES.c.scope == scope)
    return found


def _no_note(note_id: int) -> str:
    return f"no note {note_id} here: list the notes there are to find its id"
