"""Stopping a workflow's agents (issue 36, item 5): one agent stopped from another process ends
`cancelled` and the script goes on without it; a resume never starts a stopped agent again; the
whole workflow stopped ends `cancelled`, its record saying which agents ended so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from delegate import RunLimits, Runtime, Store, UserError
from delegate._events import Event
from delegate.models import ModelRequest, ModelResponse
from delegate.run import stored_result
from delegate.testing import FunctionModel, call
from tests.workflow_support import task_of


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def started_agent(events: list[Event], label: str, timeout: float = 30.0) -> tuple[str, str]:
    """The run id and agent id of the workflow agent labelled `label`, once it started."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        for event in events:
            if event.type == "subagent.started" and event.data.get("description") == label:
                assert event.agent_id is not None
                return event.run_id, event.agent_id
        await asyncio.sleep(0.01)
    raise AssertionError(f"agent {label!r} never started")


async def stop_from_outside(ws: Path, run_id: str, agent_id: str, reason: str) -> None:
    """What `delegate runs stop` does from another process, once the agent's start is stored
    (a run's events reach the store within a flush of being shown live)."""
    with Store.for_workspace(ws) as other:
        for _ in range(100):
            try:
                await asyncio.to_thread(other.request_stop, run_id, agent_id, reason)
                return
            except UserError as exc:
                if not str(exc).startswith("no subagent"):
                    raise
            await asyncio.sleep(0.05)
    raise AssertionError(f"the start of {agent_id} never reached the store")


def waiting_on(asked: list[str], gates: dict[str, asyncio.Event]) -> Callable[[ModelRequest], object]:
    """A model whose agent of task T answers at once, unless `gates` holds T: then when it is set."""

    async def respond(request: ModelRequest) -> ModelResponse:
        task = task_of(request)
        asked.append(task)
        if task in gates:
            await gates[task].wait()
        return call("complete", summary=f"did {task}")

    return respond


async def test_stopping_one_agent_ends_it_cancelled_and_the_workflow_goes_on_without_it(ws: Path) -> None:
    asked: list[str] = []
    events: list[Event] = []
    never = asyncio.Event()
    model = FunctionModel(waiting_on(asked, {"stuck": never}))
    script = 'r = parallel(["one", "stuck", "two"])\nr2 = agent("after")\n[x if x is None else x["summary"] for x in r]'
    async with Runtime(model=model, workspace=ws, sinks=[events.append], limits=RunLimits(max_parallel=None)) as rt:
        going = asyncio.create_task(rt.run("", workflow=script))
        run_id, agent_id = await started_agent(events, "stuck")
        await stop_from_outside(ws, run_id, agent_id, "not needed after all")
        result = await asyncio.wait_for(going, 60)

    assert result.status == "completed"
    assert result.result == ["did one", None, "did two"]  # parallel() gives None in its place
    stopped = next(s for s in result.subagents if s.id == agent_id)
    assert (stopped.status, stopped.stop_reason) == ("cancelled", "stopped")
    assert "not needed after all" in (stopped.error or "")
    agents = {a["label"]: a for a in result.workflow["agents"]}
    assert agents["stuck"]["status"] == "cancelled" and agents["stuck"]["id"] == agent_id
    assert agents["after"]["status"] == "completed"  # the script went on
    assert result.workflow["line"].startswith("4 agents: 3 completed") and result.workflow["line"].endswith("1 failed")
    with Store.for_workspace(ws) as store:
        run = store.get_run(result.run_id)
        kept = {s.id: s.status for s in store.subagent_records(result.run_id)}
    assert run is not None and run.status == "completed" and kept[agent_id] == "cancelled"


async def test_a_resumed_workflow_never_starts_a_stopped_agent_again(ws: Path) -> None:
    asked: list[str] = []
    events: list[Event] = []
    never, later = asyncio.Event(), asyncio.Event()
    model = FunctionModel(waiting_on(asked, {"stuck": never, "slow": later}))
    script = 'r = parallel(["quick", "stuck", "slow"])\n[x if x is None else x["summary"] for x in r]'
    rt = Runtime(model=model, workspace=ws, sinks=[events.append], limits=RunLimits(max_parallel=None))
    going = asyncio.create_task(rt.run("", workflow=script))
    run_id, agent_id = await started_agent(events, "stuck")
    await started_agent(events, "slow")
    await stop_from_outside(ws, run_id, agent_id, "wrong question")
    while not any(e.type == "subagent.completed" and e.agent_id == agent_id for e in events):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # its record reaches the store
    rt.interrupt()  # the process stops with "slow" still running
    first = await asyncio.wait_for(going, 60)
    assert first.status == "interrupted"
    with Store.for_workspace(ws) as store:
        interrupted = {a["label"]: a["status"] for a in (store_result(store, run_id) or {}).get("agents", [])}
    assert interrupted == {"quick": "completed", "stuck": "cancelled", "slow": "interrupted"}

    asked.clear()
    later.set()
    resumed = await asyncio.wait_for(rt.resume(run_id), 60)
    await rt.aclose()

    assert asked == ["slow"]  # neither the finished nor the stopped agent was asked again
    assert resumed.status == "completed" and resumed.result == ["did quick", None, "did slow"]
    agents = {a["label"]: a for a in resumed.workflow["agents"]}
    assert agents["stuck"]["status"] == "cancelled" and agents["stuck"]["replayed"] is True
    assert agents["stuck"]["id"] == agent_id
    usage = resumed.usage  # quick and slow answered, each counted once; the stopped one's request was cut
    assert (usage.requests, usage.requests_without_usage, usage.input_tokens) == (3, 1, 20)


def store_result(store: Store, run_id: str) -> dict[str, object] | None:
    """The workflow record `runs show` reads for `run_id`."""
    found = stored_result(store, run_id)
    return None if found is None else found.workflow


async def test_stopping_the_whole_workflow_cancels_it_and_its_record_says_which_agents_ended_so(ws: Path) -> None:
    asked: list[str] = []
    events: list[Event] = []
    never = asyncio.Event()
    model = FunctionModel(waiting_on(asked, {"b": never, "c": never}))
    script = 'phase("first")\nagent("a")\nphase("second")\nr = parallel(["b", "c"])\nagent("never reached")'
    async with Runtime(model=model, workspace=ws, sinks=[events.append], limits=RunLimits(max_parallel=None)) as rt:
        going = asyncio.create_task(rt.run("", workflow=script))
        run_id, _ = await started_agent(events, "c")
        await started_agent(events, "b")
        with Store.for_workspace(ws) as other:  # what `delegate runs cancel` and the HTTP API do
            await asyncio.to_thread(other.request_cancel, run_id)
        result = await asyncio.wait_for(going, 60)

        assert result.status == "cancelled"
        assert "never reached" not in asked
        with pytest.raises(UserError):  # a cancelled run has ended: nothing to resume
            await rt.resume(run_id)

    record = result.workflow
    assert record is not None and record["status"] == "cancelled"
    assert {a["label"]: a["status"] for a in record["agents"]} == {"a": "completed", "b": "cancelled", "c": "cancelled"}
    assert record["line"] == "3 agents: 1 completed (no acceptance criteria to check), 2 failed"
    assert [p["name"] for p in record["phases"]] == ["first", "second"]
    with Store.for_workspace(ws) as store:
        run = store.get_run(run_id)
        statuses = sorted(s.status for s in store.subagent_records(run_id))
        shown = store_result(store, run_id)
    assert run is not None and run.status == "cancelled"
    assert statuses == ["cancelled", "cancelled", "completed"]
    assert shown == record  # `runs show` reads the same record
