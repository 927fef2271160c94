"""The work queue of batch items: claims, leases, results. Used by `BatchWorker`, not by users.

Claim, don't delete:

- A worker *claims* an item by writing its own id into `lease_owner`, in a transaction that first
  locks the batch row (`SELECT ... FOR UPDATE` on PostgreSQL; `BEGIN IMMEDIATE` on SQLite) and then
  counts the batch's running and claimed items. So `max_running_items` and `max_live_items` hold
  exactly, however many workers claim at once, and whatever retries and restarts happened.
- A claim is a lease held by the worker's heartbeat (`batch_workers.heartbeat_at`). When a worker
  stops beating (it crashed, was killed, lost its machine), any other worker puts its items back
  in the queue, and they run again from the start. A worker on the same machine whose process is
  gone is released at once, without waiting for its heartbeat to lapse.
- A result is stored by a conditional update (`WHERE status = 'running' AND lease_owner = me AND
  attempts = n`): an attempt that lost its lease, or whose batch was cancelled, stores nothing. So
  each item's result is stored exactly once, however often the item was started.
- What an attempt's subagent spent is added to the item's `total_usage` in that same update, read
  from the row it has locked: each stored attempt is counted once, a kill between attempts loses
  none. An attempt that stores nothing (its worker died, lost its lease, or its batch was
  cancelled) adds nothing: what it spent was never reported.
- A failed attempt with attempts left stays claimed while it waits out its backoff (`waiting`,
  shown as `queued`): it counts towards `max_live_items` but not `max_running_items`.
- Workers sharing a batch share it: each starts at most an equal part of `max_running_items` (one
  part per live worker with free slots), so a second machine takes half the work at once.

Timestamps are the writer's clock: machines sharing a PostgreSQL store need clocks that agree to
well within `heartbeat_ttl` (NTP does).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from pydantic_core import to_json
from sqlalchemy.engine import Connection

from .._store import record_json
from .._time import iso, parse_iso, utc_now
from .._usage import Usage
from ..subagents import TaskOutput
from ._model import MAX_INTERRUPTIONS
from ._store import (
    BATCHES,
    CLAIMED,
    CRITERIA,
    ITEMS,
    OPEN,
    STATE,
    WORKERS,
    BatchEngine,
    Batches,
    BatchState,
    StoredStatus,
    load_json,
    stored_counts,
    stored_limits,
    stored_usage,
)


@dataclass(kw_only=True, slots=True, frozen=True)
class ClaimedItem:
    """An item a worker has claimed and started: run it, then report `attempt`'s result."""

    id: int
    key: str
    prompt: str
    acceptance_criteria: list[str] | None
    attempt: int
    limits: dict[str, Any] = field(default_factory=dict[str, Any])
    """The run limits its subagent runs under (`RunLimits` fields by name)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ServeInfo:
    """What a worker needs to know of a batch to run its items."""

    id: str
    user_id: str
    run_id: str | None
    title: str
    subagent_type: str
    model: str | None
    epoch: int
    workspace: str | None = None
    """The folder it was submitted in (its path on `workspace_host`), whose id is `workspace_id`:
    where its items run (`delegate.workspace.Home`; None: a batch stored before, run anywhere)."""
    workspace_host: str | None = None
    workspace_id: str | None = None


@dataclass(kw_only=True, slots=True, frozen=True)
class Taken:
    """An item an execution of its attempt has taken (`WorkQueue.take`). `handover`: an older
    execution of the same attempt took it before, and may still be running it on a worker that
    Temporal gave up on; it stops when it sees this one's fence, and until `WorkQueue.go_live` its
    result, not this one's, is the one that may be stored."""

    item: ClaimedItem
    handover: bool


@dataclass(kw_only=True, slots=True)
class Claim:
    """The answer to a claim: items to start now, and what the batch is doing.

    `state` is `finished` once no item is queued, waiting or running; `superseded` when the claim
    named an epoch the batch has left (a resume or retry started a newer session). `next_due` is when the
    earliest retry this worker holds may start (None when it holds none).
    """

    items: list[ClaimedItem]
    state: BatchState | Literal["finished", "missing", "superseded"]
    next_due: datetime | None = None
    newly_finished: bool = False


