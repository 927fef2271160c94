"""The batch engine against each backend (a SQLite file; PostgreSQL when DELEGATE_TEST_PG is set).

One contract suite: every test takes `batches` (parametrized over the backends), runs a real
`BatchWorker` with a runner that sleeps, and checks what a user would see.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from delegate import Event, TaskOutput, Usage
from delegate.batch import Batches, BatchNotFoundError, BatchStateError, ItemInput
from delegate.batch._queue import WorkQueue
from delegate.testing import FunctionModel, reply, subagent_record

from .batch_support import (
    USER,
    QueueLooks,
    Runner,
    batches_fixture,  # noqa: F401  (the `batches` fixture)
    finished,
    items,
    until,
    worker,
)


async def test_a_batch_runs_every_item_and_keeps_its_output(batches: Batches) -> None:
    verdict = [{"criterion": "file:out/a.md non-empty", "result": "holds", "evidence": "12 bytes"}]
    runner = Runner(acceptance={"item-0": verdict})
    events: list[Event] = []
    sub = batches.submit(USER, subagent_type="general-purpose", items=items(5), title="five", run_id="run-1")
    async with worker(batches, runner, emit=events.append) as w:
        batch = await finished(w, sub.batch.id)
        await until(lambda: any(e.type == "batch.completed" for e in events))
    assert batch.status == "completed"
    item_events = [e for e in events if e.type == "batch.item"]
    assert sorted(e.data["key"] for e in item_events) == [f"item-{i}" for i in range(5)]
    assert {(e.run_id, e.agent_id, e.data["status"]) for e in item_events} == {
        ("run-1", f"batch:{batch.id}", "succeeded")
    }
    assert batch.counts == {"queued": 0, "running": 0, "succeeded": 5, "failed": 0, "cancelled": 0}
    assert batch.finished_at is not None
    first = batches.item(USER, batch.id, "item-0")
    assert first.summary == "done item-0 #1"
    assert first.attempts == 1
    assert first.usage is not None and first.usage.input_tokens == 10
    assert first.acceptance == verdict
    call = runner.calls[0]
    assert (call.subagent_type, call.user_id, call.run_id) == ("general-purpose", USER, "run-1")


async def test_items_can_be_run_by_a_scripted_model(batches: Batches) -> None:
    model = FunctionModel(lambda request: reply(f"answer to: {request.messages[0].text}"), latency=0.01)

    class ModelRunner:
        async def run_task(self, *, prompt: str, **_: Any) -> TaskOutput:
            from delegate import Message
            from delegate.models import ModelRequest

            response = await model.complete(ModelRequest(system="", messages=[Message.user(prompt)]))
            return subagent_record(response.text, usage=response.usage)

    sub = batches.submit(USER, subagent_type="general-purpose", items=items(3))
    async with worker(batches, ModelRunner()) as w:
        await finished(w, sub.batch.id)
    assert batches.item(USER, sub.batch.id, "item-2").summary == "answer to: summarise item 2"
    assert len(model.requests) == 3


async def test_running_and_claimed_items_never_exceed_the_batch_caps(batches: Batches) -> None:
    queue = WorkQueue(batches)
    seen: list[tuple[int, int]] = []
    batch_ids: list[str] = []

    def sample() -> None:
        seen.append(queue.running_count(batch_ids[0]))

    # Every third item fails twice, so retries wait out their backoff while claimed.
    runner = Runner(delay=0.02, fail={f"item-{i}": 2 for i in range(0, 60, 3)}, watch=sample)
    sub = batches.submit(USER, subagent_type="t", items=items(60), max_running_items=4, max_live_items=6)
    batch_ids.append(sub.batch.id)
    async with worker(batches, runner, retry_delay=0.05, max_retry_delay=0.05) as w:
        batch = await finished(w, sub.batch.id)
    assert batch.counts["succeeded"] == 60
    assert runner.peak == 4
    assert max(running for running, _ in seen) <= 4
    assert max(claimed for _, claimed in seen) <= 6
    assert runner.attempts("item-0") == 3


async def test_a_paused_batch_starts_nothing_until_resumed(batches: Batches) -> None:
    hold = asyncio.Event()
    runner = Runner(hold=hold)
    looks = QueueLooks()
    sub = batches.submit(USER, subagent_type="t", items=items(6), max_running_items=2)
    async with worker(batches, runner, looks=looks) as w:
        await until(lambda: runner.running == 2)
        paused = batches.pause(USER, sub.batch.id)
        assert paused.status == "paused"
        hold.set()  # the two running items finish; nothing new starts
        await until(lambda: batches.get(USER, sub.batch.id).counts["succeeded"] == 2)
        await until(lambda: (sub.batch.id, "paused", 0) in looks.claims)  # the worker asked, and took nothing
        await looks.passes_more(3)  # nor does its scheduler serve the batch again
        held = batches.get(USER, sub.batch.id)
        assert (held.counts["queued"], held.counts["running"], len(runner.calls)) == (4, 0, 2)
        assert batches.resume(USER, sub.batch.id).status == "running"
        batch = await finished(w, sub.batch.id)
    assert batch.counts["succeeded"] == 6


async def test_cancel_stops_running_items_and_a_restart_does_not_bring_them_back(batches: Batches) -> None:
    hold = asyncio.Event()
    runner = Runner(hold=hold)
    sub = batches.submit(USER, subagent_type="t", items=items(10), max_running_items=3)
    async with worker(batches, runner) as w:
        await until(lambda: runner.running == 3)
        cancelled = batches.cancel(USER, sub.batch.id)
        assert cancelled.status == "cancelled"
        assert cancelled.counts["cancelled"] == 10
        await until(lambda: len(runner.cancelled) == 3)
        batch = await finished(w, sub.batch.id)
    assert batch.status == "cancelled"
    hold.set()
    fresh = Runner()
    looks = QueueLooks()
    async with worker(batches, fresh, looks=looks):  # a new engine over the same files
        await looks.passes_more(3)  # it has looked for work three times, and every claim is answered
    assert fresh.calls == []
    assert [c for c in looks.claims if c[2]] == []  # nothing claimed
    assert batches.get(USER, sub.batch.id).counts["cancelled"] == 10
    with pytest.raises(BatchStateError):
        batches.resume(USER, sub.batch.id)


async def test_errors_are_retried_then_the_item_fails_and_retry_runs_only_failed_items(batches: Batches) -> None:
    runner = Runner(fail={"item-1": 3, "item-2": 99}, raise_for={"item-3"}, reject={"item-5"})
    sub = batches.submit(USER, subagent_type="t", items=items(6), max_attempts=3)
    async with worker(batches, runner) as w:
        batch = await finished(w, sub.batch.id)
        assert batch.status == "failed"
        assert batch.counts == {"queued": 0, "running": 0, "succeeded": 2, "failed": 4, "cancelled": 0}
        failed = batches.items(USER, batch.id, status="failed")
        assert [i.key for i in failed] == ["item-1", "item-2", "item-3", "item-5"]
        assert [i.attempts for i in failed] == [3, 3, 3, 1]  # a UserError is not worth a second attempt
        assert failed[0].error == "attempt 3 of item-1 failed"
        assert failed[2].error == "RuntimeError: runner crashed on item-3"
        assert failed[3].error is not None and failed[3].error.startswith("unknown subagent type 't'")
        runner.reject.clear()

        assert batches.retry(USER, batch.id, "item-1") == 1  # one item; it succeeds on its 4th attempt
        await until(lambda: batches.item(USER, batch.id, "item-1").status == "succeeded")
        assert batches.item(USER, batch.id, "item-1").attempts == 4
        with pytest.raises(BatchStateError, match="only failed items"):
            batches.retry(USER, batch.id, "item-0")

        before = len(runner.calls)
        runner.raise_for.clear()
        assert batches.retry(USER, batch.id) == 3  # all failed ones: item-2, item-3 and item-5
        batch = await finished(w, batch.id)
    again = sorted(c.key for c in runner.calls[before:])
    assert again == ["item-2", "item-2", "item-2", "item-3", "item-5"]
    assert batch.counts["succeeded"] == 5 and batch.counts["failed"] == 1


async def test_a_failed_acceptance_verdict_is_kept_and_never_retried(batches: Batches) -> None:
    verdict = [{"criterion": "file:out/x.md exists", "result": "fails", "evidence": "no such file"}]
    runner = Runner(acceptance={"item-0": verdict})
    sub = batches.submit(USER, subagent_type="t", items=items(1))
    async with worker(batches, runner) as w:
        batch = await finished(w, sub.batch.id)
    item = batches.item(USER, batch.id, "item-0")
    assert (item.status, item.attempts, item.acceptance) == ("succeeded", 1, verdict)


async def test_resubmitting_the_same_tool_call_returns_the_existing_batch(batches: Batches) -> None:
    first = batches.submit(USER, subagent_type="t", items=items(3), run_id="r1", tool_call_id="call-1")
    again = batches.submit(USER, subagent_type="t", items=items(7), run_id="r1", tool_call_id="call-1")
    other = batches.submit(USER, subagent_type="t", items=items(2), run_id="r1", tool_call_id="call-2")
    assert first.created and not again.created and other.created
    assert again.batch.id == first.batch.id and again.batch.total == 3
    assert other.batch.id != first.batch.id
    assert [b.id for b in batches.list_batches(USER)] == [other.batch.id, first.batch.id]


async def test_another_users_batch_is_not_found(batches: Batches) -> None:
    sub = batches.submit(USER, subagent_type="t", items=[ItemInput(key="a", prompt="p")])
    bob = "bob"
    calls = [
        lambda: batches.get(bob, sub.batch.id),
        lambda: batches.items(bob, sub.batch.id),
        lambda: batches.item(bob, sub.batch.id, "a"),
        lambda: batches.pause(bob, sub.batch.id),
        lambda: batches.resume(bob, sub.batch.id),
        lambda: batches.cancel(bob, sub.batch.id),
        lambda: batches.retry(bob, sub.batch.id),
        lambda: list(batches.export_rows(bob, sub.batch.id)),
    ]
    for call in calls:
        with pytest.raises(BatchNotFoundError):
            call()
    assert batches.list_batches(bob) == []
    assert batches.get(USER, sub.batch.id).status == "running"


async def test_items_page_and_filter_and_export_one_row_per_item(batches: Batches) -> None:
    runner = Runner(fail={"item-4": 9})
    sub = batches.submit(USER, subagent_type="t", items=items(12), max_attempts=1, max_running_items=12)
    async with worker(batches, runner) as w:
        await finished(w, sub.batch.id)
    page = batches.items(USER, sub.batch.id, offset=5, limit=3)
    assert [i.key for i in page] == ["item-5", "item-6", "item-7"]
    assert [i.key for i in batches.items(USER, sub.batch.id, status="failed")] == ["item-4"]
    rows = list(batches.export_rows(USER, sub.batch.id, page=5))
    assert [r["key"] for r in rows] == [f"item-{i}" for i in range(12)]
    assert set(rows[0]) >= {"key", "status", "attempts", "summary", "artifacts", "usage", "acceptance"}
    assert rows[4]["status"] == "failed" and rows[0]["usage"]["input_tokens"] == 10


async def test_a_stopped_worker_gives_its_items_back_and_the_next_one_finishes_them(batches: Batches) -> None:
    hold = asyncio.Event()
    runner = Runner(hold=hold)
    sub = batches.submit(USER, subagent_type="t", items=items(4), max_running_items=4)
    async with worker(batches, runner):
        await until(lambda: runner.running == 4)
    assert batches.get(USER, sub.batch.id).counts["queued"] == 4
    async with worker(batches, Runner()) as w:
        batch = await finished(w, sub.batch.id)
    assert batch.counts["succeeded"] == 4
    assert {i.attempts for i in batches.items(USER, sub.batch.id)} == {2}


async def test_cancelling_a_batch_that_has_ended_changes_nothing(batches: Batches) -> None:
    sub = batches.submit(USER, subagent_type="t", items=items(2))
    async with worker(batches, Runner()) as w:
        await finished(w, sub.batch.id)
    batch = batches.cancel(USER, sub.batch.id)
    assert (batch.status, batch.counts["succeeded"]) == ("completed", 2)


async def test_a_batchs_usage_is_its_items_summed_by_the_database_cost_included(batches: Batches) -> None:
    spent = {
        f"item-{i}": Usage(
            input_tokens=1000 * (i + 1),
            output_tokens=70 + i,
            cache_read_tokens=300 * i,
            cache_write_tokens=20 * i,
            requests=2,
            cost_usd=0.0012345 * (i + 1),
        )
        for i in range(4)
    }
    spent["odd-1"] = Usage(input_tokens=5, output_tokens=1, requests=1, cost_usd=None)  # a model without a price
    priced = batches.submit(USER, subagent_type="t", items=items(4), max_running_items=4)
    unpriced = batches.submit(USER, subagent_type="t", items=items(3, "odd"), max_running_items=3)
    queued = batches.submit(USER, subagent_type="t", items=items(2, "later"))
    batches.pause(USER, queued.batch.id)
    async with worker(batches, Runner(usage=spent)) as w:
        await finished(w, priced.batch.id)
        await finished(w, unpriced.batch.id)
    total = sum((spent[f"item-{i}"] for i in range(4)), start=Usage())
    usage = batches.get(USER, priced.batch.id).usage
    assert usage.to_dict() | {"cost_usd": None} == total.to_dict() | {"cost_usd": None}
    assert usage.cost_usd == pytest.approx(0.0012345 * 10, rel=1e-12)
    odd = batches.get(USER, unpriced.batch.id).usage
    assert (odd.input_tokens, odd.requests, odd.cost_usd) == (5 + 2 * 10, 1 + 2 * 1, None)  # unknown, not a guess
    assert batches.get(USER, queued.batch.id).usage == Usage()  # nothing ran: nothing spent, at no cost


def test_a_named_claim_made_again_answers_the_items_it_took_and_takes_no_more(batches: Batches) -> None:
    # A Temporal workflow whose worker died after its claim committed makes the same claim again.
    queue = WorkQueue(batches)
    sub = batches.submit(USER, subagent_type="t", items=items(5), max_running_items=2)
    first = queue.claim(sub.batch.id, "temporal:b", 10, 0.0, shared=False, epoch=0, token="run/1")
    again = queue.claim(sub.batch.id, "temporal:b", 10, 0.0, shared=False, epoch=0, token="run/1")
    assert [i.key for i in first.items] == [i.key for i in again.items] == ["item-0", "item-1"]
    assert [i.attempt for i in again.items] == [1, 1]
    assert queue.running_count(sub.batch.id) == (2, 2)
    assert queue.claim(sub.batch.id, "temporal:b", 10, 0.0, shared=False, epoch=0, token="run/2").items == []
