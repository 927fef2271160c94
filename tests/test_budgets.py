"""Run-wide budgets (`token_budget`, `max_requests`) over the lead and its subagents together,
through the `openai:` adapter against the loopback server, with subagents running in parallel."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from delegate import RunLimits, Runtime, RuntimeSettings, Store, UserError
from delegate._events import Event
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, call, is_lead
from tests.cli_support import run_cli
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.loopback_server import LiveServer
from tests.test_batch_cli import env_for
from tests.test_results import close, openai_model, tool_results
from tests.test_server_api import client, read_events, start

PARALLEL = 4


def busy(body: dict[str, Any]) -> Reply | Fault:
    """A lead that starts PARALLEL subagents at once; each lists the folder forever (10 + 5 tokens
    a request), so only a budget ends them."""
    if is_lead(body):
        if not tool_results(body):
            prompts = [f"job {n}" for n in range(PARALLEL)]
            return Reply(
                tool_calls=[("task", {"subagent_type": "general-purpose", "description": "jobs", "prompts": prompts})]
            )
        return Reply(content="the lead answered after all")
    return Reply(tool_calls=[("list_dir", {})])


def starts_and_spending(events: list[Event]) -> list[int]:
    """The run's tokens counted so far when each model request started, in order."""
    spent, at_start = 0, []
    for event in events:
        if event.type == "model.request":
            at_start.append(spent)
        elif event.type == "model.response":
            spent += event.data["usage"]["input_tokens"] + event.data["usage"]["output_tokens"]
    return at_start


async def test_no_request_starts_once_the_token_budget_is_spent(tmp_path: Path) -> None:
    events: list[Event] = []
    with OpenAIServer(busy) as server:
        rt = Runtime(
            model=openai_model(server), workspace=tmp_path, store=False, limits=RunLimits(max_parallel=PARALLEL)
        )
        result = await rt.run("go", sinks=[events.append], limits=replace(rt.limits, token_budget=200))
        await close(rt)
    at_start = starts_and_spending(events)
    assert len(server.requests) == len(at_start)  # every request the server saw, the run counted
    assert all(spent < 200 for spent in at_start)  # and each one started before the budget was spent
    # it went on until what was left could not cover another request (15 tokens each, reserved
    # before each starts: see `RunBudget`), and no further
    assert 200 - 2 * 15 < result.usage.total_tokens <= 200
    assert (result.status, result.stop_reason) == ("aborted", "run_token_budget")
    assert "token budget" in (result.error or "")
    subagents = result.subagents
    assert len(subagents) == PARALLEL and {s.stop_reason for s in subagents} == {"run_token_budget"}
    assert {s.status for s in subagents} == {"aborted"}
    assert "the lead answered" not in result.final


async def test_the_request_budget_counts_the_lead_and_every_subagent(tmp_path: Path) -> None:
    events: list[Event] = []
    with OpenAIServer(busy) as server:
        rt = Runtime(
            model=openai_model(server), workspace=tmp_path, store=False, limits=RunLimits(max_parallel=PARALLEL)
        )
        result = await rt.run("go", sinks=[events.append], limits=replace(rt.limits, max_requests=9))
        await close(rt)
    assert len(server.requests) == 9
    assert sum(e.type == "model.request" for e in events) == 9
    assert (result.status, result.stop_reason) == ("aborted", "run_max_requests")
    assert result.usage.requests == 9
    assert sum(s.steps for s in result.subagents) == 8  # the lead made one request, its subagents the rest


async def test_a_budget_that_is_not_spent_changes_nothing(tmp_path: Path) -> None:
    def answer(body: dict[str, Any]) -> Reply | Fault:
        return Reply(content="done")

    with OpenAIServer(answer) as server:
        rt = Runtime(
            model=openai_model(server),
            workspace=tmp_path,
            store=False,
            limits=RunLimits(token_budget=1_000, max_requests=5),
        )
        result = await rt.run("go")
        await close(rt)
    assert (result.status, result.stop_reason, result.final) == ("completed", "final_answer", "done")


@pytest.mark.parametrize("limits", [{"token_budget": 0}, {"max_requests": -1}, {"max_requests": True}])
def test_a_budget_must_be_a_whole_number_of_at_least_one(tmp_path: Path, limits: dict[str, Any]) -> None:
    with pytest.raises(UserError, match="give a whole number of at least 1, or None for no limit"):
        Runtime(model="test:echo", workspace=tmp_path, store=False, limits=RunLimits(**limits))


