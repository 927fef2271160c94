"""Our own tables for batches (`batches`, `batch_items`, `batch_workers`) and the owner's operations.

The item rows are the one source of truth about items: the CLI, the HTTP API and the UI read them
directly, and workers claim them (`_queue.py` says how claims, leases and results work). Every
operation here is scoped to the batch's owner.

An item that waits out a retry backoff is stored as `waiting` (still claimed by its worker, so it
counts towards `max_live_items`) and shown as `queued`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from pydantic import AwareDatetime, TypeAdapter, ValidationError
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .._config import RunLimits
from .._errors import StoreError, UserError
from .._store import Store
from .._time import iso, parse_iso, utc_now
from .._usage import Usage
from ..subagents import TaskOutput
from ..workspace import Home
from ._migrations import BATCH_MIGRATIONS, batch_items_0004, batch_tables_0001
from ._model import (
    ITEM_STATUSES,
    Batch,
    BatchItem,
    BatchNotFoundError,
    BatchSpec,
    BatchStateError,
    BatchStatus,
    ItemInput,
    ItemStatus,
    Submission,
    validate_submission,
)

BatchState = Literal["active", "paused", "cancelled"]
"""What the owner asked for. The status shown (`BatchStatus`) also depends on the items' counts."""

BatchEngine = Literal["temporal"]
"""The engine a batch is stored for, when it is not the embedded one (NULL)."""

StoredStatus = Literal["queued", "waiting", "running", "succeeded", "failed", "cancelled"]
OPEN: tuple[StoredStatus, ...] = ("queued", "waiting", "running")
CLAIMED: tuple[StoredStatus, ...] = ("waiting", "running")

_T = TypeVar("_T")


class BatchStoreError(StoreError):
    """A batch row holds data delegate cannot read back (changed outside delegate, or corrupt)."""


def batch_tables(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table, sa.Table]:
    """The schema the queries below use: the frozen tables of the migrations that built them
    (`batch_tables_0001`'s `batches` and `batch_workers`, `batch_items_0004`) with the columns
    later migrations added. A migration that changes a table more than by adding a column freezes
    a copy of it in `_migrations.py`, as `batch_items_0004`."""
    built, _, frozen_workers = batch_tables_0001(sa.MetaData())
    batches = built.to_metadata(metadata)
    # Which engine serves it: NULL, the embedded one (`BatchWorker`); `temporal` (batch.0005).
    batches.append_column(sa.Column("engine", sa.Text, nullable=True))
    # The folder it was submitted in, where its items run (batch.0009; NULL: any worker's).
    for name in ("workspace", "workspace_host", "workspace_id"):
        batches.append_column(sa.Column(name, sa.Text, nullable=True))
    items = batch_items_0004(metadata)
    # Which claim started the current attempt (batch.0006): a claim run twice answers the same items.
    items.append_column(sa.Column("claim", sa.Text, nullable=True))
    # The run limits its subagent runs under, `RunLimits` fields by name as JSON (batch.0007; its
    # `token_budget` and `max_requests` columns are no longer written).
    items.append_column(sa.Column("limits", sa.Text, nullable=True))
    # Which execution of the current attempt holds the item, and whose result may be stored (batch.0008).
    items.append_column(sa.Column("run_fence", sa.Integer, nullable=True))
    items.append_column(sa.Column("run_live", sa.Integer, nullable=True))
    # Its last attempt's turns: the model calls and tool calls of its subagent, as the events
    # that told them (batch.0010; a JSON array, NULL: none kept). Read alone, never in a listing.
    items.append_column(sa.Column("turns", sa.Text, nullable=True))
    return batches, items, frozen_workers.to_metadata(metadata)


BATCHES, ITEMS, WORKERS = batch_tables(sa.MetaData())
_ITEM = [c for c in ITEMS.c if c.name != "turns"]
"""An item's columns but its turns: what an item is read from."""
_json_list: TypeAdapter[list[Any]] = TypeAdapter(list[Any])
_JSON_DICT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
CRITERIA: TypeAdapter[list[str]] = TypeAdapter(list[str])
_stored_status: TypeAdapter[StoredStatus] = TypeAdapter(StoredStatus)
_moment: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)
"""A stored time, read back: one without a timezone is refused (see `delegate._time`)."""
STATE: TypeAdapter[BatchState] = TypeAdapter(BatchState)
_INSERT_CHUNK = 5_000


