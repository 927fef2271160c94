"""The turn loop, driven by the scripted model."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from delegate import (
    Compaction,
    Event,
    EventSink,
    LoopSettings,
    Message,
    Tool,
    ToolCallPart,
    ToolContext,
    ToolError,
    ToolResultPart,
    Usage,
    Workspace,
    tool,
)
from delegate.loop import AgentSpec, run_agent
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, ScriptedModel, call, reply, respond
from delegate.tools import ToolReturn


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@tool
async def slow(ctx: ToolContext, seconds: float) -> str:
    """Sleep, then say which call this was."""
    await asyncio.sleep(seconds)
    return f"slept in {ctx.tool_call_id}"


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


@tool
def refuse() -> str:
    """Fails the way tools should."""
    raise ToolError("not today")


@tool(stop=True)
def finish(answer: str) -> ToolReturn:
    """Stop with an answer."""
    return ToolReturn(content="ok", data={"answer": answer})


def make_ctx(tmp_path: Path, events: list[Event] | None = None, *, emit: EventSink | None = None) -> ToolContext:
    sink = emit or (events.append if events is not None else (lambda e: None))
    return ToolContext(run_id="r1", agent_id="lead", workspace=Workspace.open(tmp_path), emit=sink)


def spec(model: Any, tools: list[Any], **kw: Any) -> AgentSpec:
    return AgentSpec(name="t", instructions="sys", model=model, tools=tools, **kw)


async def test_a_reply_without_tool_calls_is_the_final_answer(tmp_path: Path) -> None:
    model = ScriptedModel([reply("hello")])
    result = await run_agent(spec(model, []), make_ctx(tmp_path), [Message.user("hi")])
    assert (result.status, result.stop_reason, result.final, result.steps) == (
        "completed",
        "final_answer",
        "hello",
        1,
    )
    model.assert_complete()


async def test_tool_results_come_back_in_call_order_and_usage_is_summed(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            respond([("slow", {"seconds": 0.05}), ("add", {"a": 2, "b": 3})], input_tokens=7, output_tokens=3),
            reply("5"),
        ]
    )
    result = await run_agent(spec(model, [slow, add]), make_ctx(tmp_path), [Message.user("go")])
    results = model.requests[1].messages[-1].tool_results
    assert [r.name for r in results] == ["slow", "add"]
    assert results[1].content == "5"
    assert result.usage == Usage(input_tokens=17, output_tokens=8, requests=2, cost_usd=None)  # a fake has no price


def test_usage_as_json_names_every_field_and_reads_back_equal() -> None:
    usage = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4, requests=5)
    assert list(usage.to_dict()) == [f.name for f in dataclasses.fields(Usage)]
    assert Usage.from_dict(usage.to_dict()) == usage


async def test_tool_calls_of_one_turn_run_concurrently(tmp_path: Path) -> None:
    gathered = asyncio.Barrier(5)  # passed only when all five calls are running at once

    @tool
    async def meet() -> str:
        """Wait for the other calls of the turn."""
        try:
            async with asyncio.timeout(30):  # one after another, the first would wait for ever
                await gathered.wait()
        except TimeoutError:
            return "alone"
        return "met"

    model = ScriptedModel([respond([("meet", {})] * 5), reply("done")])
    await run_agent(spec(model, [meet]), make_ctx(tmp_path), [Message.user("go")])
    assert [r.content for r in model.requests[1].messages[-1].tool_results] == ["met"] * 5


async def test_failures_become_error_results_the_model_reads(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            respond([("explode", {}), ("refuse", {}), ("nope", {}), ("add", {"a": "x", "b": 1})]),
            reply("recovered"),
        ]
    )
    result = await run_agent(spec(model, [explode, refuse, add]), make_ctx(tmp_path), [Message.user("go")])
    errors = model.requests[1].messages[-1].tool_results
    assert all(r.is_error for r in errors)
    assert "RuntimeError: kaboom" in errors[0].content
    assert errors[1].content == "Error: not today"
    assert "no tool named 'nope'" in errors[2].content and "add" in errors[2].content
    assert "a:" in errors[3].content
    assert result.final == "recovered"


async def test_malformed_tool_arguments_are_reported_to_the_model(tmp_path: Path) -> None:
    from delegate import ToolCallPart

    bad = ModelResponse(parts=[ToolCallPart(id="c1", name="add", raw_arguments='{"a": 1,')], finish_reason="tool_use")
    model = ScriptedModel([bad, reply("ok")])
    await run_agent(spec(model, [add]), make_ctx(tmp_path), [Message.user("go")])
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error and "not a valid JSON object" in result.content


async def test_a_stop_tool_ends_the_agent_with_its_return(tmp_path: Path) -> None:
    model = ScriptedModel([call("finish", answer="42")])
    result = await run_agent(spec(model, [finish]), make_ctx(tmp_path), [Message.user("go")])
    assert result.stop_reason == "stop_tool"
    assert result.stop_return is not None and result.stop_return.data == {"answer": "42"}


async def test_a_failed_stop_tool_call_does_not_stop(tmp_path: Path) -> None:
    model = ScriptedModel([call("finish"), reply("gave up")])
    result = await run_agent(spec(model, [finish]), make_ctx(tmp_path), [Message.user("go")])
    assert result.stop_reason == "final_answer"


async def test_the_step_limit_aborts(tmp_path: Path) -> None:
    model = FunctionModel(lambda r: call("add", a=1, b=1))
    result = await run_agent(spec(model, [add], max_steps=3), make_ctx(tmp_path), [Message.user("go")])
    assert (result.status, result.stop_reason, result.steps) == ("aborted", "max_steps", 3)


async def test_the_timeout_ends_with_timed_out(tmp_path: Path) -> None:
    model = FunctionModel(lambda r: call("slow", seconds=10))
    result = await run_agent(spec(model, [slow], timeout=0.2), make_ctx(tmp_path), [Message.user("go")])
    assert (result.status, result.stop_reason) == ("timed_out", "timeout")


async def test_the_token_budget_aborts(tmp_path: Path) -> None:
    model = FunctionModel(lambda r: respond([("add", {"a": 1, "b": 1})], input_tokens=60, output_tokens=0))
    result = await run_agent(spec(model, [add], token_budget=100), make_ctx(tmp_path), [Message.user("go")])
    assert (result.status, result.stop_reason, result.steps) == ("aborted", "token_budget", 2)


async def test_cancellation_propagates_and_usage_so_far_is_kept(tmp_path: Path) -> None:
    model = ScriptedModel([respond([("slow", {"seconds": 10})], input_tokens=11, output_tokens=1)])
    started = asyncio.Event()
    ctx = make_ctx(tmp_path, emit=lambda e: started.set() if e.type == "tool.started" else None)
    task = asyncio.create_task(run_agent(spec(model, [slow]), ctx, [Message.user("go")]))
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ctx.usage.input_tokens == 11


async def test_every_step_emits_events_that_name_the_agent(tmp_path: Path) -> None:
    events: list[Event] = []
    model = ScriptedModel([call("add", a=1, b=2), reply("3")])
    await run_agent(spec(model, [add]), make_ctx(tmp_path, events), [Message.user("go")])
    assert [e.type for e in events] == [
        "agent.started",
        "model.request",
        "model.response",
        "tool.started",
        "tool.completed",
        "model.request",
        "model.response",
        "agent.completed",
    ]
    assert {e.agent_id for e in events} == {"lead"}
    assert events[3].tool_call_id is not None


async def test_compaction_replaces_old_turns_and_keeps_what_tools_marked(tmp_path: Path) -> None:
    @tool
    def note(text: str) -> ToolReturn:
        """Remember."""
        return ToolReturn(content=f"long output {text}" * 10, keep=f"KEEP {text}")

    turns = 0

    def answer(request: ModelRequest) -> ModelResponse:
        nonlocal turns
        if request.system.startswith("You compact"):
            return reply("SUMMARY of earlier work")
        turns += 1
        if turns < 6:
            return respond([("note", {"text": str(turns)})], input_tokens=400 * (turns + 1), output_tokens=10)
        return reply("done")

    model = FunctionModel(answer)
    agent = spec(model, [note], loop=LoopSettings(compaction=Compaction(max_context_tokens=1000, keep_recent=2)))
    result = await run_agent(agent, make_ctx(tmp_path), [Message.user("the task")])
    assert result.final == "done"
    compaction_requests = [r for r in model.requests if r.system.startswith("You compact")]
    assert compaction_requests
    last = model.requests[-1].messages
    assert last[0].text == "the task"
    summary = last[1]
    assert summary.text.startswith("Historical conversation summary:\nSUMMARY")
    assert "KEEP 1" in summary.text and "KEEP 4" in summary.text
    assert last[2].role == "assistant"


def test_tool_schema_comes_from_the_signature() -> None:
    assert add.parameters["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert add.parameters["required"] == ["a", "b"]
    assert add.description == "Add two integers."
    assert "ctx" not in slow.parameters["properties"]


async def test_tools_made_from_one_function_defined_anew_keep_their_own_defaults(tmp_path: Path) -> None:
    def make(greeting: str) -> Tool:
        def greet(name: str, word: str = greeting) -> str:
            """Greet someone."""
            return f"{word} {name}"

        return Tool.from_function(greet)

    hello, hi = make("hello"), make("hi")
    ctx = make_ctx(tmp_path)
    assert (await hello.run(ctx, {"name": "ada"})).content == "hello ada"
    assert (await hi.run(ctx, {"name": "ada"})).content == "hi ada"
    assert hello.parameters["properties"]["word"]["default"] == "hello"
    assert hi.parameters["properties"]["word"]["default"] == "hi"


async def test_each_tool_call_gets_an_id_no_earlier_call_of_the_conversation_had(tmp_path: Path) -> None:
    # A model gives every turn's call the id call_0, as a sloppy one may; a continued
    # conversation holds a call_0 already. Each call's result (and a person's decision) is bound to
    # its id, so each new call gets one of its own, the continued turns' included.
    earlier = [
        Message.user("before"),
        Message(role="assistant", parts=[ToolCallPart(id="call_0", name="add", arguments={"a": 1, "b": 1})]),
        Message(role="tool", parts=[ToolResultPart(tool_call_id="call_0", name="add", content="2")]),
        Message.user("go on"),
    ]

    def add_call(a: int) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(id="call_0", name="add", arguments={"a": a, "b": a})], model="test")

    model = ScriptedModel([add_call(2), add_call(3), reply("done")])
    result = await run_agent(spec(model, [add]), make_ctx(tmp_path), earlier)
    ids = [p.id for m in result.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert ids == ["call_0", "call_0_2", "call_0_3"]
    results = [p.tool_call_id for m in result.messages for p in m.parts if isinstance(p, ToolResultPart)]
    assert results == ids