def test_delegate_run_takes_both_budgets_and_exits_1_when_one_is_spent(tmp_path: Path) -> None:
    with OpenAIServer(busy) as server:
        env = env_for(server.base_url) | {"OPENAI_API_KEY": "k"}
        done = subprocess.run(
            [sys.executable, "-m", "delegate", "run", "go", "--model", "openai:m", "--json", "--max-requests", "5"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    payload = json.loads(done.stdout)
    assert (payload["status"], payload["stop_reason"]) == ("aborted", "run_max_requests")
    assert len(server.requests) == 5
    bad = subprocess.run(
        [sys.executable, "-m", "delegate", "run", "go", "--token-budget", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--token-budget" in bad.stderr


def test_post_runs_takes_both_budgets(tmp_path: Path, store: Store) -> None:
    token = store.add_user("alice")[1]
    with OpenAIServer(busy) as upstream:
        model = openai_model(upstream)
        config = ServerSettings(
            runtime=RuntimeSettings(workspace=tmp_path), model=lambda name: model, run_batches=False
        )
        with LiveServer(create_app(config, store=store)) as server, client(server, token) as api:
            run_id = start(api, "go", max_requests=3)
            read_events(api, f"/runs/{run_id}/events")
            run = api.get(f"/runs/{run_id}").json()
            refused = api.post("/runs", json={"prompt": "go", "token_budget": 0})
        asyncio.run(model.aclose())
    assert (run["status"], run["stop_reason"]) == ("aborted", "run_max_requests")
    assert {s["stop_reason"] for s in run["subagents"]} == {"run_max_requests"}
    assert len(upstream.requests) == 3
    assert refused.status_code == 422 and "token_budget" in refused.text


def test_a_batch_items_budget_caps_what_its_subagent_spends(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(
        json.dumps({"key": "capped", "prompt": "job", "max_requests": 2})
        + "\n"
        + json.dumps({"key": "free", "prompt": "job done"})
        + "\n"
    )

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if tool_results(body) and "done" in json.dumps(body["messages"][1]):
            return Reply(tool_calls=[("complete", {"summary": "finished"})])
        return Reply(tool_calls=[("list_dir", {})])

    with OpenAIServer(responder) as server:
        env = env_for(server.base_url)
        submitted = run_cli(
            ["batch", "submit", str(items), "--type", "general-purpose", "--model", "openai:m", "--max-attempts", "1"],
            env,
            tmp_path,
        )
        batch_id = submitted.stdout.strip().splitlines()[-1]
        exported = run_cli(["batch", "export", batch_id], env, tmp_path)
    rows = {row["key"]: row for row in map(json.loads, exported.stdout.splitlines())}
    assert (rows["capped"]["status"], rows["capped"]["outcome"], rows["capped"]["steps"]) == ("failed", "aborted", 2)
    assert "model requests" in rows["capped"]["error"]
    assert (rows["free"]["status"], rows["free"]["steps"]) == ("succeeded", 2)


def test_subagents_running_when_the_runs_deadline_passes_end_timed_out_with_their_usage(tmp_path: Path) -> None:
    never = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            prompts = [f"job {n}" for n in range(PARALLEL)]
            return call("task", subagent_type="general-purpose", description="jobs", prompts=prompts)
        if len(request.messages) == 1:
            return call("list_dir")
        await never.wait()  # each subagent's second request is still in flight at the deadline
        raise AssertionError("unreachable")

    events: list[Event] = []
    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, limits=RunLimits(timeout=1.0, max_parallel=PARALLEL))
    result = rt.run_sync("go", sinks=[events.append])
    assert (result.status, result.stop_reason) == ("timed_out", "timeout")
    assert len(result.subagents) == PARALLEL
    for sub in result.subagents:
        assert (sub.status, sub.stop_reason) == ("timed_out", "run_timeout")
        assert sub.error == "the run's deadline (1s) passed while it ran"
        answered = [e for e in events if e.type == "model.response" and e.agent_id == sub.id]
        assert sub.usage.output_tokens == sum(e.data["usage"]["output_tokens"] for e in answered)
        assert (sub.usage.requests, sub.usage.requests_without_usage) == (len(answered) + 1, 1)  # one cut off
    ended = {e.agent_id: e.data["status"] for e in events if e.type == "agent.completed"}
    assert ended == {"lead": "timed_out", **{s.id: "timed_out" for s in result.subagents}}
    with Store.for_workspace(tmp_path) as store:
        stored = store.subagent_records(result.run_id)
    assert [(s.status, s.stop_reason) for s in stored] == [("timed_out", "run_timeout")] * PARALLEL


def test_a_request_in_flight_at_a_timeout_or_a_cancel_counts_as_a_request_whose_tokens_are_unknown(
    tmp_path: Path,
) -> None:
    never = asyncio.Event()
    asked: list[int] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        asked.append(len(request.messages))
        if len(request.messages) == 1:
            return call("list_dir")
        await never.wait()  # the second request is in flight when the deadline passes
        raise AssertionError("unreachable")

    events: list[Event] = []
    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, limits=RunLimits(timeout=0.5))
    result = rt.run_sync("go", sinks=[events.append])
    assert result.status == "timed_out" and len(asked) == 2
    assert sum(e.type == "model.request" for e in events) == 2
    answered = [e.data["usage"] for e in events if e.type == "model.response"]
    assert len(answered) == 1  # one answer came back; the other request got none
    assert (result.usage.requests, result.usage.requests_without_usage) == (2, 1)
    assert result.usage.input_tokens == answered[0]["input_tokens"]  # no token made up for the cut-off one
    assert result.usage.output_tokens == answered[0]["output_tokens"]
    with Store.for_workspace(tmp_path) as store:
        stored = store.get_run(result.run_id)
    assert stored is not None and (stored.usage.requests, stored.usage.requests_without_usage) == (2, 1)
