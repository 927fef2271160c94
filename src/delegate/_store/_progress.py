"""A run's progress in the store: its events (table `events`, many to a row), its checkpoints
(what a resume replays) and its subagents' records (table `subagents`, each also the checkpoint of
a finished subagent, with its conversation when it completed). What a run's recorder writes as it
goes, in one transaction a batch (`record`), and what every view reads back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from .._events import Event
from .._record import TaskOutput
from .._usage import Usage
from ._base import Database
from ._db import insert_events, insert_rows, upsert_subagents
from ._rows import (
    CHECKPOINT_COLUMNS,
    EVENTS_PER_ROW,
    Checkpoint,
    KeptConversation,
    checkpoint_values,
    conversation_checkpoint,
    decode_checkpoint,
    decode_events,
    decode_subagent,
    event_rows,
    kept_systems,
    subagent_values,
    system_rows,
    usage_adapter,
)
from ._schema import SYSTEM, checkpoints_table, events_table, runs_table, subagents_table

_RECORD = [c for c in subagents_table.c if c.name != "conversation"]
"""A subagent row's columns but its conversation: what a record is read from."""
_KEPT_CONVERSATION = [subagents_table.c[n] for n in ("id", "type", "key", "messages", "conversation")]
"""What `conversation_checkpoint` reads of a subagent row."""


class Progress(Database):
    """A run's events, checkpoints and subagent records (see the module)."""

    def record(
        self,
        events: Sequence[Event] = (),
        checkpoints: Sequence[Checkpoint] = (),
        subagents: Sequence[tuple[str, TaskOutput, str | None, KeptConversation | None]] = (),
        usage: tuple[str, str, Usage, int] | None = None,
    ) -> None:
        """Store a run's progress in one transaction: what a run's recorder writes as it goes.
        `usage` is `(run_id, owner, usage so far, subagents running now)`: stored while `owner`
        holds the running run (its `running_subagents`, see `RunSummary`).
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
                run_id, owner, spent, running = usage
                held = runs_table.c
                update = runs_table.update().where(held.id == run_id, held.owner == owner, held.status == "running")
                spent_json = usage_adapter.dump_json(spent).decode()
                conn.execute(update.values(usage=spent_json, running_subagents=running))

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
