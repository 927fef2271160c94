"""A run's caps on its subagents hold across its workflows (issue 34, round four): a lead that
calls `workflow` again gets what is left of the run's `workflow_agents`, not a fresh allowance;
workflow agents count against `max_subagents` beside the lead's `task` subagents; and a resumed
run counts the agents its store holds, even where a changed script runs others."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from delegate import RunLimits, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from delegate.workflows import Workflow
from tests.workflow_support import task_of

THREE = "r = parallel([call('t' + str(i), label='t' + str(i)) for i in range(3)])\nlen([x for x in r if x])"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def tool_texts(request: ModelRequest) -> list[str]:
    """What the lead's tool calls gave back so far, in order."""
    return [str(getattr(p, "content", "")) for m in request.messages if m.role == "tool" for p in m.parts]


def lead_of(*calls: ModelResponse, seen: list[str]) -> FunctionModel:
    """A model whose lead makes `calls` one a turn (keeping what each gave back in `seen`), then
    ends; whose subagents complete at once."""

    def respond(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            return call("complete", summary=f"did {task_of(request)}")
        results = tool_texts(request)
        if results:
            seen.append(results[-1])
        return calls[len(results)] if len(results) < len(calls) else reply("done")

    return FunctionModel(respond)


async def test_a_lead_that_calls_workflow_again_gets_only_what_is_left_of_the_runs_workflow_agents(ws: Path) -> None:
    seen: list[str] = []
    again = call("workflow", script=THREE, description="three agents")
    model = lead_of(again, again, again, seen=seen)
    async with Runtime(model=model, workspace=ws, limits=RunLimits(workflow_agents=4, max_parallel=None)) as rt:
        result = await rt.run("run it three times")

    assert result.status == "completed"
    assert len(result.subagents) == 4  # not 3 x 3: the cap is the run's
    first, second, third = seen
    assert first.startswith("3 agents: 3 completed")
    assert second.startswith("1 agent: 1 completed") and "2 not started (budget or agent cap)" in second
    assert "0 agents" in third and "3 not started" in third


async def test_workflow_agents_count_against_max_subagents_with_the_leads_task_subagents(ws: Path) -> None:
    seen: list[str] = []
    model = lead_of(
        call("task", subagent_type="general-purpose", prompts=["a", "b"], description="two"),
        call("workflow", script=THREE, description="three agents"),
        call("task", subagent_type="general-purpose", prompt="c", description="one more"),
        seen=seen,
    )
    async with Runtime(model=model, workspace=ws, limits=RunLimits(max_subagents=3, max_parallel=None)) as rt:
        result = await rt.run("delegate")

    assert result.status == "completed"
    assert [s.description for s in result.subagents] == ["two [1/2]", "two [2/2]", "t0"]
    _, workflow, refused = seen
    assert "1 agent: 1 completed" in workflow and "2 not started" in workflow
    assert refused.startswith("Error: this run may start at most 3 subagents and has started 3")


async def test_an_agent_past_the_cap_raises_in_the_script_naming_the_cap(ws: Path) -> None:
    script = 'agent("one")\nagent("two")'
    model = FunctionModel(lambda r: call("complete", summary="ok"))
    async with Runtime(model=model, workspace=ws, limits=RunLimits(workflow_agents=1)) as rt:
        result = await rt.run("", workflow=script)

    assert result.status == "error"
    assert "line 2" in (result.error or "") and "at most 1 workflow agents (workflow_agents)" in (result.error or "")


async def test_a_resumed_workflow_counts_the_agents_its_store_holds_even_when_its_script_changed(ws: Path) -> None:
    """The first attempt ran two agents and was stopped while a third waited; the resume runs a
    changed script whose agents are all new: only one more may start under a cap of three."""
    asked: list[str] = []
    release = asyncio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        task = task_of(request)
        asked.append(task)
        if task == "stuck":
            await release.wait()
        return call("complete", summary=f"did {task}")

    limits = RunLimits(workflow_agents=3, max_parallel=None)
    rt = Runtime(model=FunctionModel(respond), workspace=ws, store=str(ws.parent / "store.db"), limits=limits)
    going = asyncio.create_task(rt.run("", workflow='parallel(["a", "b"])\nagent("stuck")'))
    deadline = asyncio.get_running_loop().time() + 30
    while "stuck" not in asked:
        assert asyncio.get_running_loop().time() < deadline, "the third agent never started"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # the finished agents' records reach the store
    rt.interrupt()
    first = await asyncio.wait_for(going, 30)
    assert first.status == "interrupted"

    asked.clear()
    release.set()
    changed = Workflow(script='r = parallel(["x", "y", "z"])\nlen([v for v in r if v])')
    again = await asyncio.wait_for(rt.resume(first.run_id, workflow=changed), 30)
    await rt.aclose()

    assert again.status == "completed" and again.result == 1
    assert asked == ["x"]
    assert again.workflow["counts"]["not_started"] == 2