@dataclass(kw_only=True, slots=True, frozen=True)
class AttemptResult:
    """How one attempt ended, as the worker reports it: the record of the subagent it ran, stored
    as it is (`TaskOutput.to_dict`), or, when it ran none (the runner failed first), the error."""

    item_id: int
    attempt: int
    record: TaskOutput | None = None
    error: str | None = None
    """Why the attempt failed without a record."""
    spent: Usage | None = None
    """What the attempt's subagent spent when its record is not stored (the database refused it)."""
    retry: bool = True
    """False for a failure that another attempt cannot mend (bad input or configuration)."""
    fence: int | None = None
    """The execution of the attempt that ran it (`WorkQueue.take`): stored only while it is the one
    whose result may be (None: the embedded engine, whose worker's lease is the fence)."""
    turns: list[dict[str, Any]] | None = None
    """Its subagent's model calls and tool calls, as their events (`batch._engine.TURN_EVENTS`); None: it heard
    none (the item keeps an earlier attempt's then)."""

    @property
    def succeeded(self) -> bool:
        return self.record is not None and self.record.status == "completed"

    @property
    def usage(self) -> Usage | None:
        """What the attempt's subagent spent; None when it ran none."""
        return self.spent if self.record is None else self.record.usage


class WorkQueue:
    """The worker's side of `Batches`: same store, same listeners. Thread-safe."""

    def __init__(self, batches: Batches) -> None:
        self.batches = batches
        self.store = batches.store

    def register_worker(self, name: str, host: str, pid: int) -> str:
        """Record a worker process; its id is the lease owner of every item it claims."""
        worker_id = f"{name}/{uuid.uuid4().hex[:12]}"
        now = iso(utc_now())
        values = {"id": worker_id, "name": name, "host": host, "pid": pid, "started_at": now, "heartbeat_at": now}
        with self.store.write() as conn:
            conn.execute(WORKERS.insert().values(values))
        return worker_id

    def heartbeat(self, worker_id: str, free: int) -> bool:
        """Renew the worker's leases, and say how many items it could still start (`free`).

        False when another worker declared it dead (and put its items back in the queue).
        """
        with self.store.write() as conn:
            update = WORKERS.update().where(WORKERS.c.id == worker_id).values(heartbeat_at=iso(utc_now()), free=free)
            return conn.execute(update).rowcount == 1

    def unregister_worker(self, worker_id: str) -> None:
        """A clean stop: give back every item the worker holds (to run again elsewhere), then forget it."""
        with self.store.write() as conn:
            _release(conn, [worker_id], interrupted=False)
            conn.execute(WORKERS.delete().where(WORKERS.c.id == worker_id))

    def sweep(self, worker_id: str, host: str, gone: Callable[[int], bool], ttl: float) -> list[str]:
        """Release the items of workers that stopped: no heartbeat for `ttl` seconds, or (same `host`)
        whose process is `gone`. Returns their ids. Items they ran count one interruption each."""
        cutoff = iso(utc_now() - timedelta(seconds=ttl))
        with self.store.read() as conn:
            rows = conn.execute(sa.select(WORKERS).where(WORKERS.c.id != worker_id)).all()
        dead = [r.id for r in rows if r.heartbeat_at < cutoff or (r.host == host and gone(r.pid))]
        if not dead:
            return []
        with self.store.write() as conn:
            released = _release(conn, dead, interrupted=True)
            conn.execute(WORKERS.delete().where(WORKERS.c.id.in_(dead)))
        for batch_id in released:
            self.batches._notify(batch_id)  # pyright: ignore[reportPrivateUsage]
        return dead

    def serving(self, engine: BatchEngine | None = None) -> list[tuple[str, int]]:
        """`(batch id, epoch)` of every batch a worker of `engine` (None: the embedded one) should
        serve: active, not yet finished, and stored for that engine."""
        of_engine = BATCHES.c.engine.is_(None) if engine is None else BATCHES.c.engine == engine
        query = sa.select(BATCHES.c.id, BATCHES.c.epoch).where(
            BATCHES.c.state == "active", BATCHES.c.finished_at.is_(None), of_engine
        )
        with self.store.read() as conn:
            return [(row.id, row.epoch) for row in conn.execute(query)]

    def serve_info(self, batch_id: str) -> ServeInfo | None:
        with self.store.read() as conn:
            row = conn.execute(sa.select(*_SERVE_COLUMNS).where(BATCHES.c.id == batch_id)).mappings().first()
        return None if row is None else ServeInfo(**row)

    def claim(
        self,
        batch_id: str,
        worker_id: str,
        room: int,
        ttl: float,
        *,
        shared: bool = True,
        epoch: int | None = None,
        token: str | None = None,
    ) -> Claim:
        """Start up to `room` items: first this worker's retries that are due, then queued items.

        One transaction, holding the batch row's lock while it counts, so the caps are exact. A
        worker takes at most its share of `max_running_items`: an equal part for each live worker
        (heartbeat within `ttl`) that has free slots, so workers sharing a batch share its items.
        `shared=False` is for the one claimer of a batch (its Temporal workflow): no share. With
        `epoch`, a batch that has moved on to another epoch answers `superseded` and starts nothing.

        `token` names the claim, so that making it again answers what it took the first time and
        takes nothing more: a Temporal workflow whose worker died after the claim committed and
        before its history recorded the answer makes the same claim again on another worker, and
        must be told the items it already holds (else they stay `running` with nothing running them).
        """
        now = utc_now()
        now_text = iso(now)
        with self.store.write() as conn:
            row = conn.execute(sa.select(BATCHES).where(BATCHES.c.id == batch_id).with_for_update()).first()
            if row is None:
                return Claim(items=[], state="missing")
            state = STATE.validate_python(row.state)
            if state == "cancelled":
                return Claim(items=[], state=state)
            again = [] if token is None else _claimed_by(conn, batch_id, worker_id, token)
            if again:
                moved = epoch is not None and row.epoch != epoch
                return Claim(items=again, state="superseded" if moved else state)
            if epoch is not None and row.epoch != epoch:
                return Claim(items=[], state="superseded")
            counts = stored_counts(conn, batch_id, OPEN)
            if not counts:
                newly = False
                if row.finished_at is None:
                    update = BATCHES.update().where(BATCHES.c.id == batch_id, BATCHES.c.finished_at.is_(None))
                    newly = conn.execute(update.values(finished_at=now_text)).rowcount == 1
                return Claim(items=[], state="finished", newly_finished=newly)
            next_due = parse_iso(
                conn.scalar(
                    sa.select(sa.func.min(ITEMS.c.not_before)).where(
                        ITEMS.c.batch_id == batch_id, ITEMS.c.status == "waiting", ITEMS.c.lease_owner == worker_id
                    )
                )
            )
            if state != "active" or room <= 0:
                return Claim(items=[], state=state, next_due=next_due)
            running, waiting = counts.get("running", 0), counts.get("waiting", 0)
            share = _share(conn, batch_id, worker_id, row.max_running, ttl) if shared else room
            slots = min(room, row.max_running - running, share)
            if slots <= 0:
                return Claim(items=[], state=state, next_due=next_due)
            due_now = (ITEMS.c.not_before.is_(None)) | (ITEMS.c.not_before <= now_text)
            columns = _CLAIM_COLUMNS
            retries = conn.execute(
                sa.select(*columns)
                .where(
                    ITEMS.c.batch_id == batch_id,
                    ITEMS.c.status == "waiting",
                    ITEMS.c.lease_owner == worker_id,
                    due_now,
                )
                .order_by(ITEMS.c.not_before)
                .limit(slots)
            ).all()
            fresh = min(slots - len(retries), row.max_live - running - waiting)
            queued = conn.execute(
                sa.select(*columns)
                .where(ITEMS.c.batch_id == batch_id, ITEMS.c.status == "queued", due_now)
                .order_by(ITEMS.c.seq)
                .limit(max(0, fresh))
            ).all()
            chosen = [*retries, *queued]
            if chosen:
                values = {"ids": [r.id for r in chosen], "owner": worker_id, "now": now_text, "claim": token}
                conn.execute(_START, values)
        return Claim(items=[_claimed(r, r.attempts + 1) for r in chosen], state=state, next_due=next_due)

    def finish(
        self, worker_id: str, results: Sequence[AttemptResult], *, backoff: Callable[[int], float]
    ) -> list[StoredStatus | None]:
        """Store attempts' results in one transaction; for each, the item's new status, or None when
        the attempt no longer held the item (cancelled, or released after a lost lease): nothing stored.

        A failed attempt with attempts left waits `backoff(failures)` seconds, still claimed.
        """
        now = utc_now()
        now_text = iso(now)
        ids = [r.item_id for r in results]
        with self.store.write() as conn:
            # Lock the rows first (PostgreSQL), so what this reads still holds when it writes.
            held = {row.id: row for row in conn.execute(_HELD, {"ids": ids, "owner": worker_id})}
            outcome: list[StoredStatus | None] = []
            updates: list[dict[str, Any]] = []
            for result in results:
                row = held.pop(result.item_id, None)
                fenced = row is not None and result.fence is not None and row.run_live != result.fence
                if row is None or row.attempts != result.attempt or fenced:
                    outcome.append(None)
                    continue
                failures = row.failures if result.succeeded else row.failures + 1
                if result.succeeded:
                    status: StoredStatus = "succeeded"
                else:
                    status = "waiting" if result.retry and failures < row.max_attempts else "failed"
                values = _result_values(result, row.total_usage)
                values.update(
                    b_id=result.item_id,
                    status=status,
                    failures=failures,
                    lease_owner=worker_id if status == "waiting" else None,
                    not_before=iso(now + timedelta(seconds=backoff(failures))) if status == "waiting" else None,
                    finished_at=None if status == "waiting" else now_text,
                )
                updates.append(values)
                outcome.append(status)
            if updates:
                conn.execute(_STORE_RESULT, updates)
        return outcome

    def held(self, item_id: int, owner: str, attempt: int, fence: int | None = None) -> ClaimedItem | None:
        """The item as claimed, while `owner` still runs its `attempt` (and, with `fence`, while no
        newer execution of that attempt has taken it); None once it does not (its result is stored,
        its batch was cancelled, another worker took it over): then there is nothing left to run."""
        query = sa.select(*_CLAIM_COLUMNS).where(*_holding(item_id, owner, attempt))
        if fence is not None:
            query = query.where(ITEMS.c.run_fence == fence)
        with self.store.read() as conn:
            row = conn.execute(query).first()
        return None if row is None else _claimed(row, attempt)

    def take(self, item_id: int, owner: str, attempt: int, fence: int, *, interrupted: bool) -> Taken | None:
        """Take the item for execution `fence` of its `attempt` (Temporal's attempt number of the
        item's activity, which only grows): from now on no older execution may start it, go on
        with it or store its result (`held`, `finish`). None when a newer execution took it, it
        is no longer this attempt's, or counting this execution as an `interrupted` run again
        failed it (`MAX_INTERRUPTIONS`)."""
        columns = (*_CLAIM_COLUMNS, ITEMS.c.run_fence, ITEMS.c.interruptions)
        held = _holding(item_id, owner, attempt)
        with self.store.write() as conn:
            row = conn.execute(sa.select(*columns).where(*held).with_for_update()).first()
            if row is None or (row.run_fence is not None and row.run_fence >= fence):
                return None
            interruptions = row.interruptions + interrupted
            if interruptions >= MAX_INTERRUPTIONS:
                conn.execute(ITEMS.update().where(*held).values(_worn_out(interruptions)))
                return None
            handover = row.run_fence is not None
            values: dict[str, Any] = {"run_fence": fence, "interruptions": interruptions}
            if not handover:
                values["run_live"] = fence
            conn.execute(ITEMS.update().where(*held).values(values))
        return Taken(item=_claimed(row, attempt), handover=handover)

    def go_live(self, item_id: int, owner: str, attempt: int, fence: int) -> bool:
        """After a handover: make execution `fence` the one whose result may be stored. False when
        the older execution stored its result first (or the item is no longer this one's)."""
        held = (*_holding(item_id, owner, attempt), ITEMS.c.run_fence == fence)
        with self.store.write() as conn:
            return conn.execute(ITEMS.update().where(*held).values(run_live=fence)).rowcount == 1

    def release_waiting(self, batch_id: str, worker_id: str) -> None:
        """Give back this worker's retries of a paused batch: queued again, their backoff kept."""
        with self.store.write() as conn:
            conn.execute(
                ITEMS.update()
                .where(ITEMS.c.batch_id == batch_id, ITEMS.c.status == "waiting", ITEMS.c.lease_owner == worker_id)
                .values(status="queued", lease_owner=None)
            )

    def running_count(self, batch_id: str) -> tuple[int, int]:
        """`(running, claimed)` items of a batch right now, straight from the table (for tests and UIs)."""
        with self.store.read() as conn:
            counts = stored_counts(conn, batch_id, CLAIMED)
        return counts.get("running", 0), counts.get("running", 0) + counts.get("waiting", 0)


