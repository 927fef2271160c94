"""The idle watchdog (issue 34, item 10): a tool call, an MCP call or a model request that makes no
progress for `RunLimits.stall_timeout` seconds is ended, with a result that names the call and how
long it hung, and the run goes on. Progress is a command's output, an MCP server's progress
notification, a chunk of a model's stream; a call waiting for a person is never stalled.

Real commands in the sandbox, a real MCP server process (tests/mcp_server.py), the real OpenAI SDK
against the loopback server, the real CLI."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from delegate import Extensions, Lead, RunLimits, Runtime, Subagent, UserError, tool
from delegate.loop import Watchdog, deadlines_paused
from delegate.loop._watchdog import _PATROLS  # pyright: ignore[reportPrivateUsage]
from delegate.mcp import MCPServerConfig
from delegate.models import ModelRequest, ModelResponse, OpenAIModel, progress
from delegate.permissions import Permissions
from delegate.testing import FunctionModel, call, is_lead, reply, respond
from delegate.workspace import CommandPolicy
from tests.approvals_support import write_notes
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

SERVER = Path(__file__).with_name("mcp_server.py")


def hung_for(said: str, stall: float) -> float:
    """How long the watchdog's message says the call hung (it names the stall timeout too)."""
    found = re.search(rf"no progress for ([0-9.]+) s \(stall timeout {stall:g} s\)", said)
    assert found is not None, said
    return float(found[1])


# -- the watchdog itself ---------------------------------------------------------------------------


async def test_a_watchdog_ends_a_stretch_that_makes_no_progress_and_says_how_long_it_hung() -> None:
    dog = Watchdog(0.1).start()
    with pytest.raises(TimeoutError), dog:
        await asyncio.sleep(10)
    assert dog.ended and dog.hung >= 0.1
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancellation it made is taken back
    await asyncio.sleep(0.2)  # between stretches nothing is watched: nothing cancels the task
    with dog:  # the next stretch starts afresh
        await asyncio.sleep(0)
    assert not dog.ended
    dog.stop()


async def test_progress_keeps_a_watched_stretch_going_past_many_idle_periods() -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    dog = Watchdog(0.1).start()
    with dog:
        for _ in range(8):
            await asyncio.sleep(0.04)
            progress()
    dog.stop()
    assert not dog.ended and loop.time() - began >= 0.3


async def test_a_call_waiting_for_a_person_is_never_stalled() -> None:
    dog = Watchdog(0.05).start()
    with dog:
        with deadlines_paused():
            await asyncio.sleep(0.3)
        await asyncio.sleep(0.02)  # its idle time starts again when the wait ends
    dog.stop()
    assert not dog.ended


async def test_a_stopped_watchdog_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    dog = Watchdog(0.05).start()
    with dog:
        await asyncio.sleep(0)
    dog.stop()
    await asyncio.sleep(0.1)  # its patrol looked once more, found nothing to watch, and stopped
    assert loop not in _PATROLS


async def test_a_cancellation_not_its_own_stays_a_cancellation() -> None:
    async def watched() -> None:
        dog = Watchdog(60).start()
        try:
            with dog:
                await asyncio.sleep(10)
        finally:
            dog.stop()

    task = asyncio.create_task(watched())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_stall_timeout_that_is_not_positive_seconds_is_refused() -> None:
    with pytest.raises(UserError, match="stall_timeout"):
        RunLimits(stall_timeout=0)
    assert RunLimits().stall_timeout == 300  # on by default


# -- through runs ----------------------------------------------------------------------------------


def hung_subagent(first: dict[str, object], tool: str) -> FunctionModel:
    """A lead that delegates once; its subagent makes the call `tool(**first)` then completes with
    what the call said."""

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="worker", description="work", prompt="do it")
            return reply(f"lead read: {last.tool_results[0].content}")
        if last.role == "user":
            return call(tool, **first)
        return call("complete", summary=f"the call said: {last.tool_results[0].content}")

    return FunctionModel(answer)


WORKER = Subagent(name="worker", description="Works.", tools=["bash"], max_steps=5)


async def test_a_command_that_prints_nothing_is_ended_and_its_subagent_goes_on(tmp_path: Path) -> None:
    async with Runtime(
        model=hung_subagent({"command": "sleep 60", "timeout": 120}, "bash"),
        workspace=tmp_path,
        subagents=[WORKER],
        commands=CommandPolicy(),
        limits=RunLimits(stall_timeout=0.5),
    ) as runtime:
        result = await asyncio.wait_for(runtime.run("go"), 60)

    assert result.status == "completed"
    (record,) = result.subagents
    assert record.status == "completed"  # the subagent went on after its call was ended
    said = record.summary
    assert 'the idle watchdog ended this call, bash {"command": "sleep 60", "timeout": 120}' in said
    assert hung_for(said, 0.5) >= 0.5
    assert "lead read:" in result.final


async def test_a_command_that_prints_as_it_goes_outlives_the_stall_timeout(tmp_path: Path) -> None:
    command = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.2; done"
    async with Runtime(
        model=hung_subagent({"command": command}, "bash"),
        workspace=tmp_path,
        subagents=[WORKER],
        commands=CommandPolicy(),
        limits=RunLimits(stall_timeout=0.5),
    ) as runtime:
        result = await asyncio.wait_for(runtime.run("go"), 60)
    (record,) = result.subagents
    assert "tick 6" in record.summary and "watchdog" not in record.summary