Listener = Callable[[str], None]


class Batches:
    """Batches in a `Store`: submit, read, control. Every call is scoped to one user's batches.

    Thread-safe, like the store. `listeners` are called with a batch id after each change made in
    this process (submit, pause, resume, cancel, retry), so an in-process worker wakes at once.
    `engine` is stored with every batch submitted here: None (the embedded engine's workers serve
    it) or `temporal` (Temporal workflows serve it; see `delegate.engine`).
    """

    def __init__(self, store: Store, *, migrate: bool = True, engine: BatchEngine | None = None) -> None:
        self.store = store
        self.engine: BatchEngine | None = engine
        self.listeners: list[Listener] = []
        if migrate:
            store.migrate(BATCH_MIGRATIONS)

    @property
    def dialect(self) -> str:
        return self.store.engine.dialect.name

    def _notify(self, batch_id: str) -> None:
        for listener in list(self.listeners):
            listener(batch_id)

    # -- submit ---------------------------------------------------------------------------------

    def submit(
        self,
        user_id: str,
        *,
        subagent_type: str,
        items: Iterable[ItemInput | Mapping[str, Any]],
        title: str | None = None,
        max_running_items: int | None = None,
        max_live_items: int | None = None,
        max_attempts: int | None = None,
        model: str | None = None,
        run_id: str | None = None,
        tool_call_id: str | None = None,
        known_types: Iterable[str] | None = None,
        model_call_id: str | None = None,
        limits: Mapping[str, Any] | None = None,
        home: Home | None = None,
    ) -> Submission:
        """Validate, then store the batch and all its items in one transaction.

        Raises `BatchValidationError` (nothing stored) listing every problem. Resubmitting with the
        same `run_id` and `tool_call_id` returns the existing batch with `created=False`, and so
        does a call whose `model_call_id` (the id the model gave it, when the loop renamed a
        repeated one: `tool_call_id` is then `<id>_<n>`) names a batch of the run with the same
        title, type and items: the model repeated its call. Another submission under a repeated id
        is a call of its own, stored under `tool_call_id`. `limits` are the batch's run limits
        (`RunLimits` fields by name), which each item's own `limits` may tighten, never loosen; the
        runtime that runs an item holds them within its own in turn. `home` is the folder it is
        submitted in (`Home.of` the submitter's workspace): its items run only in that folder (or
        the same folder on shared storage), never in another worker's (None: in any).
        """
        if run_id is not None and tool_call_id is not None:
            existing = self._by_tool_call(user_id, run_id, tool_call_id)
            if existing is not None:
                return Submission(batch=existing, created=False)
        spec = validate_submission(
            title=title,
            subagent_type=subagent_type,
            items=items,
            max_running_items=max_running_items,
            max_live_items=max_live_items,
            max_attempts=max_attempts,
            known_types=None if known_types is None else set(known_types),
            model=model,
            limits=limits,
        )
        if run_id is not None and model_call_id not in (None, tool_call_id):
            repeated = self._repeated(user_id, run_id, model_call_id, spec)
            if repeated is not None:
                return Submission(batch=repeated, created=False)
        batch_id = uuid.uuid4().hex[:16]
        now = iso(utc_now())
        rows = [
            {
                "batch_id": batch_id,
                "seq": seq,
                "key": item.key,
                "prompt": item.prompt,
                "criteria": dump_list(item.acceptance_criteria),
                "limits": dump_limits(item.limits),
                "status": "queued",
                "created_at": now,
            }
            for seq, item in enumerate(spec.items)
        ]
        values = {
            "id": batch_id,
            "user_id": user_id,
            "run_id": run_id,
            "tool_call_id": tool_call_id,
            "title": spec.title,
            "subagent_type": spec.subagent_type,
            "model": spec.model,
            "max_running": spec.max_running_items,
            "max_live": spec.max_live_items,
            "max_attempts": spec.max_attempts,
            "state": "active",
            "item_count": len(rows),
            "created_at": now,
            "engine": self.engine,
        }
        if home is not None:
            values |= {"workspace": home.path, "workspace_host": home.host, "workspace_id": home.id}
        try:
            with self.store.write() as conn:
                conn.execute(BATCHES.insert().values(values))
                for start in range(0, len(rows), _INSERT_CHUNK):
                    conn.execute(ITEMS.insert(), rows[start : start + _INSERT_CHUNK])
        except IntegrityError:
            if run_id is None or tool_call_id is None:
                raise
            existing = self._by_tool_call(user_id, run_id, tool_call_id)
            if existing is None:
                raise
            return Submission(batch=existing, created=False)
        self._notify(batch_id)
        return Submission(batch=self.get(user_id, batch_id), created=True)

    def _repeated(self, user_id: str, run_id: str, model_call_id: str, spec: BatchSpec) -> Batch | None:
        """The batch of the run stored under `model_call_id` when it is `spec` again (its title,
        type and items, in order): a model call repeated under its id."""
        found = self._by_tool_call(user_id, run_id, model_call_id)
        if found is None or (found.title, found.subagent_type) != (spec.title, spec.subagent_type):
            return None
        if found.total != len(spec.items):
            return None
        query = sa.select(ITEMS.c.key, ITEMS.c.prompt, ITEMS.c.criteria).where(ITEMS.c.batch_id == found.id)
        with self.store.read() as conn:
            stored = [tuple(row) for row in conn.execute(query.order_by(ITEMS.c.seq))]
        given = [(i.key, i.prompt, dump_list(i.acceptance_criteria)) for i in spec.items]
        return found if stored == given else None

    def _by_tool_call(self, user_id: str, run_id: str, tool_call_id: str) -> Batch | None:
        query = sa.select(BATCHES).where(
            BATCHES.c.user_id == user_id, BATCHES.c.run_id == run_id, BATCHES.c.tool_call_id == tool_call_id
        )
        with self.store.read() as conn:
            row = conn.execute(query).first()
            return None if row is None else _batch(conn, row)

    # -- read -----------------------------------------------------------------------------------

    def get(self, user_id: str | None, batch_id: str) -> Batch:
        """The batch with its counts per item status; `BatchNotFoundError` if it is not this user's
        (`user_id` None: the operator's view, every user's batches; so for every method here)."""
        with self.store.read() as conn:
            row = _owned(conn, user_id, batch_id)
            return _batch(conn, row)

    def list_batches(self, user_id: str | None, *, offset: int = 0, limit: int = 50) -> list[Batch]:
        """The user's batches, newest first (None: every user's)."""
        query = sa.select(BATCHES)
        if user_id is not None:
            query = query.where(BATCHES.c.user_id == user_id)
        query = query.order_by(BATCHES.c.created_at.desc(), BATCHES.c.id).offset(max(0, offset)).limit(max(0, limit))
        with self.store.read() as conn:
            return [_batch(conn, row) for row in conn.execute(query).all()]

    def items(
        self,
        user_id: str | None,
        batch_id: str,
        *,
        status: ItemStatus | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[BatchItem]:
        """A page of the batch's items in submission order, optionally only those in `status`."""
        query = sa.select(*_ITEM).where(ITEMS.c.batch_id == batch_id)
        if status is not None:
            if status not in ITEM_STATUSES:
                raise BatchStateError(f"unknown item status {status!r}; use one of {', '.join(ITEM_STATUSES)}")
            query = query.where(ITEMS.c.status.in_(_stored(status)))
        query = query.order_by(ITEMS.c.seq).offset(max(0, offset)).limit(max(0, limit))
        with self.store.read() as conn:
            _owned(conn, user_id, batch_id)
            return [_item(row) for row in conn.execute(query).all()]

    def item(self, user_id: str | None, batch_id: str, key: str) -> BatchItem:
        with self.store.read() as conn:
            _owned(conn, user_id, batch_id)
            row = conn.execute(sa.select(*_ITEM).where(ITEMS.c.batch_id == batch_id, ITEMS.c.key == key)).first()
        if row is None:
            raise BatchNotFoundError(batch_id, key)
        return _item(row)

    def item_turns(self, user_id: str | None, batch_id: str, key: str) -> list[dict[str, Any]] | None:
        """The turns of an item's last attempt that ran a subagent: its model calls and tool calls
        as the events that told them (`{type, ts, agent_id, tool_call_id, data}`, see
        `batch._engine.TURN_EVENTS`), or None when none are kept (no attempt ran, or it ran before
        they were kept)."""
        query = sa.select(ITEMS.c.turns).where(ITEMS.c.batch_id == batch_id, ITEMS.c.key == key)
        with self.store.read() as conn:
            _owned(conn, user_id, batch_id)
            row = conn.execute(query).first()
        if row is None:
            raise BatchNotFoundError(batch_id, key)
        return None if row.turns is None else _json_list.validate_json(row.turns)

    def export_rows(self, user_id: str | None, batch_id: str, *, page: int = 1_000) -> Iterator[dict[str, Any]]:
        """Every item as an export row, in submission order, read a page at a time (flat memory)."""
        with self.store.read() as conn:
            _owned(conn, user_id, batch_id)
        after = -1
        while True:
            query = (
                sa.select(*_ITEM)
                .where(ITEMS.c.batch_id == batch_id, ITEMS.c.seq > after)
                .order_by(ITEMS.c.seq)
                .limit(page)
            )
            with self.store.read() as conn:
                rows = conn.execute(query).all()
            for row in rows:
                yield _item(row).export_row()
            if len(rows) < page:
                return
            after = rows[-1].seq

    # -- control --------------------------------------------------------------------------------

    def pause(self, user_id: str | None, batch_id: str) -> Batch:
        """No new item starts; running items finish. Pausing a paused batch does nothing."""
        return self._set_state(user_id, batch_id, "paused", allowed=("active", "paused"))

    def resume(self, user_id: str | None, batch_id: str) -> Batch:
        """Start items again after a pause. Resuming a running batch does nothing."""
        return self._set_state(user_id, batch_id, "active", allowed=("active", "paused"))

    def _set_state(self, user_id: str | None, batch_id: str, state: BatchState, allowed: Sequence[BatchState]) -> Batch:
        with self.store.write() as conn:
            row = _owned(conn, user_id, batch_id, lock=True)
            current = STATE.validate_python(row.state)
            if current not in allowed:
                raise BatchStateError(f"batch {batch_id!r} is {current}: it cannot be made {state}")
            if current != state:
                values: dict[str, Any] = {"state": state}
                if state == "active":
                    values["epoch"] = BATCHES.c.epoch + 1
                conn.execute(BATCHES.update().where(BATCHES.c.id == batch_id).values(values))
        self._notify(batch_id)
        return self.get(user_id, batch_id)

    def cancel(self, user_id: str | None, batch_id: str) -> Batch:
        """Cancel for good: queued items never start, running ones are stopped and marked cancelled.
        Cancelling a batch that has already ended changes nothing.

        The cancellation is written before any worker hears of it, so a restart cannot revive
        them, and a late result of a cancelled item is discarded.
        """
        now = iso(utc_now())
        with self.store.write() as conn:
            row = _owned(conn, user_id, batch_id, lock=True)
            still_open = conn.scalar(
                sa.select(sa.func.count()).where(ITEMS.c.batch_id == batch_id, ITEMS.c.status.in_(OPEN))
            )
            if row.state != "cancelled" and still_open:  # a batch that has ended stays as it ended
                conn.execute(
                    BATCHES.update()
                    .where(BATCHES.c.id == batch_id)
                    .values(state="cancelled", finished_at=sa.func.coalesce(BATCHES.c.finished_at, now))
                )
                conn.execute(
                    ITEMS.update()
                    .where(ITEMS.c.batch_id == batch_id, ITEMS.c.status.in_(OPEN))
                    .values(status="cancelled", lease_owner=None, finished_at=now, error="cancelled")
                )
        self._notify(batch_id)
        return self.get(user_id, batch_id)

    def retry(self, user_id: str | None, batch_id: str, key: str | None = None) -> int:
        """Queue failed items again, with a fresh budget of attempts: one (`key`), or all failed ones.
        What their attempts spent so far stays in their usage (`total_usage`).

        Returns how many were queued. Only failed items are retried; a cancelled batch cannot be.
        """
        with self.store.write() as conn:
            row = _owned(conn, user_id, batch_id, lock=True)
            if row.state == "cancelled":
                raise BatchStateError(f"batch {batch_id!r} is cancelled: its items cannot be retried")
            where = [ITEMS.c.batch_id == batch_id, ITEMS.c.status == "failed"]
            if key is not None:
                status = conn.scalar(sa.select(ITEMS.c.status).where(ITEMS.c.batch_id == batch_id, ITEMS.c.key == key))
                if status is None:
                    raise BatchNotFoundError(batch_id, key)
                if status != "failed":
                    shown = _public(_stored_status.validate_python(status))
                    raise BatchStateError(f"item {key!r} is {shown}: only failed items can be retried")
                where.append(ITEMS.c.key == key)
            count = conn.execute(
                ITEMS.update()
                .where(*where)
                .values(
                    status="queued",
                    failures=0,
                    interruptions=0,
                    lease_owner=None,
                    not_before=None,
                    finished_at=None,
                    outcome=None,
                    error=None,
                    record=None,
                )
            ).rowcount
            if count:
                conn.execute(
                    BATCHES.update().where(BATCHES.c.id == batch_id).values(finished_at=None, epoch=BATCHES.c.epoch + 1)
                )
        if count:
            self._notify(batch_id)
        return count


# ---------------------------------------------------------------------------------------------


def _owned(conn: Connection, user_id: str | None, batch_id: str, *, lock: bool = False) -> sa.Row[Any]:
    query = sa.select(BATCHES).where(BATCHES.c.id == batch_id)
    if user_id is not None:
        query = query.where(BATCHES.c.user_id == user_id)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise BatchNotFoundError(batch_id)
    return row


def stored_counts(conn: Connection, batch_id: str, among: Sequence[StoredStatus] = ()) -> dict[StoredStatus, int]:
    """How many of the batch's items are in each stored status (`among` these only, when given)."""
    query = sa.select(ITEMS.c.status, sa.func.count()).where(ITEMS.c.batch_id == batch_id)
    if among:
        query = query.where(ITEMS.c.status.in_(among))
    rows = conn.execute(query.group_by(ITEMS.c.status)).all()
    return {_checked(_stored_status, status, "batch_items", batch_id, "status"): n for status, n in rows}


def _counts(conn: Connection, batch_id: str) -> dict[ItemStatus, int]:
    counts: dict[ItemStatus, int] = dict.fromkeys(ITEM_STATUSES, 0)
    for status, n in stored_counts(conn, batch_id).items():
        counts[_public(status)] += n
    return counts


def _public(status: StoredStatus) -> ItemStatus:
    return "queued" if status == "waiting" else status


def _stored(status: ItemStatus) -> tuple[StoredStatus, ...]:
    return ("queued", "waiting") if status == "queued" else (status,)


def _status(state: BatchState, counts: Mapping[ItemStatus, int]) -> BatchStatus:
    if state == "cancelled":
        return "cancelled"
    if counts["queued"] + counts["running"] == 0:
        return "failed" if counts["failed"] else "completed"
    return "paused" if state == "paused" else "running"


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "requests",
    "requests_without_usage",
)