def _holding(item_id: int, owner: str, attempt: int) -> tuple[sa.ColumnElement[bool], ...]:
    """The item while `owner` runs its `attempt`."""
    return (
        ITEMS.c.id == item_id,
        ITEMS.c.status == "running",
        ITEMS.c.lease_owner == owner,
        ITEMS.c.attempts == attempt,
    )


def _worn_out(interruptions: Any) -> dict[str, Any]:
    """An item failed for its worker stopping while running it `MAX_INTERRUPTIONS` times."""
    return {
        "status": "failed",
        "lease_owner": None,
        "interruptions": interruptions,
        "finished_at": iso(utc_now()),
        "outcome": "error",
        "error": f"its worker stopped while running it {MAX_INTERRUPTIONS} times; not run again",
    }


def _claimed_by(conn: Connection, batch_id: str, worker_id: str, token: str) -> list[ClaimedItem]:
    """The items the claim `token` started that are still running its attempt."""
    query = (
        sa.select(*_CLAIM_COLUMNS)
        .where(
            ITEMS.c.batch_id == batch_id,
            ITEMS.c.claim == token,
            ITEMS.c.status == "running",
            ITEMS.c.lease_owner == worker_id,
        )
        .order_by(ITEMS.c.seq)
    )
    return [_claimed(row, row.attempts) for row in conn.execute(query)]