@pytest.fixture
def tiny() -> Extensions:
    return Extensions(
        mcp_servers=[MCPServerConfig("tiny", command=[sys.executable, str(SERVER), "--stalls"])], tool_search=False
    )


async def test_a_hung_mcp_call_is_ended_one_reporting_progress_is_not_and_the_run_goes_on(
    tmp_path: Path, tiny: Extensions
) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:  # both at once: the hung one ends, the other works on
            return respond(
                [("mcp__tiny__hang", {"seconds": 60}), ("mcp__tiny__report", {"seconds": 1.5, "every": 0.15})]
            )
        return reply(" | ".join(p.content for p in request.messages[-1].tool_results))

    async with Runtime(
        model=FunctionModel(answer), workspace=tmp_path, extensions=tiny, limits=RunLimits(stall_timeout=0.5)
    ) as rt:
        result = await asyncio.wait_for(rt.run("call them"), 90)
    assert result.status == "completed"
    hung, reported = result.final.split(" | ")
    assert hung.startswith('Error: the idle watchdog ended this call, mcp__tiny__hang {"seconds": 60}: it made no')
    assert reported == "done in 10 steps"


async def test_a_hung_model_request_ends_its_subagent_timed_out_and_the_lead_goes_on(tmp_path: Path) -> None:
    async def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            await asyncio.Event().wait()  # the subagent's model never answers
        if len(request.messages) == 1:
            return call("task", subagent_type="general-purpose", description="stuck", prompt="think")
        return reply(f"lead read: {request.messages[-1].tool_results[0].content}")

    runtime = Runtime(model=FunctionModel(answer), workspace=tmp_path, limits=RunLimits(stall_timeout=0.3))
    result = await asyncio.wait_for(runtime.run("go"), 60)

    assert result.status == "completed"
    (record,) = result.subagents
    assert (record.status, record.stop_reason) == ("timed_out", "stalled")
    assert record.error is not None
    assert "the idle watchdog ended test:function's request of turn 1: no progress for" in record.error
    assert hung_for(record.error, 0.3) >= 0.3
    assert record.usage.requests_without_usage == 1  # the request may have been billed: its cost is unknown
    assert "lead read:" in result.final


async def test_a_model_stream_that_keeps_sending_is_not_stalled(tmp_path: Path) -> None:
    """Each chunk of a stream is progress: one that dribbles forever is ended by the model's own
    deadline, not by the watchdog."""
    with OpenAIServer(lambda body: Reply(content="never ends", dribble=0.05)) as server:
        model = OpenAIModel("loopback-model", base_url=server.base_url, api_key="k", deadline=1.2)
        runtime = Runtime(model=model, workspace=tmp_path, limits=RunLimits(stall_timeout=0.4))
        result = await asyncio.wait_for(runtime.run("go"), 60)
    assert result.status == "error", result.error
    assert result.error is not None and "deadline" in result.error and "watchdog" not in result.error


async def test_a_call_waiting_for_a_decision_longer_than_the_stall_timeout_is_not_ended(tmp_path: Path) -> None:
    runtime = Runtime(
        model=FunctionModel(write_notes),
        workspace=tmp_path,
        limits=RunLimits(stall_timeout=0.2, approval_timeout=1.0),
        extensions=Extensions(permissions=Permissions(ask=["Write"])),
    )
    result = await asyncio.wait_for(runtime.run("write notes"), 60)
    assert result.status == "completed"
    assert "no decision within 1 s" in result.final and "watchdog" not in result.final


def test_delegate_run_takes_stall_timeout_and_reports_the_hung_call(tmp_path: Path) -> None:
    def answer(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        if len(messages) == 2:  # the system prompt and the task
            return Reply(tool_calls=[("bash", {"command": "sleep 60"})])
        return Reply(content=f"went on: {messages[-1]['content']}")

    with OpenAIServer(answer) as server:
        done = run_cli(
            ["run", "go", "--json", "--allow-commands", "--stall-timeout", "0.5", "--model", "openai:loopback-model"],
            cwd=tmp_path,
            env=scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"},
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed"
    assert 'went on: Error: the idle watchdog ended this call, bash {"command": "sleep 60"}' in out["final"]


async def test_of_two_calls_at_once_the_hung_one_is_ended_and_the_one_making_progress_is_not(tmp_path: Path) -> None:
    """Calls of one turn run at once, each under a watchdog of its own (`Watchdog.apart`)."""

    @tool
    async def hang() -> str:
        """Wait in silence."""
        await asyncio.sleep(60)
        return "woke"

    @tool
    async def tick() -> str:
        """Work for a second, saying so as it goes."""
        for _ in range(10):
            await asyncio.sleep(0.1)
            progress()
        return "ticked"

    def answer(request: ModelRequest) -> ModelResponse:
        results = [r.content for m in request.messages if m.role == "tool" for r in m.tool_results]
        return reply(" | ".join(results)) if results else respond([("hang", {}), ("tick", {})])

    lead = Lead(tools=[hang, tick])
    limits = RunLimits(stall_timeout=0.3)
    async with Runtime(model=FunctionModel(answer), workspace=tmp_path, lead=lead, limits=limits) as runtime:
        result = await asyncio.wait_for(runtime.run("go"), 60)

    hung, ticked = result.final.split(" | ")
    assert hung.startswith("Error: the idle watchdog ended this call, hang {}") and hung_for(hung, 0.3) >= 0.3
    assert ticked == "ticked"  # a second long, past three stall timeouts: its progress kept it going
    assert not _PATROLS or all(not p.watched for p in _PATROLS.values())  # no call's watchdog left behind
