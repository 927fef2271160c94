"""Each agent of a workflow under limits of its own (issue 36, item 2): `agent(...,
timeout=, token_budget=, cost_budget=)` ends that agent alone when it passes them, its siblings
unaffected; the cost budget is kept on a priced model through the real OpenAI SDK."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from delegate import RunLimits, Runtime, Subagent
from delegate._usage import Usage
from delegate.models import Pricing
from delegate.models._prices import request_cost
from delegate.testing import call
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_cost import MODEL, priced_model
from tests.test_results import tool_results
from tests.workflow_support import by_task

GROWTH = 10_000
"""The input tokens each request of a spending agent adds to its next (its context grows)."""
OUTPUT = 100


def _task(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def spending(body: dict[str, Any]) -> Reply:
    """`spend ...` lists the folder turn after turn, each request `GROWTH` tokens bigger, until a
    limit ends it; `wait` answers after 3 s; anything else completes at once."""
    task = _task(body)
    if task.startswith("spend"):
        turn = len(tool_results(body)) + 1
        return Reply(tool_calls=[("list_dir", {})], prompt_tokens=GROWTH * turn, completion_tokens=OUTPUT)
    if task == "wait":
        time.sleep(3)
    return Reply(tool_calls=[("complete", {"summary": f"did {task}"})], prompt_tokens=50, completion_tokens=5)


def price(turn: int) -> float:
    cost = request_cost(
        Pricing(provider="openai"), Usage(input_tokens=GROWTH * turn, output_tokens=OUTPUT, requests=1), MODEL
    )
    assert cost is not None
    return cost


async def test_each_agent_is_held_to_its_own_timeout_token_and_cost_budget(tmp_path: Path) -> None:
    budget = 0.02  # a request costs about $0.004 more each turn: after two, a third could not be covered
    assert price(1) + price(2) < budget < price(1) + 2 * price(2)
    script = f"""
r = parallel([
    call("spend dollars", label="dollars", cost_budget={budget}),
    call("spend tokens", label="tokens", token_budget=25000),
    call("wait", label="slow", timeout=0.5),
    call("quick", label="free"),
])
[x if x is None else x["summary"] for x in r]
"""
    with OpenAIServer(spending) as server:
        async with Runtime(model=priced_model(server), workspace=tmp_path, limits=RunLimits(max_parallel=None)) as rt:
            result = await rt.run("", workflow=script)

    assert result.status == "completed" and result.result == [None, None, None, "did quick"]
    records = {s.description: s for s in result.subagents}
    dollars, tokens, slow = records["dollars"], records["tokens"], records["slow"]
    assert (dollars.status, dollars.stop_reason) == ("aborted", "cost_budget")
    assert dollars.usage.requests == 2 and dollars.usage.cost_usd == pytest.approx(price(1) + price(2))
    assert dollars.usage.cost_usd < budget and "cannot cover another request" in (dollars.error or "")
    assert (tokens.status, tokens.stop_reason) == ("aborted", "token_budget") and tokens.usage.requests == 2
    assert (slow.status, slow.stop_reason) == ("timed_out", "timeout")
    assert records["free"].status == "completed"
    verdicts = {a["label"]: a["status"] for a in result.workflow["agents"]}
    assert verdicts == {"dollars": "aborted", "tokens": "aborted", "slow": "timed_out", "free": "completed"}


async def test_an_agent_cost_budget_on_a_model_without_a_price_stops_it_after_its_first_answer(
    tmp_path: Path,
) -> None:
    def answer(task: str) -> Any:
        return call("list_dir") if task == "loop" else f"did {task}"

    script = 'r = parallel([call("loop", cost_budget=1.0), call("other")])\n[x is None for x in r]'
    async with Runtime(model=by_task(answer), workspace=tmp_path) as rt:
        result = await rt.run("", workflow=script)

    assert result.result == [True, False]
    stopped = next(s for s in result.subagents if s.description == "loop")
    assert (stopped.stop_reason, stopped.steps) == ("cost_budget", 1)
    assert "no price" in (stopped.error or "")


@pytest.mark.parametrize("bad", ["0", "-1", "'lots'", "True"])
async def test_a_limit_that_is_not_a_positive_number_is_a_value_error_in_the_script(tmp_path: Path, bad: str) -> None:
    script = f'agent("x", cost_budget={bad})'
    async with Runtime(model=by_task(lambda t: "ok"), workspace=tmp_path) as rt:
        result = await rt.run("", workflow=script)

    assert result.status == "error" and "cost_budget is a positive number" in (result.error or "")
    assert result.subagents == []


async def test_a_script_cannot_raise_the_limits_its_agent_type_sets(tmp_path: Path) -> None:
    """A hostile script (the lead's, or an HTTP user's) asks for more than the type allows: the
    type's own token budget still ends the agent."""
    capped = Subagent(name="capped", description="Spends.", instructions="Spend.", token_budget=25000)
    script = 'parallel([call("spend tokens", type="capped", label="greedy", token_budget=10**9, timeout=10**9)])'
    with OpenAIServer(spending) as server:
        async with Runtime(model=priced_model(server), workspace=tmp_path, subagents=[capped]) as rt:
            result = await rt.run("", workflow=script)
    (greedy,) = result.subagents
    assert (greedy.status, greedy.stop_reason) == ("aborted", "token_budget") and greedy.usage.requests == 2
