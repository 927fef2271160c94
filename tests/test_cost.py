"""Cost in US dollars, from `genai-prices`' own table: each model answer priced as it comes (cache
tokens included), summed per subagent and per run; a model without a price costs `null`, never a
guess; `--cost-budget` stops a run once it is spent."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

from delegate import RunLimits, Runtime
from delegate._events import Event
from delegate._usage import Usage
from delegate.models import OpenAIModel, Pricing, RetryPolicy
from delegate.models._prices import request_cost
from delegate.testing import is_lead
from tests.cli_support import run_cli
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.test_batch_cli import env_for
from tests.test_budgets import PARALLEL, busy
from tests.test_results import close, tool_results

MODEL = "gpt-4.1-mini"


def priced_model(server: OpenAIServer) -> OpenAIModel:
    """OpenAI's model at OpenAI's prices, reached through the loopback server (as through a proxy)."""
    return OpenAIModel(
        MODEL, base_url=server.base_url, api_key="k", retry=RetryPolicy(attempts=2), pricing=Pricing(provider="openai")
    )


def fan_out(body: dict[str, Any]) -> Reply | Fault:
    """A lead that starts two subagents, each answering after one file listing; prompts that hit
    the cache (the second turn of each agent reads 600 cached tokens)."""
    if is_lead(body):
        if not tool_results(body):
            task = {"subagent_type": "general-purpose", "description": "jobs", "prompts": ["one", "two"]}
            return Reply(tool_calls=[("task", task)], prompt_tokens=1_200, completion_tokens=40)
        return Reply(content="both done", prompt_tokens=2_000, completion_tokens=25, cached_tokens=600)
    if not tool_results(body):
        return Reply(tool_calls=[("list_dir", {})], prompt_tokens=900, completion_tokens=30)
    return Reply(content="listed", prompt_tokens=1_500, completion_tokens=12, cached_tokens=600)


def table_price(usage: dict[str, Any]) -> float:
    """What genai-prices itself says an answer with this usage costs."""
    tokens = PriceUsage(
        input_tokens=usage["input_tokens"],
        output_tokens=usage["output_tokens"],
        cache_read_tokens=usage["cache_read_tokens"],
        cache_write_tokens=usage["cache_write_tokens"],
    )
    return float(calc_price(tokens, MODEL, provider_id="openai").total_price)


async def test_each_answer_costs_what_genai_prices_says_and_subagents_and_the_run_add_up(tmp_path: Path) -> None:
    events: list[Event] = []
    with OpenAIServer(fan_out) as server:
        rt = Runtime(model=priced_model(server), workspace=tmp_path, store=False)
        result = await rt.run("go", sinks=[events.append])
        await close(rt)
    assert result.status == "completed"
    answers = [e for e in events if e.type == "model.response"]
    assert len(answers) == 6 and sum(e.data["usage"]["cache_read_tokens"] for e in answers) == 3 * 600
    for answer in answers:
        assert answer.data["usage"]["cost_usd"] == table_price(answer.data["usage"])
    for record in result.subagents:
        own = [table_price(e.data["usage"]) for e in answers if e.agent_id == record.id]
        assert record.usage.cost_usd == pytest.approx(sum(own), rel=1e-12)
    whole = sum(Decimal(str(table_price(e.data["usage"]))) for e in answers)
    assert result.usage.cost_usd == pytest.approx(float(whole), rel=1e-12)
    assert result.to_dict()["usage"]["cost_usd"] == result.usage.cost_usd


def test_anthropic_s_cached_tokens_are_priced_as_the_table_counts_them() -> None:
    """Anthropic reports cache reads and writes apart from `input_tokens`; the table counts them in."""
    usage = Usage(input_tokens=100, output_tokens=50, cache_read_tokens=1_000, cache_write_tokens=200, requests=1)
    cost = request_cost(Pricing(provider="anthropic", cache_apart=True), usage, "claude-sonnet-4-5")
    tokens = PriceUsage(input_tokens=1_300, output_tokens=50, cache_read_tokens=1_000, cache_write_tokens=200)
    assert cost == float(calc_price(tokens, "claude-sonnet-4-5", provider_id="anthropic").total_price)
    assert cost is not None and cost > 0


def test_a_model_without_a_price_costs_null_and_the_run_json_keeps_every_usage_field(tmp_path: Path) -> None:
    with OpenAIServer(fan_out) as server:  # a server on this machine: the table knows no price there
        done = run_cli(["run", "go", "--model", "openai:m", "--json"], env=env_for(server.base_url), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["usage"] == {
        "input_tokens": 1_200 + 2_000 + 2 * (900 + 1_500),
        "output_tokens": 40 + 25 + 2 * (30 + 12),
        "cache_read_tokens": 3 * 600,
        "cache_write_tokens": 0,
        "requests": 6,
        "requests_without_usage": 0,
        "cost_usd": None,
    }
    assert [s["usage"]["cost_usd"] for s in payload["subagents"]] == [None, None]
    shown = run_cli(["runs", "show", payload["run_id"]], env=env_for(server.base_url), cwd=tmp_path)
    assert "cost unknown" in shown.stdout


async def test_no_request_starts_once_the_cost_budget_is_spent(tmp_path: Path) -> None:
    events: list[Event] = []
    budget = 0.00005  # a few requests of 10 input and 5 output tokens each
    with OpenAIServer(busy) as server:
        rt = Runtime(
            model=priced_model(server), workspace=tmp_path, store=False, limits=RunLimits(max_parallel=PARALLEL)
        )
        result = await rt.run("go", sinks=[events.append], limits=replace(rt.limits, cost_budget=budget))
        await close(rt)
    spent, at_start = 0.0, []
    for event in events:
        if event.type == "model.request":
            at_start.append(spent)
        elif event.type == "model.response":
            spent += event.data["usage"]["cost_usd"]
    assert len(server.requests) == len(at_start)
    assert all(cost < budget for cost in at_start)  # each request started before the budget was spent
    assert result.usage.cost_usd is not None and result.usage.cost_usd >= budget
    assert (result.status, result.stop_reason) == ("aborted", "run_cost_budget")
    assert "cost budget" in (result.error or "")
    assert {s.stop_reason for s in result.subagents} == {"run_cost_budget"}


def test_a_cost_budget_on_a_model_without_a_price_stops_the_run_and_says_why(tmp_path: Path) -> None:
    with OpenAIServer(busy) as server:
        env = env_for(server.base_url)
        done = run_cli(["run", "go", "--model", "openai:m", "--json", "--cost-budget", "1"], env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    payload = json.loads(done.stdout)
    assert (payload["status"], payload["stop_reason"]) == ("aborted", "run_cost_budget")
    assert "openai:m has no price in genai-prices" in payload["error"]
    assert len(server.requests) == 1  # no request after the one whose cost nobody knows
    bad = run_cli(["run", "go", "--cost-budget", "0"], env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "--cost-budget" in bad.stderr


def test_a_usage_stored_before_costs_were_kept_reads_an_unknown_cost() -> None:
    assert Usage.from_dict({"input_tokens": 5, "output_tokens": 1, "requests": 1}).cost_usd is None
    assert Usage.from_dict({"requests": 0}).cost_usd == 0.0
    assert (Usage(cost_usd=0.5) + Usage(cost_usd=None, requests=1)).cost_usd is None
