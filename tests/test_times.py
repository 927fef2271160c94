"""One time codec (`delegate._time`): every time delegate writes or reads has a timezone. A naive
datetime is refused, never taken as local time or UTC: when written (a bug where it was made),
and when read back from the store, a batch row or a record (text changed outside delegate)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from delegate import Store, StoreError
from delegate._record import TaskOutput
from delegate._time import iso, parse_iso
from delegate.batch import Batches
from delegate.batch._store import BatchStoreError

from .batch_support import USER, batches_fixture, items  # noqa: F401


def _record(**times: object) -> dict[str, object]:
    fields = {"id": "sub1", "type": "explore", "description": "d", "tool_call_id": None, "parent_agent_id": None}
    return fields | {"status": "completed", "stop_reason": "stop_tool", "summary": "s"} | times


def test_a_naive_datetime_is_refused_when_written_saying_how_to_make_one_that_is_not() -> None:
    with pytest.raises(ValueError, match=r"timezone-aware.*datetime.now\(UTC\)"):
        iso(datetime(2026, 1, 1, 12, 0))
    paris = datetime(2026, 1, 1, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    assert iso(paris) == "2026-01-01T12:00:00.000000+00:00"  # any timezone, written in UTC
    assert parse_iso(iso(paris)) == paris


def test_a_time_without_a_timezone_is_refused_when_read_back() -> None:
    with pytest.raises(ValueError, match="has no timezone"):
        parse_iso("2026-01-01T12:00:00")
    assert parse_iso("2026-01-01T12:00:00Z") == datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_a_subagent_record_with_a_naive_time_is_refused_and_one_with_a_timezone_reads() -> None:
    with pytest.raises(ValueError, match="started_at"):
        TaskOutput.from_dict(_record(started_at="2026-01-01T12:00:00"))
    record = TaskOutput.from_dict(_record(started_at="2026-01-01T12:00:00+00:00"))
    assert record.started_at == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert record.to_dict()["started_at"] == "2026-01-01T12:00:00.000000+00:00"
    record.completed_at = datetime(2026, 1, 1, 12, 5)  # naive, made in code: refused when written
    with pytest.raises(ValueError, match="timezone-aware"):
        record.to_dict()


def test_a_stored_subagent_time_without_a_timezone_raises_a_store_error(store: Store) -> None:
    run = store.create_run(prompt="p", model="m")
    record = TaskOutput.from_dict(_record(started_at="2026-01-01T12:00:00+00:00"))
    store.add_subagent_records(run.id, [record])
    with store.write() as conn:
        conn.execute(sa.text("UPDATE subagents SET started_at = '2026-01-01T12:00:00'"))
    with pytest.raises(StoreError, match="subagents row"):
        store.subagent_records(run.id)


def test_a_batch_time_without_a_timezone_raises_a_batch_store_error_naming_the_column(batches: Batches) -> None:
    sub = batches.submit(USER, subagent_type="general-purpose", items=items(2))
    with batches.store.write() as conn:
        conn.execute(sa.text("UPDATE batches SET created_at = '2026-01-01T12:00:00'"))
    with pytest.raises(BatchStoreError, match=rf"batches row '{sub.batch.id}' column 'created_at'"):
        batches.get(USER, sub.batch.id)
    with batches.store.write() as conn:
        conn.execute(sa.text("UPDATE batches SET created_at = '2026-01-01T12:00:00+00:00'"))
        conn.execute(sa.text("UPDATE batch_items SET created_at = '2026-01-01T12:00:00'"))
    assert batches.get(USER, sub.batch.id).created_at == datetime(2026, 1, 1, 12, tzinfo=UTC)
    with pytest.raises(BatchStoreError, match="batch_items row"):
        batches.items(USER, sub.batch.id)
