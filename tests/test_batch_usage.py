"""A batch item's usage is what every one of its attempts spent, tokens and cost, on each backend:
added as each attempt's result is stored, kept across `retry`, summed into the batch's usage; a
cost unknown in any attempt makes the item's (and the batch's) unknown. The item's `record` stays
its last attempt's subagent record, with that attempt's usage alone."""

from __future__ import annotations

import json
import threading
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from delegate import Runtime, TaskOutput, Usage
from delegate.batch import Batches
from delegate.testing import subagent_record
from tests.cli_support import run_cli
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.test_batch_cli import env_for, write_items
from tests.test_cost import priced_model, table_price
from tests.test_results import close, tool_results

from .batch_support import (
    USER,
    batches_fixture,  # noqa: F401  (the `batches` fixture)
    until,
    worker,
)


class FailsTwice:
    """Each item's subagent lists the folder, then (attempts 1 and 2) meets a model error, or
    (attempt 3) completes: every attempt pays for its first answer, each a different size."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.answered: list[dict[str, int]] = []

    def __call__(self, body: dict[str, Any]) -> Reply | Fault:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        with self.lock:
            if not tool_results(body):
                self.attempts[prompt] += 1
            attempt = self.attempts[prompt]
            if tool_results(body) and attempt < 3:
                return Fault(400, "the model refused this one")
            reply = (
                Reply(tool_calls=[("list_dir", {})], prompt_tokens=1_000 * attempt, completion_tokens=10 * attempt)
                if not tool_results(body)
                else Reply(tool_calls=[("complete", {"summary": "done"})], prompt_tokens=500, completion_tokens=7)
            )
            self.answered.append({"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens})
            return reply


async def test_an_item_that_failed_twice_then_succeeded_costs_its_three_attempts_at_genai_prices(
    batches: Batches, tmp_path: Path
) -> None:
    model = FailsTwice()
    with OpenAIServer(model) as server:
        rt = Runtime(model=priced_model(server), workspace=tmp_path, store=False)
        try:
            sub = batches.submit(USER, subagent_type="general-purpose", items=[{"key": "k", "prompt": "go"}])
            async with worker(batches, rt):
                await until(lambda: batches.get(USER, sub.batch.id).done)
        finally:
            await close(rt)
    item = batches.item(USER, sub.batch.id, "k")
    assert (item.status, item.attempts) == ("succeeded", 3)
    assert item.usage is not None and item.record is not None
    assert (item.usage.input_tokens, item.usage.output_tokens) == (1_000 + 2_000 + 3_000 + 500, 10 + 20 + 30 + 7)
    assert item.usage.requests >= 4  # four answers (and the faults, as the runtime counts them)
    assert sum(a["input_tokens"] for a in model.answered) == item.usage.input_tokens
    uncached = {"cache_read_tokens": 0, "cache_write_tokens": 0}
    priced = sum(Decimal(str(table_price(a | uncached))) for a in model.answered)
    assert item.usage.cost_usd == pytest.approx(float(priced), rel=1e-9)
    whole = item.usage.to_dict()
    assert item.usage.cost_usd == pytest.approx(table_price(whole), rel=1e-9)  # the table's price of the total
    # The record is the last attempt's alone; the item's usage, in its JSON and export row, is the total.
    assert (item.record.usage.input_tokens, item.record.status) == (3_000 + 500, "completed")
    row = next(iter(batches.export_rows(USER, sub.batch.id)))
    assert row["usage"] == whole and row["record"]["usage"] == item.record.usage.to_dict()
    assert item.to_dict()["usage"] == whole
    assert batches.get(USER, sub.batch.id).usage == item.usage  # the batch's usage counts every attempt


class Scripted:
    """Gives back, for each (key, attempt), a record of that status and usage."""

    def __init__(self, script: dict[tuple[str, int], tuple[str, Usage]]) -> None:
        self.script = script

    async def run_task(self, *, tool_call_id: str | None, **_: Any) -> TaskOutput:
        assert tool_call_id is not None
        _, _, key, attempt = tool_call_id.split(":")
        status, usage = self.script[(key, int(attempt))]
        error = None if status == "completed" else f"attempt {attempt} failed"
        return subagent_record("done", status=status, error=error, usage=usage, tool_call_id=tool_call_id)  # type: ignore[arg-type]


def spent(tokens: int, cost: float | None) -> Usage:
    return Usage(input_tokens=tokens, output_tokens=1, requests=1, cost_usd=cost)


async def test_an_attempt_of_unknown_cost_makes_its_item_s_and_the_batch_s_cost_unknown(batches: Batches) -> None:
    script = {
        ("unpriced", 1): ("error", spent(100, None)),  # a model without a price
        ("unpriced", 2): ("completed", spent(20, 0.02)),
        ("priced", 1): ("timed_out", spent(300, 0.03)),
        ("priced", 2): ("completed", spent(40, 0.004)),
    }
    keys = [{"key": "unpriced", "prompt": "p"}, {"key": "priced", "prompt": "p"}]
    sub = batches.submit(USER, subagent_type="t", items=keys)
    async with worker(batches, Scripted(script)):
        await until(lambda: batches.get(USER, sub.batch.id).done)
    unpriced = batches.item(USER, sub.batch.id, "unpriced").usage
    assert unpriced == Usage(input_tokens=120, output_tokens=2, requests=2, cost_usd=None)
    priced = batches.item(USER, sub.batch.id, "priced").usage
    assert priced is not None and (priced.input_tokens, priced.requests) == (340, 2)
    assert priced.cost_usd == pytest.approx(0.034, rel=1e-12)
    batch = batches.get(USER, sub.batch.id).usage
    assert (batch.input_tokens, batch.output_tokens, batch.requests, batch.cost_usd) == (460, 4, 4, None)


async def test_a_retried_item_keeps_what_its_earlier_attempts_spent(batches: Batches) -> None:
    script = {("k", 1): ("error", spent(100, 0.01)), ("k", 2): ("completed", spent(20, 0.002))}
    sub = batches.submit(USER, subagent_type="t", items=[{"key": "k", "prompt": "p"}], max_attempts=1)
    async with worker(batches, Scripted(script)):
        await until(lambda: batches.get(USER, sub.batch.id).done)
        assert batches.item(USER, sub.batch.id, "k").status == "failed"
        assert batches.retry(USER, sub.batch.id, "k") == 1
        assert batches.item(USER, sub.batch.id, "k").usage == spent(100, 0.01)  # kept while it waits
        await until(lambda: batches.get(USER, sub.batch.id).done)
    item = batches.item(USER, sub.batch.id, "k")
    assert item.status == "succeeded" and item.usage is not None and item.record is not None
    assert (item.usage.input_tokens, item.usage.requests, item.record.usage.input_tokens) == (120, 2, 20)
    assert item.usage.cost_usd == pytest.approx(0.012, rel=1e-12)


def test_batch_export_and_items_show_every_attempt_s_usage(tmp_path: Path, store_url: str) -> None:
    """Through the CLI: the first attempt pays for one answer then fails, the second completes."""
    seen: Counter[str] = Counter()

    def answer(body: dict[str, Any]) -> Reply | Fault:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if tool_results(body):
            return Fault(400, "refused")
        seen[prompt] += 1
        if seen[prompt] == 1:
            return Reply(tool_calls=[("list_dir", {})], prompt_tokens=100, completion_tokens=5)
        return Reply(tool_calls=[("complete", {"summary": "done"})], prompt_tokens=12, completion_tokens=3)

    items = write_items(tmp_path / "items.jsonl", 2)
    with OpenAIServer(answer) as server:
        env = env_for(server.base_url, db=store_url)
        args = ["batch", "submit", str(items), "--type", "explore", "--model", "openai:m", "--max-attempts", "2"]
        done = run_cli(args, env, tmp_path)
        assert done.returncode == 0, done.stderr
        batch_id = done.stdout.strip().splitlines()[-1]
        lines = run_cli(["batch", "export", batch_id], env, tmp_path).stdout.splitlines()
        exported = [json.loads(line) for line in lines]
        listed = json.loads(run_cli(["batch", "items", batch_id, "--json"], env, tmp_path).stdout)
        status = json.loads(run_cli(["batch", "status", batch_id, "--json"], env, tmp_path).stdout)
    assert [(r["status"], r["attempts"]) for r in exported] == [("succeeded", 2)] * 2
    for row in exported:
        assert (row["usage"]["input_tokens"], row["usage"]["output_tokens"]) == (112, 8)  # both attempts
        assert row["record"]["usage"]["input_tokens"] == 12  # the last attempt's own
        assert row["usage"]["cost_usd"] is None  # a server on this machine has no price
    shown = listed["items"] if isinstance(listed, dict) else listed
    assert [i["usage"] for i in shown] == [r["usage"] for r in exported]
    assert status["usage"]["input_tokens"] == 2 * 112
