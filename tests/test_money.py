"""Money and tokens that add up (issue 34, item 6): a request whose cost is not known is priced
unknown, never $0.00; a killed run's records show what it spent up to the kill; a cost budget
holds under parallel subagents, passed by no more than the documented bound."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from delegate import RunLimits, Runtime, Store
from delegate._events import Event
from delegate._usage import Usage
from delegate.models import Pricing
from delegate.models._prices import request_cost
from delegate.testing import is_lead
from tests.cli_support import delegate
from tests.durable_support import cli_env, only_run, wait_for
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_cost import MODEL, priced_model
from tests.test_results import close, tool_results

PARALLEL = 4
GROWTH = 10_000
"""The input tokens each turn of a subagent adds to its next request (what a big file read does)."""
OUTPUT = 100


def _price(input_tokens: int, output_tokens: int) -> float:
    cost = request_cost(
        Pricing(provider="openai"), Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1), MODEL
    )
    assert cost is not None
    return cost


def growing(body: dict[str, Any]) -> Reply:
    """A lead that starts four subagents at once; each lists the folder turn after turn, each
    request `GROWTH` input tokens bigger than its last (its context grows), until a budget ends it."""
    if is_lead(body):
        if not tool_results(body):
            prompts = [f"job {n}" for n in range(PARALLEL)]
            task = {"subagent_type": "general-purpose", "description": "jobs", "prompts": prompts}
            return Reply(tool_calls=[("task", task)], prompt_tokens=100, completion_tokens=20)
        return Reply(content="the lead answered", prompt_tokens=100, completion_tokens=20)
    turn = len(tool_results(body)) + 1
    return Reply(tool_calls=[("list_dir", {})], prompt_tokens=GROWTH * turn, completion_tokens=OUTPUT)


async def test_a_cost_budget_with_four_parallel_subagents_is_passed_by_no_more_than_its_bound(tmp_path: Path) -> None:
    # The budget was checked on answers only: every request that started while some money was left
    # ran, four at once here, each as big as its context: $0.05 ended near $0.10. Now each request
    # reserves what it is expected to cost (its agent's context so far and the run's average
    # answer) and none starts that the remainder cannot cover. The documented bound: per request
    # in flight, what it cost beyond that estimate (its new input and its answer).
    budget = 0.05
    events: list[Event] = []
    with OpenAIServer(growing) as server:
        rt = Runtime(
            model=priced_model(server), workspace=tmp_path, store=False, limits=RunLimits(max_parallel=PARALLEL)
        )
        result = await rt.run("go", sinks=[events.append], limits=replace(rt.limits, cost_budget=budget))
        await close(rt)
    bound = PARALLEL * _price(GROWTH, OUTPUT)
    spent = result.usage.cost_usd
    assert spent is not None
    assert {s.stop_reason for s in result.subagents} == {"run_cost_budget"}  # the budget ended them
    assert spent <= budget + bound, f"${spent:.4f} spent of ${budget}: past the bound ${bound:.4f}"
    answers = [e for e in events if e.type == "model.response"]
    assert sum(e.data["usage"]["cost_usd"] for e in answers) == pytest.approx(spent, rel=1e-12)  # each counted


def hung_subagent(body: dict[str, Any]) -> Reply:
    """The lead delegates (1,290 tokens); the subagent's request never ends."""
    if is_lead(body):
        if not tool_results(body):
            task = {"subagent_type": "general-purpose", "description": "job", "prompt": "do it"}
            return Reply(tool_calls=[("task", task)], prompt_tokens=1_200, completion_tokens=90)
        return Reply(content="done", prompt_tokens=1_300, completion_tokens=10)
    return Reply(content="never", dribble=0.5)


def test_a_killed_runs_records_show_what_it_spent_up_to_the_kill(tmp_path: Path) -> None:
    with OpenAIServer(hung_subagent) as server, Store.for_workspace(tmp_path) as store:
        proc = subprocess.Popen(
            delegate("run", "go", "--model", "openai:m", "--json", "-w", str(tmp_path)),
            env=cli_env(server.base_url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: len(server.requests) >= 2, what="the subagent's request")
            run = wait_for(lambda: only_run(store), what="the run")
            wait_for(lambda: any(e.type == "subagent.started" for e in store.events(run.id)), what="its start")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        shown = subprocess.run(
            delegate("runs", "show", run.id, "--json", "-w", str(tmp_path)),
            env=cli_env(server.base_url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        listed = subprocess.run(
            delegate("runs", "list", "--json", "-w", str(tmp_path)),
            env=cli_env(server.base_url),
            capture_output=True,
            text=True,
            timeout=60,
        )
    record = json.loads(shown.stdout)
    (line,) = json.loads(listed.stdout)
    assert record["status"] == "interrupted"
    for usage in (record["usage"], line["usage"]):
        assert (usage["input_tokens"], usage["output_tokens"]) == (1_200, 90)
        assert usage["requests"] >= 1


def test_a_request_cut_off_by_a_stop_is_priced_unknown_not_zero(tmp_path: Path) -> None:
    # A subagent stopped while its request was in flight: the provider may have billed that request,
    # and nothing says for how much. Its cost was $0.00; it is unknown (null), and so is the run's.
    seen = threading.Event()

    def answer(body: dict[str, Any]) -> Reply:
        if not is_lead(body):
            seen.set()
        return hung_subagent(body)

    async def go() -> Any:
        with OpenAIServer(answer) as server:
            rt = Runtime(model=priced_model(server), workspace=tmp_path, store=False)
            limits = replace(rt.limits, timeout=3.0)
            result = await rt.run("go", limits=limits)
            await close(rt)
            return result

    result = asyncio.run(go())
    assert seen.is_set()
    (sub,) = result.subagents
    assert sub.status == "timed_out"
    assert sub.usage.requests_without_usage == 1 and sub.usage.cost_usd is None
    assert result.usage.cost_usd is None  # what the run cost is not known: never $0.00 for it
