"""Batches on the Temporal engine: the same batch ends with the same records as on the embedded
engine; caps, pause, resume, cancel and retry hold with Temporal's workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from delegate import Store
from delegate.batch import Batch, Batches
from delegate.engine import EngineSettings

from .batch_support import FAST, USER, Runner, items
from .batch_support import worker as embedded_worker
from .temporal_support import batch_done, temporal_fixture, temporal_worker, waits_for  # noqa: F401

VERDICT = [{"criterion": "file:out/a.md non-empty", "result": "holds", "evidence": "12 bytes"}]


@asynccontextmanager
async def serving(
    engine: str, store_url: str, runner: Runner, request: pytest.FixtureRequest
) -> AsyncIterator[Batches]:
    """`Batches` for `engine` over the store, and a worker of that engine running its items."""
    if engine == "embedded":
        batches = Batches(Store.open(store_url))
        async with embedded_worker(batches, runner):
            yield batches
        return
    settings: EngineSettings = request.getfixturevalue("temporal")
    batches = Batches(Store.open(store_url), engine="temporal")
    async with temporal_worker(settings, batches, runner, retry_delay=FAST["retry_delay"]):
        yield batches


def comparable(batch: Batch, batches: Batches) -> tuple[Any, ...]:
    """What a user reads of a batch and its export, without ids and times."""
    rows = [
        {k: v for k, v in row.items() if k not in ("started_at", "completed_at")}
        for row in batches.export_rows(USER, batch.id)
    ]
    for row in rows:
        row.pop("duration_s", None)
    return batch.status, batch.counts, sorted(rows, key=lambda r: r["key"])


@pytest.mark.parametrize("engine", ["embedded", "temporal"])
async def test_the_same_batch_gives_the_same_records_on_both_engines(
    engine: str, store_url: str, request: pytest.FixtureRequest
) -> None:
    runner = Runner(delay=0.02, fail={"item-1": 1, "item-2": 5}, acceptance={"item-0": VERDICT}, reject={"item-3"})
    async with serving(engine, store_url, runner, request) as batches:
        sub = batches.submit(USER, subagent_type="general-purpose", items=items(8), max_running_items=2, max_attempts=2)
        batch = await batch_done(batches, USER, sub.batch.id)
        status, counts, rows = comparable(batch, batches)
    assert runner.peak <= 2
    assert (status, counts) == ("failed", {"queued": 0, "running": 0, "succeeded": 6, "failed": 2, "cancelled": 0})
    by_key = {r["key"]: r for r in rows}
    assert by_key["item-0"]["acceptance"] == VERDICT and by_key["item-0"]["attempts"] == 1
    assert by_key["item-1"]["status"] == "succeeded" and by_key["item-1"]["attempts"] == 2
    assert by_key["item-2"]["status"] == "failed" and by_key["item-2"]["attempts"] == 2
    assert by_key["item-3"]["status"] == "failed" and by_key["item-3"]["attempts"] == 1  # no attempt mends it
    # Every attempt's usage is counted once in its item's total: item-1 ran twice.
    assert by_key["item-1"]["usage"]["input_tokens"] == 2 * by_key["item-0"]["usage"]["input_tokens"]
    assert sorted(c.key for c in runner.calls).count("item-1") == 2


async def test_a_batch_on_temporal_runs_every_item_once_within_its_cap(
    store_url: str, temporal: EngineSettings
) -> None:
    batches = Batches(Store.open(store_url), engine="temporal")
    runner = Runner(delay=0.05)
    sub = batches.submit(USER, subagent_type="general-purpose", items=items(12), max_running_items=3)
    async with temporal_worker(temporal, batches, runner):
        batch = await batch_done(batches, USER, sub.batch.id)
    assert batch.status == "completed"
    assert batch.counts["succeeded"] == 12
    assert sorted(c.key for c in runner.calls) == sorted(f"item-{i}" for i in range(12))
    assert runner.peak <= 3
    first = batches.item(USER, batch.id, "item-0")
    assert first.summary == "done item-0 #1" and first.attempts == 1


async def test_pause_resume_and_cancel_on_temporal_stop_and_start_items(
    store_url: str, temporal: EngineSettings
) -> None:
    hold = asyncio.Event()
    runner = Runner(delay=0.01, hold=hold)
    batches = Batches(Store.open(store_url), engine="temporal")
    sub = batches.submit(USER, subagent_type="general-purpose", items=items(6), max_running_items=2)
    async with temporal_worker(temporal, batches, runner):
        await waits_for(lambda: runner.running == 2)
        batches.pause(USER, sub.batch.id)
        hold.set()  # the two running items finish; no other starts while paused
        await waits_for(lambda: batches.get(USER, sub.batch.id).counts["succeeded"] == 2)
        await asyncio.sleep(1.0)
        assert len(runner.calls) == 2
        assert batches.get(USER, sub.batch.id).status == "paused"
        hold.clear()
        batches.resume(USER, sub.batch.id)
        await waits_for(lambda: runner.running == 2)
        batches.cancel(USER, sub.batch.id)
        await waits_for(lambda: len(runner.cancelled) == 2)  # the running items were stopped
        batch = await batch_done(batches, USER, sub.batch.id)
    assert batch.status == "cancelled"
    assert batch.counts == {"queued": 0, "running": 0, "succeeded": 2, "failed": 0, "cancelled": 4}
    assert len(runner.calls) == 4


async def test_a_retry_on_temporal_runs_the_failed_items_again(store_url: str, temporal: EngineSettings) -> None:
    runner = Runner(delay=0.01, fail={"item-0": 1})
    batches = Batches(Store.open(store_url), engine="temporal")
    sub = batches.submit(USER, subagent_type="general-purpose", items=items(3), max_attempts=1)
    async with temporal_worker(temporal, batches, runner):
        failed = await batch_done(batches, USER, sub.batch.id)
        assert failed.status == "failed"
        assert batches.retry(USER, sub.batch.id) == 1
        batch = await batch_done(batches, USER, sub.batch.id)
    assert batch.status == "completed"
    assert runner.attempts("item-0") == 2