def _claimed(row: sa.Row[*tuple[Any, ...]], attempt: int) -> ClaimedItem:
    return ClaimedItem(
        id=row.id,
        key=row.key,
        prompt=row.prompt,
        acceptance_criteria=load_json(CRITERIA, row.criteria),
        attempt=attempt,
        limits=stored_limits(row.limits),
    )


def _share(conn: Connection, batch_id: str, worker_id: str, max_running: int, ttl: float) -> int:
    """How many more items of the batch this worker may start: its equal part, less what it runs."""
    cutoff = iso(utc_now() - timedelta(seconds=ttl))
    workers = conn.scalar(
        sa.select(sa.func.count()).where(
            WORKERS.c.heartbeat_at >= cutoff, (WORKERS.c.free > 0) | (WORKERS.c.id == worker_id)
        )
    )
    mine = conn.scalar(
        sa.select(sa.func.count()).where(
            ITEMS.c.batch_id == batch_id, ITEMS.c.status == "running", ITEMS.c.lease_owner == worker_id
        )
    )
    return -(-max_running // max(1, workers or 0)) - (mine or 0)


def _release(conn: Connection, owners: list[str], *, interrupted: bool) -> set[str]:
    """Put the items of `owners` back in the queue; an interrupted run counts, up to MAX_INTERRUPTIONS."""
    held = (ITEMS.c.lease_owner.in_(owners), ITEMS.c.status.in_(CLAIMED))
    batch_ids = set(conn.scalars(sa.select(ITEMS.c.batch_id).where(*held).distinct()))
    if not batch_ids:
        return set()
    now = iso(utc_now())
    if interrupted:
        worn = (ITEMS.c.lease_owner.in_(owners), ITEMS.c.status == "running")
        conn.execute(
            ITEMS.update()
            .where(*worn, ITEMS.c.interruptions + 1 >= MAX_INTERRUPTIONS)
            .values(
                status="failed",
                lease_owner=None,
                interruptions=ITEMS.c.interruptions + 1,
                finished_at=now,
                outcome="error",
                error=f"its worker stopped while running it {MAX_INTERRUPTIONS} times; not run again",
            )
        )
        conn.execute(
            ITEMS.update()
            .where(*worn)
            .values(status="queued", lease_owner=None, interruptions=ITEMS.c.interruptions + 1)
        )
    conn.execute(ITEMS.update().where(*held).values(status="queued", lease_owner=None))
    return batch_ids


_SERVE_COLUMNS = tuple(BATCHES.c[f.name] for f in fields(ServeInfo))
"""A batch's columns a `ServeInfo` holds, of the same names."""
# Statements run for every item, built once, with expanding parameters for their id lists.
_CLAIM_COLUMNS = (
    ITEMS.c.id,
    ITEMS.c.key,
    ITEMS.c.prompt,
    ITEMS.c.criteria,
    ITEMS.c.attempts,
    ITEMS.c.limits,
)
_START = (
    ITEMS.update()
    .where(ITEMS.c.id.in_(sa.bindparam("ids", expanding=True)))
    .values(
        status="running",
        lease_owner=sa.bindparam("owner"),
        attempts=ITEMS.c.attempts + 1,
        started_at=sa.bindparam("now"),
        not_before=None,
        claim=sa.bindparam("claim"),
        run_fence=None,
        run_live=None,
    )
)
_HELD = (
    sa.select(
        ITEMS.c.id, ITEMS.c.attempts, ITEMS.c.failures, ITEMS.c.total_usage, ITEMS.c.run_live, BATCHES.c.max_attempts
    )
    .join(BATCHES, BATCHES.c.id == ITEMS.c.batch_id)
    .where(
        ITEMS.c.id.in_(sa.bindparam("ids", expanding=True)),
        ITEMS.c.status == "running",
        ITEMS.c.lease_owner == sa.bindparam("owner"),
    )
    .with_for_update(of=ITEMS)
)
"""The items an attempt's worker still holds; locked (PostgreSQL) so they stay so until stored."""
_STORE_RESULT = (
    ITEMS.update()
    .where(ITEMS.c.id == sa.bindparam("b_id"))
    .values(
        turns=sa.func.coalesce(sa.bindparam("turns", type_=sa.Text()), ITEMS.c.turns),  # else an earlier attempt's
        **{
            name: sa.bindparam(name)
            for name in (
                "status",
                "failures",
                "lease_owner",
                "not_before",
                "finished_at",
                "outcome",
                "error",
                "record",
                "total_usage",
            )
        },
    )
)
"""Stores one attempt's result; run as an executemany over the rows `finish` has locked."""


def _result_values(result: AttemptResult, total_usage: str | None) -> dict[str, Any]:
    """The record whole, in `record` (its status and error are the item's `outcome` and `error`);
    without one, the attempt's error. What it spent is added to the item's `total_usage` (the
    stored one, read under the row's lock)."""
    total = _plus(total_usage, result.usage)
    turns = None if result.turns is None else to_json(result.turns).decode()
    if result.record is None:
        return {"record": None, "total_usage": total, "outcome": "error", "error": result.error, "turns": turns}
    return {"record": record_json(result.record), "total_usage": total, "outcome": None, "error": None, "turns": turns}


def _plus(total_usage: str | None, spent: Usage | None) -> str | None:
    """A stored total with an attempt's usage added, as stored (`Usage` addition: a cost unknown
    in either makes the total's unknown)."""
    if spent is None:
        return total_usage
    total = spent if total_usage is None else stored_usage(total_usage) + spent
    return to_json(total.to_dict()).decode()