def _usage(conn: Connection, batch_id: str) -> Usage:
    """What the batch's items spent so far, every attempt of each, summed by the database from each
    item's `total_usage`: its cost is unknown (None) when an item's is (a model without a price;
    one stored before costs after a request, as `Usage.from_dict` reads it and migration
    batch.0003_item_records wrote it; one without a request cost nothing)."""
    # SQLite reads JSON text as it is (a CAST to its unknown JSON type would make it a number);
    # PostgreSQL needs the text cast to json.
    as_json = sa.type_coerce if conn.dialect.name == "sqlite" else sa.cast
    usage = as_json(ITEMS.c.total_usage, sa.JSON)
    columns = [sa.func.coalesce(sa.func.sum(usage[key].as_integer()), 0) for key in _USAGE_KEYS]
    cost = usage["cost_usd"].as_float()
    requested = sa.func.coalesce(usage["requests"].as_integer(), 0) > 0
    unknown = sa.func.count().filter(sa.and_(ITEMS.c.total_usage.is_not(None), cost.is_(None), requested))
    query = sa.select(*columns, sa.func.coalesce(sa.func.sum(cost), 0.0), unknown).where(ITEMS.c.batch_id == batch_id)
    row: tuple[Any, ...] = tuple(conn.execute(query.where(ITEMS.c.total_usage.is_not(None))).one())
    *counts, cost_sum, unknown_count = row
    found = Usage(**{key: int(value) for key, value in zip(_USAGE_KEYS, counts, strict=True)})
    found.cost_usd = None if unknown_count else float(cost_sum)
    return found


