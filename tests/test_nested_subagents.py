"""Nested subagents (`RunLimits.max_depth`, a definition's `max_depth`): off by default, a
subagent delegates only where the depth allows, its child's result comes back to it, usage is
counted once, a stop of a parent ends its children, and a resume after a kill does not run a
finished grandchild again."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from delegate import Event, RunLimits, Runtime, Store, UserError
from delegate.agents import Subagent
from delegate.models import ModelRequest, ModelResponse, OpenAIModel
from delegate.run import _tracing
from delegate.server._runs import RunRequest
from delegate.testing import FunctionModel, call, is_lead, reply, respond
from tests.cli_support import run_cli
from tests.durable_support import cli_env, only_run, run_json, wait_for
from tests.loopback_openai import OpenAIServer, Reply
from tests.loopback_otlp import OTLPReceiver
from tests.test_background_cli import last_tool, turns, user_texts
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture

PARENT = dict(subagent_type="general-purpose", description="plan", prompt="parent job")
CHILD = dict(subagent_type="general-purpose", description="dig", prompt="grandchild job")


def first_user(request: ModelRequest) -> str:
    return next(m.text for m in request.messages if m.role == "user")


def tool_names(request: ModelRequest) -> set[str]:
    return {t.name for t in request.tools}


def last_result(request: ModelRequest) -> str:
    return request.messages[-1].tool_results[0].content


def tree_turn(request: ModelRequest) -> ModelResponse:
    """The lead delegates "parent job"; the parent delegates "grandchild job" (whether or not it
    has `task`) and completes with what came back; the grandchild completes at once. Each level's
    requests cost different tokens: lead 100+10, parent 20+2, grandchild 3+1."""
    if is_lead(request):
        if len(request.messages) == 1:
            return respond([("task", PARENT)], input_tokens=100, output_tokens=10)
        return reply("lead got: " + last_result(request), input_tokens=100, output_tokens=10)
    if first_user(request) == "grandchild job":
        return respond([("complete", {"summary": "found 42"})], input_tokens=3, output_tokens=1)
    if len(request.messages) == 1:
        return respond([("task", CHILD)], input_tokens=20, output_tokens=2)
    heard = last_result(request)
    return respond([("complete", {"summary": "parent heard: " + heard[:300]})], input_tokens=20, output_tokens=2)


def tree_model() -> FunctionModel:
    return FunctionModel(tree_turn)


async def test_by_default_a_subagent_has_no_task_tool_and_a_task_call_it_makes_anyway_is_refused(
    tmp_path: Path,
) -> None:
    model = tree_model()
    result = await Runtime(model=model, workspace=tmp_path, store=False).run("go")
    assert result.status == "completed"
    assert [(s.id, s.depth) for s in result.subagents] == [("sub1", 1)]  # no grandchild started
    parent = [r for r in model.requests if not is_lead(r)]
    assert all("task" not in tool_names(r) for r in parent)
    assert "there is no tool named 'task'" in last_result(parent[1])
    assert all(first_user(r) != "grandchild job" for r in model.requests)


async def test_at_depth_two_a_subagent_delegates_and_its_childs_result_reaches_it_not_the_lead(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    model = tree_model()
    rt = Runtime(model=model, workspace=tmp_path, store=False, limits=RunLimits(max_depth=2), sinks=[events.append])
    result = await rt.run("go")
    assert result.status == "completed"
    records = {s.id: s for s in result.subagents}
    assert (records["sub1"].depth, records["sub1"].parent_agent_id) == (1, "lead")
    assert (records["sub2"].depth, records["sub2"].parent_agent_id) == (2, "sub1")
    assert records["sub2"].summary == "found 42"
    assert "parent heard:" in records["sub1"].summary and "found 42" in records["sub1"].summary
    lead_saw = [last_result(r) for r in model.requests if is_lead(r) and len(r.messages) > 1]
    assert len(lead_saw) == 1 and "parent heard:" in lead_saw[0]  # through its parent, never to the lead directly
    grandchild = [r for r in model.requests if not is_lead(r) and first_user(r) == "grandchild job"]
    assert "task" not in tool_names(grandchild[0])  # depth 2 of 2: it cannot delegate further
    parent = next(r for r in model.requests if not is_lead(r) and first_user(r) == "parent job")
    assert "task" in tool_names(parent)
    started = {e.agent_id: (e.parent_agent_id, e.data["depth"]) for e in events if e.type == "subagent.started"}
    assert started == {"sub1": ("lead", 1), "sub2": ("sub1", 2)}
    ended = {e.agent_id: e.data["depth"] for e in events if e.type == "subagent.completed"}
    assert ended == {"sub1": 1, "sub2": 2}


async def test_usage_rolls_up_through_every_level_counted_exactly_once(tmp_path: Path) -> None:
    rt = Runtime(model=tree_model(), workspace=tmp_path, store=False, limits=RunLimits(max_depth=2))
    result = await rt.run("go")
    records = {s.id: s for s in result.subagents}
    assert (records["sub2"].usage.input_tokens, records["sub2"].usage.requests) == (3, 1)
    assert (records["sub1"].usage.input_tokens, records["sub1"].usage.requests) == (40, 2)  # its own requests
    assert result.usage.input_tokens == 2 * 100 + 2 * 20 + 3
    assert result.usage.output_tokens == 2 * 10 + 2 * 2 + 1
    assert result.usage.requests == 5


async def test_a_run_budget_is_a_ceiling_across_every_level(tmp_path: Path) -> None:
    rt = Runtime(model=tree_model(), workspace=tmp_path, store=False, limits=RunLimits(max_depth=2, max_requests=3))
    result = await rt.run("go")
    assert result.usage.requests <= 3
    assert result.status == "aborted" and result.stop_reason == "run_max_requests"


async def test_stopping_a_parent_cancels_its_running_child(tmp_path: Path) -> None:
    child_running = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", **PARENT, run_in_background=True)
            if len(request.messages) == 3:
                await asyncio.wait_for(child_running.wait(), 30)
                return call("task_stop", id="sub1", reason="enough")
            return reply("stopped")
        if first_user(request) == "grandchild job":
            child_running.set()
            await asyncio.sleep(30)  # until cancelled with its parent
            return call("complete", summary="too late")
        return call("task", **CHILD)

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False, limits=RunLimits(max_depth=2))
    result = await asyncio.wait_for(rt.run("go"), 60)
    records = {s.id: (s.status, s.stop_reason) for s in result.subagents}
    assert records == {"sub1": ("cancelled", "stopped"), "sub2": ("cancelled", "cancelled")}


async def test_a_definition_max_depth_limits_how_deep_below_it_its_subagents_go(tmp_path: Path) -> None:
    types = [Subagent(name="solo", description="works alone", max_depth=0)]

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="solo", description="d", prompt="parent job")
            return reply("ok")
        return call("complete", summary="done")

    model = FunctionModel(answer)
    rt = Runtime(model=model, workspace=tmp_path, store=False, limits=RunLimits(max_depth=3), subagents=types)
    await rt.run("go")
    assert all("task" not in tool_names(r) for r in model.requests if not is_lead(r))


def test_max_depth_below_one_or_negative_in_a_definition_is_refused() -> None:
    with pytest.raises(UserError, match="max_depth"):
        RunLimits(max_depth=0)
    with pytest.raises(UserError, match="max_depth"):
        Subagent(name="x", description="y", max_depth=-1)


# -- through the CLI, with the loopback OpenAI server ------------------------------------------


def tool_list(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


class Tree:
    """The lead delegates "parent job" (and, `solo`, "solo job" to the type `solo`); the parent
    delegates "grandchild job", which completes; the parent then holds until `release` before it
    completes with what it heard."""

    def __init__(self, *, solo: bool = False) -> None:
        self.solo = solo
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()
        self.holding = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.bodies.append(body)
        if is_lead(body):
            if turns(body) == 0:
                calls = [("task", {"subagent_type": "general-purpose", "description": "plan", "prompt": "parent job"})]
                if self.solo:
                    calls.append(("task", {"subagent_type": "solo", "description": "alone", "prompt": "solo job"}))
                return Reply(tool_calls=list(calls))
            return Reply(content="lead got: " + last_tool(body)[:200])
        job = user_texts(body)[0]
        if job in ("grandchild job", "solo job"):
            return Reply(tool_calls=[("complete", {"summary": "found 42"})], prompt_tokens=3, completion_tokens=1)
        if turns(body) == 0 and "task" in tool_list(body):
            return Reply(
                tool_calls=[
                    ("task", {"subagent_type": "general-purpose", "description": "dig", "prompt": "grandchild job"})
                ]
            )
        self.holding.set()
        self.release.wait(60)
        heard = last_tool(body)[:200] if turns(body) else "nothing"
        return Reply(tool_calls=[("complete", {"summary": "parent heard: " + heard})])

    def asked(self, job: str) -> int:
        return sum(1 for b in self.bodies if not is_lead(b) and user_texts(b)[0] == job)


def test_the_cli_max_depth_flag_nests_a_definitions_max_depth_0_does_not_and_runs_show_prints_the_tree(
    tmp_path: Path,
) -> None:
    agents = tmp_path / ".claude/agents"
    agents.mkdir(parents=True)
    (agents / "solo.md").write_text("---\nname: solo\ndescription: works alone\nmax_depth: 0\n---\nWork alone.\n")
    tree = Tree(solo=True)
    with OpenAIServer(tree) as server:
        env = cli_env(server.base_url, db=f"sqlite:///{tmp_path / 'd.db'}")
        args = ["run", "go", "--model", "openai:m", "--json", "--max-depth", "3", "-w", str(tmp_path)]
        result = run_json(run_cli(args, env=env))
        shown = run_cli(["runs", "show", result["run_id"], "-w", str(tmp_path)], env=env)
    assert [(s["id"], s["type"], s["depth"], s["parent_agent_id"]) for s in result["subagents"]] == [
        ("sub1", "general-purpose", 1, "lead"),
        ("sub2", "solo", 1, "lead"),
        ("sub3", "general-purpose", 2, "sub1"),
    ]
    solo = [b for b in tree.bodies if not is_lead(b) and user_texts(b)[0] == "solo job"]
    assert solo and all("task" not in tool_list(b) for b in solo)  # its max_depth: 0, under a run's 3
    assert shown.returncode == 0, shown.stderr
    lines = [line.split(" · ")[0] for line in shown.stdout.splitlines() if " [completed] " in line]
    assert lines[0].startswith("  sub1 [completed] general-purpose")
    assert lines[1].startswith("    sub3 [completed]") and "(depth 2, started by sub1)" in lines[1]
    assert lines[2].startswith("  sub2 [completed] solo")


def test_a_run_killed_after_a_grandchild_finished_resumes_without_running_it_again(
    procs: Processes, tmp_path: Path
) -> None:
    tree = Tree()
    tree.release.clear()
    db = f"sqlite:///{tmp_path / 'd.db'}"
    args = ("--model", "openai:m", "--json", "-w", str(tmp_path))
    try:
        with OpenAIServer(tree) as server, Store.open(db) as store:
            env = cli_env(server.base_url, db=db)
            proc = procs.spawn(["run", "go", "--max-depth", "2", *args], env, tmp_path / "run.log")
            wait_for(tree.holding.is_set, what="the parent to hold after its child")
            run = wait_for(lambda: only_run(store), what="the run to be stored")
            wait_for(lambda: any(s.id == "sub2" for s in store.subagent_records(run.id)), what="sub2's record")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            tree.release.set()
            result = run_json(run_cli(["run", "--resume", run.id, *args], env=env))
    finally:
        tree.release.set()
    assert result["status"] == "completed"
    records = {s["id"]: (s["status"], s["depth"], s["parent_agent_id"]) for s in result["subagents"]}
    assert records == {"sub1": ("completed", 1, "lead"), "sub2": ("completed", 2, "sub1")}
    assert tree.asked("grandchild job") == 1  # finished before the kill: given back, not asked again
    assert tree.asked("parent job") >= 3  # the parent ran again from its start


async def test_a_resumed_run_keeps_a_finished_parents_children_and_counts_their_usage(tmp_path: Path) -> None:
    waiting, never = asyncio.Event(), asyncio.Event()
    asked: list[str] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            asked.append(first_user(request))
            return tree_turn(request)
        if len(request.messages) == 1:
            return respond([("task", PARENT)], input_tokens=100, output_tokens=10)
        waiting.set()
        await never.wait()  # interrupted here, after the parent and its child finished
        return reply("never")

    first = Runtime(model=FunctionModel(answer), workspace=tmp_path, limits=RunLimits(max_depth=2))
    running = asyncio.create_task(first.run("go"))
    await asyncio.wait_for(waiting.wait(), 30)
    first.interrupt()
    interrupted = await running
    await first.aclose()
    assert interrupted.status == "interrupted"

    again = Runtime(model=tree_model(), workspace=tmp_path, limits=RunLimits(max_depth=2))
    result = await again.resume(interrupted.run_id)
    await again.aclose()
    assert result.status == "completed"
    assert asked == ["parent job", "grandchild job", "parent job"]  # none asked again
    assert {s.id: (s.depth, s.status) for s in result.subagents} == {"sub1": (1, "completed"), "sub2": (2, "completed")}
    assert result.usage.input_tokens - interrupted.usage.input_tokens == 100  # only the lead's last answer is new
    assert interrupted.usage.input_tokens == 100 + 2 * 20 + 3


def test_a_post_runs_max_depth_is_capped_by_the_servers() -> None:
    assert RunRequest(prompt="go", max_depth=3).limits(RunLimits()).max_depth == 1  # the server's default: none
    assert RunRequest(prompt="go", max_depth=3).limits(RunLimits(max_depth=2)).max_depth == 2
    assert RunRequest(prompt="go", max_depth=1).limits(RunLimits(max_depth=2)).max_depth == 1


def test_a_nested_subagents_span_hangs_under_its_parents_task_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    with OTLPReceiver() as collector:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        with OpenAIServer(Tree()) as server:
            model = OpenAIModel("gpt-test", base_url=server.base_url, api_key="k")
            rt = Runtime(model=model, workspace=tmp_path, store=False, limits=RunLimits(max_depth=2))
            result = asyncio.run(rt.run("go"))
            asyncio.run(model.aclose())
        assert [s.depth for s in result.subagents] == [1, 2]
        _tracing.flush_traces()
        lead = collector.one("invoke_agent lead")
        (parent, child) = sorted(collector.named("invoke_agent general-purpose"), key=lambda s: s.start_ns)
        assert (parent.attributes["delegate.subagent.depth"], child.attributes["delegate.subagent.depth"]) == (1, 2)
        lead_task = next(s for s in collector.named("execute_tool task") if s.span_id == parent.parent_span_id)
        assert lead_task.parent_span_id == lead.span_id
        parent_task = next(s for s in collector.named("execute_tool task") if s.span_id == child.parent_span_id)
        assert parent_task.parent_span_id == parent.span_id  # the grandchild under its parent's own call
        assert child.trace_id == lead.trace_id
