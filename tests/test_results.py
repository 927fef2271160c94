"""What a lead gets back from its subagents, through the `openai:` adapter against the loopback
server: records in call order everywhere, one record shape, and the small things a lead reads."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from delegate import Compaction, Lead, LoopSettings, RunLimits, Runtime, Store
from delegate._record import TaskOutput
from delegate.models import OpenAIModel, RetryPolicy
from delegate.server._runs import run_json
from delegate.testing import is_lead
from delegate.tools import BUILTIN_TOOLS, tool
from tests.cli_support import scrubbed_env
from tests.loopback_openai import Fault, OpenAIServer, Reply

DEADLINE = 30.0
"""How long a responder waits for another subagent before the test fails (never reached when it passes)."""


def prompt_of(body: dict[str, Any]) -> str:
    content = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def openai_model(server: OpenAIServer) -> OpenAIModel:
    return OpenAIModel("m", base_url=server.base_url, api_key="k", retry=RetryPolicy(attempts=2, base_delay=0.01))


async def close(rt: Runtime) -> None:
    """Close the runtime and the model client it was given (a runtime closes only those it built)."""
    await rt.aclose()
    await rt.model.aclose()  # type: ignore[attr-defined]


class SlowFirst:
    """A lead that makes three `task` calls in one turn; the first subagent answers only once the
    other two have ended (`sink` sees them end; without it, once their models have answered)."""

    def __init__(self) -> None:
        self.answered = 0
        self.ended = 0
        self.others_done = threading.Event()
        self.lock = threading.Lock()
        self.watching = False

    def sink(self, event: Any) -> None:
        self.watching = True
        if event.type == "subagent.completed":
            self.ended += 1
            if self.ended == 2:
                self.others_done.set()

    def __call__(self, body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            if body["messages"][-1]["role"] == "user":
                calls: list[tuple[str, dict[str, Any] | str]] = [
                    ("task", {"subagent_type": "general-purpose", "description": f"job {n}", "prompt": f"job {n}"})
                    for n in (1, 2, 3)
                ]
                return Reply(tool_calls=calls)
            return Reply(content="\n---\n".join(tool_results(body)))
        job = prompt_of(body)
        if job == "job 1" and not self.others_done.wait(DEADLINE):
            return Fault(500, "the other subagents never completed")
        with self.lock:
            self.answered += 1
            if self.answered == 2 and not self.watching:
                self.others_done.set()
        return Reply(tool_calls=[("complete", {"summary": f"did {job}"})])


async def test_records_are_in_the_order_the_lead_called_them_in_the_result_the_store_and_http(
    tmp_path: Path,
) -> None:
    store = Store.for_workspace(tmp_path)
    lead = SlowFirst()
    with OpenAIServer(lead) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=store, sinks=[lead.sink])
        result = await rt.run("three jobs")
        await close(rt)
    finished = sorted(result.subagents, key=lambda s: s.completed_at or 0)
    assert finished[-1].description == "job 1"  # the first one called finished last
    assert [s.description for s in result.subagents] == ["job 1", "job 2", "job 3"]
    assert [s["description"] for s in result.to_dict()["subagents"]] == ["job 1", "job 2", "job 3"]
    assert [s.description for s in store.subagent_records(result.run_id)] == ["job 1", "job 2", "job 3"]
    answered = run_json(store, result.run_id, user_id=None)  # type: ignore[arg-type]
    assert answered is not None
    assert [s["description"] for s in answered["subagents"]] == ["job 1", "job 2", "job 3"]
    assert answered["subagents"] == result.to_dict()["subagents"]  # one serialiser for both
    store.close()


def test_run_json_lists_subagents_in_call_order(tmp_path: Path) -> None:
    env = scrubbed_env()
    with OpenAIServer(SlowFirst()) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        env["OPENAI_API_KEY"] = "k"
        done = subprocess.run(
            [sys.executable, "-m", "delegate", "run", "three jobs", "--model", "openai:m", "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    subagents = json.loads(done.stdout)["subagents"]
    assert [s["description"] for s in subagents] == ["job 1", "job 2", "job 3"]
    assert {"id", "type", "status", "stop_reason", "steps", "usage", "artifacts", "result"} <= set(subagents[0])
    assert [TaskOutput.from_dict(s).to_dict() for s in subagents] == subagents  # the record reads back whole


async def test_a_record_read_back_from_the_store_is_the_record_the_run_returned(tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            if body["messages"][-1]["role"] == "user":
                return Reply(
                    tool_calls=[("task", {"subagent_type": "general-purpose", "description": "d", "prompt": "p"})]
                )
            return Reply(content="done")
        if body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[("write_file", {"path": "out.md", "content": "made"})])
        return Reply(tool_calls=[("complete", {"summary": "wrote out.md", "paths": ["out.md", "nope.md"]})])

    store = Store.for_workspace(tmp_path)
    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=store)
        result = await rt.run("go")
        await close(rt)
    [stored] = store.subagent_records(result.run_id)
    assert stored == result.subagents[0]
    assert (stored.status, stored.stop_reason, stored.steps) == ("completed", "stop_tool", 2)
    assert [a.relative_path for a in stored.artifacts] == ["out.md"]
    assert [s.path for s in stored.skipped] == ["nope.md"]
    store.close()


async def test_a_single_step_is_one_step_and_a_missing_type_is_named_as_missing(tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            turn = len(tool_results(body))
            if turn == 0:
                return Reply(tool_calls=[("task", {"description": "no type", "prompt": "p"})])
            if turn == 1:
                return Reply(
                    tool_calls=[("task", {"subagent_type": "general-purpose", "description": "d", "prompt": "p"})]
                )
            return Reply(content="\n---\n".join(tool_results(body)))
        return Reply(tool_calls=[("complete", {"summary": "done"})])

    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False)
        result = await rt.run("go")
        await close(rt)
    missing, ran = result.final.split("\n---\n")
    assert "subagent_type is missing" in missing and "None" not in missing
    assert "(1 step," in ran


async def test_with_no_parallel_cap_the_task_tool_says_so(tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply | Fault:
        return Reply(content="ok")

    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False, limits=RunLimits(max_parallel=None))
        await rt.run("go")
        capped = Runtime(model=openai_model(server), workspace=tmp_path, store=False, limits=RunLimits(max_parallel=3))
        await capped.run("go")
        await close(rt)
        await close(capped)
    uncapped_task, capped_task = (
        next(t["function"]["description"] for t in body["tools"] if t["function"]["name"] == "task")
        for body in server.requests
    )
    assert "no cap" in uncapped_task and "up to 0" not in uncapped_task
    assert "up to 3 run at once" in capped_task


async def test_a_cancelled_subagent_counts_the_steps_it_took(tmp_path: Path) -> None:
    second_turn = threading.Event()
    release = threading.Event()

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            return Reply(tool_calls=[("task", {"subagent_type": "general-purpose", "description": "d", "prompt": "p"})])
        if body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[("list_dir", {})])
        second_turn.set()
        release.wait(DEADLINE)
        return Reply(content="late")

    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False)
        events: list[Any] = []
        run = asyncio.create_task(rt.run("go", sinks=[events.append]))
        assert await asyncio.to_thread(second_turn.wait, DEADLINE)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        release.set()
        await close(rt)
    [done] = [e for e in events if e.type == "subagent.completed"]
    assert (done.data["status"], done.data["steps"]) == ("cancelled", 1)


def test_the_lead_is_told_what_a_bad_prompt_is_to_reuse_results_and_not_to_delegate_vague_work() -> None:
    from delegate.subagents._prompts import task_description

    text = task_description([("explore", "reads")], max_parallel=4)
    assert "bad prompt" in text.lower() and "what we discussed" in text
    assert "do not start another one" in text
    assert "vague" in text


def one_task_lead(summary: str, paths: list[str]) -> Callable[[dict[str, Any]], Reply | Fault]:
    """A lead that delegates once and answers with what it read; the subagent writes `paths`
    and completes with `summary`."""

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            if not tool_results(body):
                return Reply(
                    tool_calls=[("task", {"subagent_type": "general-purpose", "description": "report", "prompt": "p"})]
                )
            return Reply(content=tool_results(body)[0])
        if not tool_results(body):
            return Reply(tool_calls=[("write_file", {"path": p, "content": f"# {p}\n"}) for p in paths])
        return Reply(tool_calls=[("complete", {"summary": summary, "paths": paths})])

    return responder


async def test_a_huge_summary_reaches_the_lead_short_and_whole_in_a_file_it_names(tmp_path: Path) -> None:
    summary = "".join(f"finding {i:06d}. " for i in range(12_500))  # 200,000 characters
    assert len(summary) == 200_000
    with OpenAIServer(one_task_lead(summary, ["report.md"])) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False)
        result = await rt.run("go")
        await close(rt)
    seen = result.final  # the lead's answer is the tool result it read, word for word
    assert len(seen) <= 2_000
    [record] = result.subagents
    assert record.summary == summary  # the record keeps everything
    assert record.result_file is not None and record.result_file.startswith("subagent-results/")
    assert [a.relative_path for a in record.artifacts] == [record.result_file, "report.md"]
    assert f"the whole result is in {record.result_file}" in seen
    assert "- report.md (" in seen and f"- {record.result_file} (" in seen
    assert summary.strip() in (tmp_path / record.result_file).read_text()


async def test_compaction_keeps_each_results_status_line_and_artifacts_whatever_the_summary(tmp_path: Path) -> None:
    summary = "x" * 5_000
    paths = ["out/a.md", "out/b.md", "out/c.md"]
    compacted: list[str] = []

    def responder(body: dict[str, Any]) -> Reply | Fault:
        system = body["messages"][0]["content"]
        if system.startswith("You compact a conversation"):
            return Reply(content="older turns, summarised")
        if is_lead(body):
            notes = [m["content"] for m in body["messages"] if m["role"] == "user" and "Preserved" in str(m["content"])]
            compacted.extend(notes)
            turn = len([m for m in body["messages"] if m["role"] == "assistant"])
            if turn == 0:
                task = {"subagent_type": "general-purpose", "description": "report", "prompt": "p"}
                return Reply(tool_calls=[("task", task)], prompt_tokens=10)
            if not notes:
                return Reply(tool_calls=[("list_dir", {})], prompt_tokens=5_000)
            return Reply(content="done")
        return one_task_lead(summary, paths)(body)

    with OpenAIServer(responder) as server:
        rt = Runtime(
            model=openai_model(server),
            workspace=tmp_path,
            store=False,
            loop=LoopSettings(compaction=Compaction(max_context_tokens=1_000, keep_recent=2)),
        )
        result = await rt.run("go")
        await close(rt)
    assert result.final == "done", (result.status, result.error, result.stop_reason)
    note = compacted[0]
    [record] = result.subagents
    assert f"[completed] general-purpose: report ({record.steps} steps" in note
    for path in [record.result_file, *paths]:
        assert f"- {path} (" in note


async def test_compaction_of_a_prompts_call_keeps_each_subagents_summary_and_artifacts_within_the_bound(
    tmp_path: Path,
) -> None:
    jobs = ["alpha", "beta", "gamma"]
    compacted: list[str] = []

    def responder(body: dict[str, Any]) -> Reply | Fault:
        system = body["messages"][0]["content"]
        if system.startswith("You compact a conversation"):
            return Reply(content="older turns, summarised")
        if is_lead(body):
            notes = [m["content"] for m in body["messages"] if m["role"] == "user" and "Preserved" in str(m["content"])]
            compacted.extend(notes)
            turn = len([m for m in body["messages"] if m["role"] == "assistant"])
            if turn == 0:
                task = {"subagent_type": "general-purpose", "description": "report", "prompts": jobs}
                return Reply(tool_calls=[("task", task)], prompt_tokens=10)
            if not notes:
                return Reply(tool_calls=[("list_dir", {})], prompt_tokens=5_000)
            return Reply(content="done")
        job = prompt_of(body)
        if not tool_results(body):
            return Reply(tool_calls=[("write_file", {"path": f"out/{job}.md", "content": f"# {job}\n"})])
        summary = f"{job} found the entry point in src/{job}.py. " + "detail " * 300  # 2,100 characters
        return Reply(tool_calls=[("complete", {"summary": summary, "paths": [f"out/{job}.md"]})])

    with OpenAIServer(responder) as server:
        rt = Runtime(
            model=openai_model(server),
            workspace=tmp_path,
            store=False,
            loop=LoopSettings(compaction=Compaction(max_context_tokens=1_000, keep_recent=2)),
        )
        result = await rt.run("go")
        await close(rt)
    assert result.final == "done", (result.status, result.error, result.stop_reason)
    preserved = compacted[0].split("Preserved tool results:\n", 1)[1]
    assert len(preserved) <= 4_000 + 100  # the bound, and the note's own "- " before it
    for record, job in zip(result.subagents, jobs, strict=True):
        assert f"[completed] general-purpose: report [{jobs.index(job) + 1}/3] (" in preserved
        assert f"Summary: {job} found the entry point in src/{job}.py. detail" in preserved
        assert f"- out/{job}.md (" in preserved and record.summary not in preserved  # cut, not dropped


async def test_tools_that_talk_to_the_user_are_never_inherited_whatever_their_name(tmp_path: Path) -> None:
    @tool(talks_to_user=True)
    def ask_clarification(question: str) -> str:
        """Ask the user a question and wait for the answer."""
        return "blue"

    @tool
    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            if not tool_results(body):
                return Reply(
                    tool_calls=[("task", {"subagent_type": "general-purpose", "description": "d", "prompt": "p"})]
                )
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": "ok"})])

    with OpenAIServer(responder) as server:
        rt = Runtime(
            model=openai_model(server),
            workspace=tmp_path,
            store=False,
            lead=Lead(tools=[*BUILTIN_TOOLS, "task", ask_clarification, lookup]),
        )
        await rt.run("go")
        await close(rt)
    lead, subagent = (
        {t["function"]["name"] for t in body["tools"]}
        for body in server.requests
        if body["messages"][-1]["role"] == "user"
    )
    assert {"ask_clarification", "lookup"} <= lead
    assert "lookup" in subagent and "ask_clarification" not in subagent


async def test_the_snapshot_note_promises_only_what_the_request_carries(tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            if not tool_results(body):
                task = {
                    "subagent_type": "general-purpose",
                    "description": "d",
                    "prompt": "p",
                    "context_mode": "snapshot",
                }
                return Reply(tool_calls=[("task", task)])
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": "ok"})])

    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False)
        await rt.run("remember: the colour is teal")
        await close(rt)
    [child] = [body for body in server.requests if not is_lead(body)]
    system, snapshot = child["messages"][0]["content"], child["messages"][1]
    assert "message that begins 'Parent conversation snapshot'" in system and "named" not in system
    text = snapshot["content"] if isinstance(snapshot["content"], str) else snapshot["content"][0]["text"]
    assert snapshot["role"] == "user" and text.startswith("Parent conversation snapshot")
    assert "the colour is teal" in text
