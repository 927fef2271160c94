"""Background subagents and follow-ups with fake models: the lead starts subagents that run while
it works, hears of each one once, waits for them, stops one, and sends a completed one a follow-up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from delegate import Event, Lead, RunLimits, Runtime
from delegate.cli._render import RunView
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply, respond

BACKGROUND_TOOLS = {"task_status", "task_wait", "task_stop", "task_message"}


def turns(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def last_result(request: ModelRequest, index: int = 0) -> str:
    """The last tool result the lead got (notices may come after it)."""
    return next(m for m in reversed(request.messages) if m.role == "tool").tool_results[index].content


def notices(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.name == "task_notification"]


def two_in_background(**extra: Any) -> ModelResponse:
    return call(
        "task",
        subagent_type="general-purpose",
        description="two jobs",
        prompts=["job a", "job b"],
        run_in_background=True,
        **extra,
    )


Lead_ = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]


def model_of(lead: Lead_, subagent: Lead_) -> FunctionModel:
    async def answer(request: ModelRequest) -> ModelResponse:
        found = lead(request) if is_lead(request) else subagent(request)
        return await found if asyncio.iscoroutine(found) else found  # type: ignore[return-value]

    return FunctionModel(answer)


def completing(request: ModelRequest) -> ModelResponse:
    return call("complete", summary=f"did {request.messages[0].text}")


async def test_a_lead_works_while_two_background_subagents_run_then_waits_and_gets_both(tmp_path: Path) -> None:
    worked = asyncio.Event()
    seen: dict[str, str] = {}

    def lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return two_in_background()
            case 1:
                seen["started"] = last_result(request)
                return call("write_file", path="own.md", content="the lead's own work")
            case 2:
                worked.set()
                return call("task_wait", timeout_s=60)
            case _:
                seen["waited"] = last_result(request)
                return reply("both done")

    async def subagent(request: ModelRequest) -> ModelResponse:
        await worked.wait()
        return completing(request)

    events: list[Event] = []
    rt = Runtime(model=model_of(lead, subagent), workspace=tmp_path, store=False, sinks=[events.append])
    result = await rt.run("do two jobs")

    assert result.status == "completed" and result.final == "both done"
    assert seen["started"].splitlines()[:2] == [
        "Started sub1 (general-purpose: two jobs [1/2]) in the background.",
        "Started sub2 (general-purpose: two jobs [2/2]) in the background.",
    ]
    assert "2 of 2 subagents ended" in seen["waited"]
    assert "Summary: did job a" in seen["waited"] and "Summary: did job b" in seen["waited"]
    assert [(s.id, s.status, s.background, s.messages) for s in result.subagents] == [
        ("sub1", "completed", True, 0),
        ("sub2", "completed", True, 0),
    ]
    order = [(e.type, e.agent_id, e.data.get("name")) for e in events]
    own_work = order.index(("tool.completed", "lead", "write_file"))
    ends = [i for i, (kind, _, _) in enumerate(order) if kind == "subagent.completed"]
    assert all(own_work < i for i in ends)  # the lead's own tool call ran while they did
    assert (tmp_path / "own.md").read_text() == "the lead's own work"


async def test_each_finished_background_subagent_is_noticed_exactly_once(tmp_path: Path) -> None:
    requests: list[ModelRequest] = []
    both_ended = asyncio.Event()
    ended: list[str] = []

    def sink(event: Event) -> None:
        if event.type == "subagent.completed":
            ended.append(event.agent_id)
            if len(ended) == 2:
                both_ended.set()

    async def lead(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        match turns(request):
            case 0:
                return two_in_background()
            case 1:
                await both_ended.wait()  # its next request comes after both ended
                return call("list_dir", path=".")
            case 2 | 3:
                return call("list_dir", path=".")
            case _:
                return reply("done")

    rt = Runtime(model=model_of(lead, completing), workspace=tmp_path, store=False, sinks=[sink])
    result = await rt.run("do two jobs")

    assert result.status == "completed"
    told = "\n".join(notices(requests[-1]))
    assert told.count("Background subagent sub1 ended") == 1
    assert told.count("Background subagent sub2 ended") == 1
    assert "Summary: did job a" in told and "Summary: did job b" in told
    assert notices(requests[1]) == [] and len(notices(requests[2])) == 1


async def test_a_lead_that_answers_while_subagents_run_gets_their_results_for_one_more_turn(tmp_path: Path) -> None:
    answered = asyncio.Event()
    seen: list[str] = []

    def lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return two_in_background()
            case 1:
                answered.set()
                return reply("started them; I am done")
            case _:
                seen.extend(notices(request))
                return reply("final: both jobs done")

    async def subagent(request: ModelRequest) -> ModelResponse:
        await answered.wait()
        return completing(request)

    rt = Runtime(model=model_of(lead, subagent), workspace=tmp_path, store=False)
    result = await rt.run("do two jobs")

    assert result.final == "final: both jobs done"
    assert [s.status for s in result.subagents] == ["completed", "completed"]
    assert "sub1 ended" in "".join(seen) and "sub2 ended" in "".join(seen)


async def test_task_stop_stops_one_subagent_while_its_sibling_completes(tmp_path: Path) -> None:
    never = asyncio.Event()
    b_works = asyncio.Event()
    stopped_text: list[str] = []

    async def lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return two_in_background()
            case 1:
                await b_works.wait()
                return call("task_stop", id="sub2", reason="not needed after all")
            case 2:
                stopped_text.append(last_result(request))
                return call("task_wait", ids=["sub1"])
            case _:
                return reply("done")

    async def subagent(request: ModelRequest) -> ModelResponse:
        if "job b" in request.messages[0].text:
            if turns(request) == 0:
                return call("list_dir", path=".")
            b_works.set()
            await never.wait()  # runs until stopped
        return completing(request)

    rt = Runtime(model=model_of(lead, subagent), workspace=tmp_path, store=False)
    result = await rt.run("do two jobs")

    first, second = result.subagents
    assert (first.status, first.stop_reason) == ("completed", "stop_tool")
    assert (second.status, second.stop_reason) == ("cancelled", "stopped")
    assert second.error == "stopped: not needed after all"
    assert second.usage.requests >= 1  # what it spent before the stop is kept
    assert stopped_text[0].startswith("Stopped sub2.")
    assert "[cancelled]" in stopped_text[0] and "not needed after all" in stopped_text[0]


async def follow_ups(tmp_path: Path, *messages: str) -> tuple[Any, dict[str, Any]]:
    """A run whose lead starts sub1 in the background ("count to 2"), waits for it, then sends it
    `messages` as follow-ups in one turn; what sub1 was told each time, and what the lead read."""
    seen: dict[str, Any] = {"conversations": []}

    def lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return call(
                    "task", subagent_type="general-purpose", description="count", prompt="count to 2",
                    run_in_background=True,
                )  # fmt: skip
            case 1:
                return call("task_wait")
            case 2:
                return respond([("task_message", {"id": "sub1", "message": m}) for m in messages])
            case _:
                seen["results"] = [last_result(request, i) for i in range(len(messages))]
                return reply("done")

    def subagent(request: ModelRequest) -> ModelResponse:
        said = [m.text for m in request.messages if m.role == "user"]
        seen["conversations"].append(said)
        return call("complete", summary=f"counted {said[-1]} ({len(said)} messages)")

    rt = Runtime(model=model_of(lead, subagent), workspace=tmp_path, store=False)
    return await rt.run("count"), seen


async def test_a_follow_up_continues_a_completed_subagents_own_conversation(tmp_path: Path) -> None:
    result, seen = await follow_ups(tmp_path, "now count to 3")

    assert seen["conversations"][-1] == ["count to 2", "now count to 3"]  # it sees its earlier turn
    assert "counted now count to 3 (2 messages)" in seen["results"][0]
    [record] = result.subagents
    assert (record.id, record.status, record.messages, record.steps) == ("sub1", "completed", 1, 2)
    assert record.usage.requests == 2


async def test_two_follow_ups_to_one_subagent_in_one_turn_run_one_and_refuse_the_other(tmp_path: Path) -> None:
    """A turn's calls run at once: the second `task_message` to the same subagent is refused
    before the first has begun (both ran, on one record, and the lead read the last one twice)."""
    result, seen = await follow_ups(tmp_path, "to 3", "to 4")

    assert seen["conversations"] == [["count to 2"], ["count to 2", "to 3"]]
    first, second = seen["results"]
    assert "counted to 3" in first
    assert second.startswith("Error: sub1 is still running")
    [record] = result.subagents
    assert (record.status, record.messages, record.steps, record.summary) == (
        "completed", 1, 2, "counted to 3 (2 messages)",
    )  # fmt: skip


async def test_a_follow_up_to_a_stopped_subagent_is_refused_with_a_way_out(tmp_path: Path) -> None:
    never = asyncio.Event()
    seen: list[str] = []

    def lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return call(
                    "task", subagent_type="general-purpose", description="slow", prompt="slow job",
                    run_in_background=True,
                )  # fmt: skip
            case 1:
                return call("task_stop", id="sub1")
            case 2:
                return call("task_message", id="sub1", message="go on")
            case _:
                seen.append(last_result(request))
                return reply("done")

    async def subagent(request: ModelRequest) -> ModelResponse:
        await never.wait()
        return completing(request)

    rt = Runtime(model=model_of(lead, subagent), workspace=tmp_path, store=False)
    await rt.run("slow")

    assert seen[0].startswith("Error: sub1 ended cancelled (stopped) and cannot be continued")
    assert "Start a new task" in seen[0]


async def test_background_tools_are_offered_once_a_subagent_runs_in_the_background(tmp_path: Path) -> None:
    offered: list[set[str]] = []

    def lead(request: ModelRequest) -> ModelResponse:
        offered.append({t.name for t in request.tools})
        return two_in_background() if turns(request) == 0 else reply("done")

    rt = Runtime(model=model_of(lead, completing), workspace=tmp_path, store=False)
    await rt.run("go")

    assert not offered[0] & BACKGROUND_TOOLS
    assert offered[1] >= BACKGROUND_TOOLS


async def test_a_lead_whose_tools_name_them_has_the_background_tools_from_the_start(tmp_path: Path) -> None:
    offered: list[set[str]] = []

    def lead(request: ModelRequest) -> ModelResponse:
        offered.append({t.name for t in request.tools})
        return reply("done")

    lead_def = Lead(tools=["read_file", "task", "task_status"])
    rt = Runtime(model=model_of(lead, completing), workspace=tmp_path, store=False, lead=lead_def)
    await rt.run("go")

    assert offered[0] >= BACKGROUND_TOOLS | {"task"}


async def test_background_subagents_count_against_the_runs_subagent_cap(tmp_path: Path) -> None:
    seen: list[str] = []

    def lead(request: ModelRequest) -> ModelResponse:
        if turns(request) == 0:
            return two_in_background()
        seen.append(last_result(request))
        return reply("done")

    rt = Runtime(model=model_of(lead, completing), workspace=tmp_path, store=False, limits=RunLimits(max_subagents=1))
    result = await rt.run("go")

    assert seen[0].startswith("Error: this run may start at most 1 subagents")
    assert result.subagents == []


async def test_cancelling_a_run_cancels_its_background_subagents(tmp_path: Path) -> None:
    both_started = asyncio.Event()
    started: list[str] = []
    never = asyncio.Event()
    ended: list[tuple[str, str]] = []

    def sink(event: Event) -> None:
        if event.type == "subagent.completed":
            ended.append((event.agent_id, str(event.data["status"])))

    async def lead(request: ModelRequest) -> ModelResponse:
        if turns(request) == 0:
            return two_in_background()
        await never.wait()
        return reply("never")

    async def subagent(request: ModelRequest) -> ModelResponse:
        started.append(request.messages[0].text)
        if len(started) == 2:
            both_started.set()
        await never.wait()
        return completing(request)

    rt = Runtime(model=model_of(lead, subagent), workspace=tmp_path, store=False, sinks=[sink])
    run = asyncio.create_task(rt.run("go"))
    await both_started.wait()
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert sorted(ended) == [("sub1", "cancelled"), ("sub2", "cancelled")]


async def test_a_follow_up_after_a_resume_continues_the_checkpointed_conversation(tmp_path: Path) -> None:
    waiting = asyncio.Event()
    never = asyncio.Event()
    seen: list[list[str]] = []

    async def first_lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return call(
                    "task", subagent_type="general-purpose", description="count", prompt="count to 2",
                    run_in_background=True,
                )  # fmt: skip
            case 1:
                return call("task_wait")
            case _:
                waiting.set()
                await never.wait()  # interrupted here
                return reply("never")

    def resumed_lead(request: ModelRequest) -> ModelResponse:
        return call("task_message", id="sub1", message="now count to 3") if turns(request) == 2 else reply("done")

    def subagent(request: ModelRequest) -> ModelResponse:
        seen.append([m.text for m in request.messages if m.role == "user"])
        steps = sum(1 for m in request.messages if m.role == "assistant")
        return call("complete", summary=f"counted after {steps} earlier turn(s)")

    first = Runtime(model=model_of(first_lead, subagent), workspace=tmp_path)
    run = asyncio.create_task(first.run("count"))
    await waiting.wait()
    first.interrupt()
    interrupted = await run
    await first.aclose()
    assert interrupted.status == "interrupted"

    again = Runtime(model=model_of(resumed_lead, subagent), workspace=tmp_path)
    result = await again.resume(interrupted.run_id)
    await again.aclose()

    assert result.status == "completed"
    assert seen == [["count to 2"], ["count to 2", "now count to 3"]]  # one first task, then the follow-up
    [record] = result.subagents
    assert (record.id, record.messages, record.steps) == ("sub1", 1, 2)
    assert record.summary == "counted after 1 earlier turn(s)"


async def test_the_live_tree_marks_background_subagents_and_counts_follow_ups(tmp_path: Path) -> None:
    def lead(request: ModelRequest) -> ModelResponse:
        match turns(request):
            case 0:
                return two_in_background()
            case 1:
                return call("task_wait")
            case 2:
                return call("task_message", id="sub1", message="once more")
            case _:
                return reply("done")

    view = RunView()
    await Runtime(model=model_of(lead, completing), workspace=tmp_path, store=False, sinks=[view]).run("go")
    console = Console(width=160, record=True)
    console.print(view.render())
    lines = console.export_text().splitlines()
    assert "general-purpose: two jobs [1/2] (background)" in lines[1] and "1 follow-up" in lines[1]
    assert "(background)" in lines[2] and "follow-up" not in lines[2]
