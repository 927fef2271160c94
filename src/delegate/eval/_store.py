"""The tables of evaluations (`evals`, `eval_attempts`) and what is done with them.

An eval's row keeps everything it was made with (its tasks, arms, repeat count and budget:
`spec`), so a resume runs exactly what the first process would have run. Every attempt has a row
from the start, keyed by (eval, arm, task, attempt): it names the run that is the attempt once one
was started (`run_id`, set before the run starts, so a killed process leaves it findable) and its
judgement once made (`outcome`, the first write wins). An attempt is paid for once: a resume reads
the outcome of a judged attempt, judges an ended run, resumes an interrupted one, and only starts a
run for an attempt that has none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from pydantic import AwareDatetime

from .._errors import StoreError
from .._store import Migration, Store
from .._time import iso, parse_iso, utc_now

__all__ = ["EVAL_MIGRATIONS", "AttemptKey", "AttemptRow", "EvalRow", "Evals"]


def _tables_0001(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table]:
    """The schema as migration `eval.0001_tables` created it (frozen)."""
    text = sa.Text
    evals = sa.Table(
        "evals",
        metadata,
        sa.Column("id", text, primary_key=True),
        sa.Column("user_id", text, nullable=True),
        sa.Column("name", text, nullable=False),
        sa.Column("spec", text, nullable=False),
        sa.Column("created_at", text, nullable=False),
        sa.Column("finished_at", text, nullable=True),
        sa.Index("evals_by_user", "user_id", "created_at"),
    )
    attempts = sa.Table(
        "eval_attempts",
        metadata,
        sa.Column("eval_id", text, sa.ForeignKey("evals.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("arm", text, primary_key=True),
        sa.Column("task", text, primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("run_id", text, nullable=True),
        sa.Column("outcome", text, nullable=True),
        sa.Column("judged_at", text, nullable=True),
        sa.Index("eval_attempts_by_run", "run_id"),
    )
    return evals, attempts


EVAL_MIGRATIONS = [Migration.creating("eval.0001_tables", _tables_0001)]
evals_table, attempts_table = _tables_0001(sa.MetaData())


@dataclass(frozen=True, slots=True, order=True)
class AttemptKey:
    arm: str
    task: str
    attempt: int

    def tag(self, eval_id: str) -> dict[str, Any]:
        """What the attempt's run record says it is (`RunRow.eval`)."""
        return {"eval_id": eval_id, "arm": self.arm, "task": self.task, "attempt": self.attempt}


@dataclass(kw_only=True, slots=True)
class EvalRow:
    id: str
    user_id: str | None
    name: str
    spec: dict[str, Any]
    created_at: AwareDatetime
    finished_at: AwareDatetime | None


@dataclass(kw_only=True, slots=True)
class AttemptRow:
    key: AttemptKey
    seq: int
    run_id: str | None
    outcome: dict[str, Any] | None


class Evals:
    """The evaluations of one store (its tables made on first use)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.migrate(EVAL_MIGRATIONS)

    def create(
        self, eval_id: str, user_id: str | None, name: str, spec: dict[str, Any], keys: Sequence[AttemptKey]
    ) -> EvalRow:
        now = utc_now()
        with self.store.write() as conn:
            values = {"id": eval_id, "user_id": user_id, "name": name, "spec": json.dumps(spec), "created_at": iso(now)}
            conn.execute(evals_table.insert().values(values))
            rows = [
                {"eval_id": eval_id, "arm": k.arm, "task": k.task, "attempt": k.attempt, "seq": i}
                for i, k in enumerate(keys)
            ]
            conn.execute(attempts_table.insert(), rows)
        return EvalRow(id=eval_id, user_id=user_id, name=name, spec=spec, created_at=now, finished_at=None)

    def get(self, eval_id: str, user_id: str | None = None) -> EvalRow | None:
        """The eval, or None if there is none or (with `user_id`) it is another user's."""
        query = sa.select(evals_table).where(evals_table.c.id == eval_id)
        if user_id is not None:
            query = query.where(evals_table.c.user_id == user_id)
        with self.store.read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _eval(row)

    def latest(self, user_id: str | None = None) -> EvalRow | None:
        found = self.list(user_id, limit=1)
        return found[0] if found else None

    def list(self, user_id: str | None = None, *, limit: int = 50) -> list[EvalRow]:
        """Evals, newest first: `user_id`'s own, or every one when it is None."""
        query = sa.select(evals_table).order_by(evals_table.c.created_at.desc(), evals_table.c.id).limit(limit)
        if user_id is not None:
            query = query.where(evals_table.c.user_id == user_id)
        with self.store.read() as conn:
            return [_eval(r) for r in conn.execute(query).mappings()]

    def attempts(self, eval_id: str) -> list[AttemptRow]:
        query = sa.select(attempts_table).where(attempts_table.c.eval_id == eval_id).order_by(attempts_table.c.seq)
        with self.store.read() as conn:
            return [_attempt(eval_id, r) for r in conn.execute(query).mappings()]

    def start(self, eval_id: str, key: AttemptKey, run_id: str) -> str:
        """Name the run of an attempt that has none; returns the attempt's run (this one, or the
        one another process named first)."""
        where = _where(eval_id, key)
        with self.store.write() as conn:
            conn.execute(attempts_table.update().where(where, attempts_table.c.run_id.is_(None)).values(run_id=run_id))
            found = conn.scalar(sa.select(attempts_table.c.run_id).where(where))
        if found is None:
            raise StoreError(f"eval {eval_id} has no attempt {key}")
        return found

    def judge(self, eval_id: str, key: AttemptKey, outcome: dict[str, Any]) -> bool:
        """Keep an attempt's judgement; the first wins (False: it was judged already)."""
        where = _where(eval_id, key)
        values = {"outcome": json.dumps(outcome), "judged_at": iso(utc_now())}
        with self.store.write() as conn:
            done = conn.execute(attempts_table.update().where(where, attempts_table.c.outcome.is_(None)).values(values))
            return done.rowcount == 1

    def finish(self, eval_id: str) -> None:
        with self.store.write() as conn:
            update = evals_table.update().where(evals_table.c.id == eval_id, evals_table.c.finished_at.is_(None))
            conn.execute(update.values(finished_at=iso(utc_now())))


def _where(eval_id: str, key: AttemptKey) -> sa.ColumnElement[bool]:
    c = attempts_table.c
    return sa.and_(c.eval_id == eval_id, c.arm == key.arm, c.task == key.task, c.attempt == key.attempt)


def _json(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise StoreError(f"{where} is not JSON") from None
    if not isinstance(value, dict):
        raise StoreError(f"{where} is not a JSON object")
    return cast("dict[str, Any]", value)


def _moment(text: str) -> AwareDatetime:
    moment = parse_iso(text)
    assert moment is not None
    return moment


def _eval(row: sa.RowMapping) -> EvalRow:
    return EvalRow(
        id=row["id"],
        user_id=row["user_id"],
        name=row["name"],
        spec=_json(row["spec"], f"evals row {row['id']}: spec"),
        created_at=_moment(row["created_at"]),
        finished_at=None if row["finished_at"] is None else _moment(row["finished_at"]),
    )


def _attempt(eval_id: str, row: sa.RowMapping) -> AttemptRow:
    key = AttemptKey(arm=row["arm"], task=row["task"], attempt=row["attempt"])
    outcome = row["outcome"]
    where = f"eval_attempts row {eval_id} {key}: outcome"
    return AttemptRow(
        key=key, seq=row["seq"], run_id=row["run_id"], outcome=None if outcome is None else _json(outcome, where)
    )
