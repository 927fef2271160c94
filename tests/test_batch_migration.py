"""Batches stored before `batch.0003_item_records` read back the same after it, on each backend.

`fixtures/batches_before_0003.json` holds rows the code before that migration wrote, through its
own schema (`batch.0001_tables`, `batch.0002_item_results`) and its own queue (claims and results:
items that succeeded, failed, wait out a retry after a failed run or a crashed runner, were
rejected, cancelled, or lost their workers too often), and what that code read back from them:
each batch, its items and its export rows. Each test builds the old schema with the old
migrations, writes those rows, and opens the store with today's code, which applies 0003.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from delegate import Store, Usage
from delegate.batch import BATCH_MIGRATIONS, Batches
from delegate.batch._store import ITEMS

from .batch_support import (
    USER,
    Runner,
    batches_fixture,  # noqa: F401  (the `batches` fixture)
    until,
    worker,
)

FIXTURE = Path(__file__).with_name("fixtures") / "batches_before_0003.json"


def _old_store(store_url: str) -> tuple[Store, dict[str, Any]]:
    """A store with the schema and rows of the code before batch.0003, and what that code read."""
    data = json.loads(FIXTURE.read_text())
    store = Store.open(store_url)
    names = [m.name for m in BATCH_MIGRATIONS]
    assert names[:3] == ["batch.0001_tables", "batch.0002_item_results", "batch.0003_item_records"]
    store.migrate(BATCH_MIGRATIONS[:2])
    with store.write() as conn:
        for table in ("batches", "batch_items"):
            rows: list[dict[str, Any]] = data["rows"][table]
            columns: list[sa.ColumnClause[Any]] = [sa.column(name) for name in rows[0]]
            conn.execute(sa.table(table, *columns).insert(), rows)
    return store, data["reads"]


def _without_record(row: dict[str, Any]) -> dict[str, Any]:
    """What the code before batch.0003 read: no `record`, nor `limits` (batch.0007: see
    `test_batch_limits.py`)."""
    return {key: value for key, value in row.items() if key not in ("record", "limits")}


def test_a_batch_stored_before_item_records_reads_back_the_same(store_url: str) -> None:
    store, reads = _old_store(store_url)
    try:
        batches = Batches(store)
        assert "batch.0003_item_records" in store.applied_migrations()
        for batch_id, read in reads.items():
            assert batches.get(USER, batch_id).to_dict() == read["batch"]
            items = [i.to_dict() for i in batches.items(USER, batch_id)]
            assert [_without_record(i) for i in items] == read["items"]
            assert [_without_record(r) for r in batches.export_rows(USER, batch_id)] == read["export"]
            for item in items:  # the record, where an attempt gave one back, is the subagent's JSON
                assert (item["record"] is None) == (item["summary"] is None), item["key"]
    finally:
        store.close()


def test_an_old_item_record_is_the_subagent_record_its_runner_gave_back(store_url: str) -> None:
    store, reads = _old_store(store_url)
    try:
        batches = Batches(store)
        batch_id = next(b for b, read in reads.items() if read["batch"]["title"] == "old batch")
        done = batches.item(USER, batch_id, "done").record
        assert done is not None
        assert (done.id, done.type, done.description, done.parent_agent_id) == (
            "sub1",
            "general-purpose",
            "old batch [done]",
            "batch",
        )
        assert (done.status, done.summary, done.steps, done.result) == (
            "completed",
            "Login goes through naïve ✓ paths",
            4,
            {"n": 1, "names": ["x"]},
        )
        assert [a.relative_path for a in done.artifacts] == ["out/a.md"]
        assert [s.reason for s in done.skipped] == ["outside the workspace"]
        assert done.usage.cost_usd == 0.0015
        flaky = batches.item(USER, batch_id, "flaky")
        assert flaky.record is not None and (flaky.record.status, flaky.record.error) == ("error", "model failed: 500")
        assert flaky.record.usage.cost_usd is None  # stored before costs were kept, after a request
        crashed = batches.item(USER, batch_id, "crashed")  # the runner failed: no subagent, no record
        assert (crashed.record, crashed.outcome, crashed.error) == (None, "error", "RuntimeError: boom")
        with store.read() as conn:  # an old item's total (batch.0004) is its last attempt's record's usage
            query = sa.select(ITEMS.c.record, ITEMS.c.total_usage).where(ITEMS.c.record.is_not(None))
            stored = conn.execute(query).all()
        assert stored and all(json.loads(r.record)["usage"] == json.loads(r.total_usage) for r in stored)
    finally:
        store.close()


@pytest.mark.parametrize(("requests", "cost"), [(0, 0.0), (1, None)])
def test_a_usage_stored_before_costs_reads_as_before_after_the_migration(
    store_url: str, requests: int, cost: float | None
) -> None:
    """An item's usage stored before costs were kept has no `cost_usd`: after a request its cost is
    unknown, without one it cost nothing (as `Usage.from_dict` reads it), in the item and the batch."""
    store, reads = _old_store(store_url)
    try:
        batch_id = next(b for b, read in reads.items() if read["batch"]["title"] == "cancelled one")
        old = {"input_tokens": 7, "output_tokens": 1, "cache_read_tokens": 0, "cache_write_tokens": 0}
        old |= {"requests": requests, "requests_without_usage": 0}
        with store.write() as conn:
            update = "UPDATE batch_items SET usage = :u WHERE batch_id = :b AND key = 'ran'"
            conn.execute(sa.text(update), {"u": json.dumps(old), "b": batch_id})
        batches = Batches(store)
        spent = Usage(input_tokens=7, output_tokens=1, requests=requests, cost_usd=cost)
        assert batches.item(USER, batch_id, "ran").usage == spent
        assert batches.get(USER, batch_id).usage == spent  # its one item that ran
    finally:
        store.close()


async def test_an_old_batch_runs_on_after_the_migration(store_url: str) -> None:
    store, reads = _old_store(store_url)
    try:
        batches = Batches(store)
        batch_id = next(b for b, read in reads.items() if read["batch"]["title"] == "old batch")
        assert batches.retry(USER, batch_id, "rejected") == 1
        async with worker(batches, Runner()):
            await until(lambda: batches.item(USER, batch_id, "rejected").status == "succeeded")
        item = batches.item(USER, batch_id, "rejected")
        assert (item.status, item.summary, item.outcome, item.error) == (
            "succeeded",
            "done rejected #2",
            "completed",
            None,
        )
        assert item.record is not None and item.record.tool_call_id == f"batch:{batch_id}:rejected:2"
    finally:
        store.close()


def test_the_migrated_items_table_is_the_one_the_queries_use(store_url: str) -> None:
    store, _ = _old_store(store_url)
    try:
        Batches(store)
        assert _items_table(store) == _QUERIED
    finally:
        store.close()


def test_a_new_items_table_is_the_one_the_queries_use(batches: Batches) -> None:
    assert _items_table(batches.store) == _QUERIED


_QUERIED = (
    {c.name for c in ITEMS.columns},
    {i.name for i in ITEMS.indexes},
    {c.name for c in ITEMS.constraints if isinstance(c, sa.UniqueConstraint)},
)


def _items_table(store: Store) -> tuple[set[str], set[str | None], set[str | None]]:
    """The columns, indexes and unique constraints of the store's `batch_items`."""
    with store.read() as conn:
        inspector = sa.inspect(conn)
        columns = {c["name"] for c in inspector.get_columns("batch_items")}
        indexes = {i["name"] for i in inspector.get_indexes("batch_items") if "duplicates_constraint" not in i}
        unique = {c["name"] for c in inspector.get_unique_constraints("batch_items")}
        return columns, indexes, unique