def _batch(conn: Connection, row: sa.Row[Any]) -> Batch:
    counts = _counts(conn, row.id)
    state = _checked(STATE, row.state, "batches", row.id, "state")
    status = _status(state, counts)
    finished_at = row.finished_at
    if finished_at is None and status in ("completed", "failed"):
        # Its last results are stored; a worker records the moment when it next looks.
        finished_at = conn.scalar(sa.select(sa.func.max(ITEMS.c.finished_at)).where(ITEMS.c.batch_id == row.id))
    return Batch(
        id=row.id,
        user_id=row.user_id,
        title=row.title,
        subagent_type=row.subagent_type,
        model=row.model,
        status=status,
        counts=counts,
        usage=_usage(conn, row.id),
        total=row.item_count,
        max_running_items=row.max_running,
        max_live_items=row.max_live,
        max_attempts=row.max_attempts,
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        created_at=_checked(_moment, row.created_at, "batches", row.id, "created_at"),
        finished_at=_checked(_moment, finished_at, "batches", row.id, "finished_at") if finished_at else None,
    )


def _item(row: sa.Row[Any]) -> BatchItem:
    where = f"{row.batch_id}/{row.key}"
    stored = _checked(_stored_status, row.status, "batch_items", where, "status")
    try:
        record = None if row.record is None else TaskOutput.from_dict(_JSON_DICT.validate_json(row.record))
        return BatchItem(
            batch_id=row.batch_id,
            key=row.key,
            seq=row.seq,
            prompt=row.prompt,
            status=_public(stored),
            attempts=row.attempts,
            acceptance_criteria=load_json(CRITERIA, row.criteria),
            limits=stored_limits(row.limits),
            record=record,
            usage=None if row.total_usage is None else stored_usage(row.total_usage),
            outcome=record.status if row.outcome is None and record is not None else row.outcome,
            error=row.error if row.error is not None else _record_error(record),
            created_at=parse_iso(row.created_at),
            started_at=parse_iso(row.started_at),
            finished_at=parse_iso(row.finished_at),
            next_attempt_at=parse_iso(row.not_before) if stored == "waiting" else None,
        )
    except (ValueError, TypeError, UserError) as exc:
        raise BatchStoreError(
            f"batch_items row {where!r} holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def _record_error(record: TaskOutput | None) -> str | None:
    """The error an item shows from its record: one that did not complete says why."""
    return None if record is None or record.status == "completed" else record.error


def stored_usage(text: str) -> Usage:
    """An item's `total_usage` read back."""
    return Usage.from_dict(_JSON_DICT.validate_json(text))


def dump_limits(limits: Mapping[str, Any]) -> str | None:
    """An item's run limits as stored (None: none)."""
    return _JSON_DICT.dump_json(dict(limits)).decode() if limits else None


def stored_limits(text: str | None) -> dict[str, Any]:
    """An item's `limits` read back, checked as a run's (`RunLimits.given`)."""
    return {} if text is None else RunLimits.given(_JSON_DICT.validate_json(text))


def dump_list(value: list[Any] | None) -> str | None:
    return None if value is None else _json_list.dump_json(value).decode()


def load_json(adapter: TypeAdapter[_T], text: str | None) -> _T | None:
    return None if text is None else adapter.validate_json(text)


def _checked(adapter: TypeAdapter[_T], value: object, table: str, row: str, column: str) -> _T:
    try:
        return adapter.validate_python(value)
    except ValidationError:
        raise BatchStoreError(
            f"{table} row {row!r} column {column!r} holds {value!r}, which delegate cannot read; "
            "it was changed outside delegate or by another version"
        ) from None
