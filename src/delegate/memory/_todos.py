"""Todo lists: each agent's plan of its own work (`todo_write`, `todo_read`), one list an agent.

A subagent starts with an empty list of its own: it never sees its lead's, nor another's. With a
store, every list is kept as it is written (`memory_todos`): `runs show` and the page read it,
and a resumed run's lead finds its list as it left it.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.exc import IntegrityError

from .._errors import StoreError
from .._store import Store
from .._time import iso, utc_now
from ._model import Todo, parse_todos
from ._schema import MEMORY_MIGRATIONS, TODOS

_stored: TypeAdapter[list[dict[str, str]]] = TypeAdapter(list[dict[str, str]])


class TodoStore:
    """The kept lists in a `Store`: one row an agent of a run."""

    def __init__(self, store: Store, *, migrate: bool = True) -> None:
        self.store = store
        if migrate:
            store.migrate(MEMORY_MIGRATIONS)

    def put(self, run_id: str, agent_id: str, todos: list[Todo]) -> None:
        values = {"todos": json.dumps([t.to_dict() for t in todos]), "updated_at": iso(utc_now())}
        key = (TODOS.c.run_id == run_id, TODOS.c.agent_id == agent_id)
        with self.store.write() as conn:
            if conn.execute(TODOS.update().where(*key).values(values)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(TODOS.insert().values(run_id=run_id, agent_id=agent_id, **values))
            except IntegrityError:  # another writer made the row first (PostgreSQL): ours is newer
                conn.execute(TODOS.update().where(*key).values(values))

    def of_run(self, run_id: str) -> dict[str, list[Todo]]:
        """Every agent's list of a run, by agent id (the lead's is `lead`)."""
        query = sa.select(TODOS.c.agent_id, TODOS.c.todos).where(TODOS.c.run_id == run_id)
        with self.store.read() as conn:
            rows = conn.execute(query).all()
        return {agent: _decode(run_id, agent, text) for agent, text in rows}


def _decode(run_id: str, agent: str, text: str) -> list[Todo]:
    try:
        return parse_todos(_stored.validate_json(text))
    except (ValidationError, ValueError) as exc:
        raise StoreError(f"memory_todos row {run_id}/{agent} cannot be read back: {exc}") from None
