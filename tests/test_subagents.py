"""The task tool end to end with fake models: delegation, isolation, failures, caps, records."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from delegate import Event, Extensions, Lead, LoopSettings, RunLimits, Runtime, UserError
from delegate._usage import Usage
from delegate.agents import Subagent
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, ScriptedModel, call, is_lead, reply, respond
from delegate.tools import BUILTIN_TOOLS


def task_result(request: ModelRequest, index: int = 0) -> str:
    return request.messages[-1].tool_results[index].content


def runtime(tmp_path: Path, model: Any, **kw: Any) -> Runtime:
    kw.setdefault("store", False)
    return Runtime(model=model, workspace=tmp_path, **kw)


def delegating(task: dict[str, Any], subagent: Any, *, name: str = "test:function") -> FunctionModel:
    """A lead that makes one `task` call with `task` as arguments and then answers "ok"; every
    subagent request is answered by `subagent` (a function of the request, or a fixed response)."""

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            return call("task", **task) if len(request.messages) == 1 else reply("ok")
        return subagent(request) if callable(subagent) else subagent

    return FunctionModel(answer, name=name)


def writer(request: ModelRequest) -> ModelResponse:
    """A subagent that writes the file its prompt names, then completes with it."""
    if request.messages[-1].role == "user":
        name = request.messages[-1].text.split("write the file ")[1].split()[0]
        return call("write_file", path=name, content=f"made by {name}")
    path = request.messages[-2].tool_calls[0].arguments["path"]
    return call("complete", summary=f"wrote {path}", paths=[path])


async def test_a_lead_fans_out_and_gets_results_in_prompt_order(tmp_path: Path) -> None:
    prompts = [f"write the file out/{i}.md" for i in range(4)]

    def model(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            return writer(request)
        if len(request.messages) == 1:
            return call("task", subagent_type="general-purpose", description="write files", prompts=prompts)
        return reply(task_result(request))

    rt = runtime(tmp_path, FunctionModel(model))
    result = await rt.run("write four files")
    assert result.status == "completed"
    assert [s.summary for s in result.subagents if s.status == "completed"]
    lines = [line for line in result.final.splitlines() if line.startswith("Summary:")]
    assert lines == [f"Summary: wrote out/{i}.md" for i in range(4)]
    for i in range(4):
        assert (tmp_path / f"out/{i}.md").read_text() == f"made by out/{i}.md"
    assert {s.artifacts[0].relative_path for s in result.subagents} == {f"out/{i}.md" for i in range(4)}
    assert all(s.artifacts[0].fs_type == "file" and s.artifacts[0].size > 0 for s in result.subagents)


async def test_subagents_see_only_their_prompt_and_never_get_task(tmp_path: Path) -> None:
    model = delegating(
        dict(subagent_type="general-purpose", description="d", prompt="sub job"), call("complete", summary="done")
    )
    await runtime(tmp_path, model).run("SECRET lead conversation")
    sub = [r for r in model.requests if not is_lead(r)]
    assert len(sub) == 1
    assert [m.text for m in sub[0].messages] == ["sub job"]
    assert "SECRET" not in sub[0].system
    names = {t.name for t in sub[0].tools}
    assert "task" not in names and "complete" in names and "write_file" in names


async def test_explore_is_read_only_by_its_tool_set(tmp_path: Path) -> None:
    """Spec 003: a read-only subagent has read, grep, find files, list dir, todo, memory read and
    memory search; never write, edit, bash nor memory write."""
    model = delegating(
        dict(subagent_type="explore", description="look", prompt="find x"), call("complete", summary="found")
    )
    await runtime(tmp_path, model, store=f"sqlite:///{tmp_path / 'store.db'}").run("go")
    sub = next(r for r in model.requests if not is_lead(r))
    assert sorted(t.name for t in sub.tools) == [
        "complete", "find_files", "grep", "list_dir", "memory_read", "memory_search", "read_file", "todo_read",
        "todo_write",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"subagent_type": "nope", "description": "d", "prompt": "p"}, "available: general-purpose, explore"),
        ({"subagent_type": "bash", "description": "d", "prompt": "p"}, "does not allow command execution"),
        (
            {"subagent_type": "explore", "description": "d", "prompt": "p", "context_mode": "full"},
            "context_mode",
        ),
        ({"subagent_type": "explore", "description": "x" * 81, "prompt": "p"}, "at most 80"),
        ({"subagent_type": "explore", "description": "d"}, "prompt is required"),
        ({"subagent_type": "explore", "description": "d", "prompts": ["q", ""]}, "prompts[1]"),
        (
            {
                "subagent_type": "explore",
                "description": "d",
                "prompt": "p",
                "acceptance_criteria": ["x"] * 21,
            },
            "20",
        ),
    ],
)
async def test_invalid_task_calls_start_nothing_and_say_why(
    tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    model = ScriptedModel([call("task", **arguments), reply("ok")])
    result = await runtime(tmp_path, model).run("go")
    content = task_result(model.requests[1])
    assert model.requests[1].messages[-1].tool_results[0].is_error
    assert message in content
    assert result.subagents == []


async def test_caller_policy_that_permits_none_says_so(tmp_path: Path) -> None:
    model = ScriptedModel([call("task", subagent_type="explore", description="d", prompt="p"), reply("ok")])
    await runtime(tmp_path, model, lead=Lead(subagents=[])).run("go")
    assert "none permitted by caller policy" in task_result(model.requests[1])


async def test_without_definitions_the_task_tool_is_not_offered(tmp_path: Path) -> None:
    model = ScriptedModel([reply("ok")])
    await runtime(tmp_path, model, extensions=Extensions(builtin_subagents=False)).run("go")
    assert "task" not in {t.name for t in model.requests[0].tools}
    model2 = ScriptedModel([reply("ok")])
    await runtime(tmp_path, model2, lead=Lead(tools=[*BUILTIN_TOOLS])).run("go")
    assert "task" not in {t.name for t in model2.requests[0].tools}


async def test_the_task_schema_lists_types_with_descriptions(tmp_path: Path) -> None:
    model = ScriptedModel([reply("ok")])
    extra = Subagent(name="reviewer", description="Reviews one diff.")
    await runtime(tmp_path, model, subagents=[extra]).run("go")
    task = next(t for t in model.requests[0].tools if t.name == "task")
    prop = task.parameters["properties"]["subagent_type"]
    assert prop["enum"] == ["general-purpose", "explore", "reviewer"]
    assert "- reviewer: Reviews one diff." in prop["description"]
    assert task.parameters["properties"]["description"]["maxLength"] == 80
    assert "own output file names" in task.description


async def test_one_failing_subagent_does_not_stop_its_siblings(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="general-purpose", description="d", prompts=["ok 1", "fail", "ok 2"])
            return reply("done")
        if request.messages[0].text == "fail":
            raise RuntimeError("model exploded")
        return call("complete", summary=f"did {request.messages[0].text}")

    result = await runtime(tmp_path, FunctionModel(model)).run("go")
    statuses = sorted((s.description, s.status) for s in result.subagents)
    assert statuses == [("d [1/3]", "completed"), ("d [2/3]", "error"), ("d [3/3]", "completed")]
    failed = next(s for s in result.subagents if s.status == "error")
    assert failed.error is not None and "model exploded" in failed.error


async def test_timeout_and_step_limit_end_a_subagent_with_their_status(tmp_path: Path) -> None:
    slow = Subagent(name="slow", description="slow", timeout=0.2)
    stubborn = Subagent(name="stubborn", description="loops", max_steps=2)

    async def model(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return respond(
                    [
                        ("task", {"subagent_type": "slow", "description": "s", "prompt": "a"}),
                        ("task", {"subagent_type": "stubborn", "description": "t", "prompt": "b"}),
                    ]
                )
            return reply("done")
        if request.messages[0].text == "a":
            await asyncio.sleep(5)
        return call("list_dir")

    result = await runtime(tmp_path, FunctionModel(model), subagents=[slow, stubborn]).run("go")
    by_type = {s.type: s for s in result.subagents}
    assert (by_type["slow"].status, by_type["slow"].stop_reason) == ("timed_out", "timeout")
    assert (by_type["stubborn"].status, by_type["stubborn"].stop_reason, by_type["stubborn"].steps) == (
        "aborted",
        "max_steps",
        2,
    )


async def test_complete_validates_paths(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("x")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    paths = ["real.md", "missing.md", "../outside.md", "real.md", "link.md"]
    model = delegating(
        dict(subagent_type="general-purpose", description="d", prompt="p"), call("complete", summary="s", paths=paths)
    )
    result = await runtime(tmp_path, model).run("go")
    record = result.subagents[0]
    shown = [(a.relative_path, a.fs_type, a.target) for a in record.artifacts]
    assert shown == [("real.md", "file", None), ("link.md", "symlink", "real.md")]  # a link is its own artifact
    reasons = {s.path: s.reason for s in record.skipped}
    assert reasons["missing.md"] == "does not exist"
    assert "outside the workspace" in reasons["../outside.md"]
    assert reasons["real.md"] == "listed more than once"


async def test_a_subagent_that_never_completes_reports_its_last_text(tmp_path: Path) -> None:
    model = delegating(dict(subagent_type="explore", description="d", prompt="p"), reply("my findings"))
    result = await runtime(tmp_path, model).run("go")
    assert (result.subagents[0].summary, result.subagents[0].status) == ("my findings", "completed")


async def test_usage_of_subagents_rolls_up_into_the_run(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return respond(
                    [("task", {"subagent_type": "explore", "description": "d", "prompts": ["a", "b"]})],
                    input_tokens=100,
                    output_tokens=10,
                )
            return respond([], text="done", input_tokens=200, output_tokens=20)
        return respond([("complete", {"summary": "s"})], input_tokens=7, output_tokens=3)

    result = await runtime(tmp_path, FunctionModel(model)).run("go")
    assert (result.lead_usage.input_tokens, result.lead_usage.output_tokens) == (300, 30)
    assert [(s.usage.input_tokens, s.usage.output_tokens) for s in result.subagents] == [(7, 3), (7, 3)]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (314, 36)
    payload = result.to_dict()
    assert payload["usage"] == Usage(input_tokens=314, output_tokens=36, requests=4, cost_usd=None).to_dict()
    assert set(payload["subagents"][0]) >= {
        "id",
        "type",
        "description",
        "tool_call_id",
        "status",
        "steps",
        "usage",
        "artifacts",
        "skipped",
        "started_at",
        "completed_at",
    }


async def test_the_total_cap_refuses_clearly(tmp_path: Path) -> None:
    model = delegating(
        dict(subagent_type="explore", description="d", prompts=["a", "b", "c"]), call("complete", summary="s")
    )
    rt = runtime(tmp_path, model, limits=RunLimits(max_subagents=2))
    result = await rt.run("go")
    assert result.subagents == []
    assert "at most 2 subagents" in task_result(model.requests[-1])


async def test_the_parallel_cap_holds(tmp_path: Path) -> None:
    running = peak = 0

    async def model(request: ModelRequest) -> ModelResponse:
        nonlocal running, peak
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="explore", description="d", prompts=[str(i) for i in range(12)])
            return reply("ok")
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return call("complete", summary="s")

    result = await runtime(tmp_path, FunctionModel(model), limits=RunLimits(max_parallel=3)).run("go")
    assert len(result.subagents) == 12 and peak == 3


async def test_cancelling_the_run_cancels_children_and_keeps_their_usage(tmp_path: Path) -> None:
    waiting = 0
    both_waiting = asyncio.Event()

    async def model(request: ModelRequest) -> ModelResponse:
        nonlocal waiting
        if is_lead(request):
            return call("task", subagent_type="explore", description="d", prompts=["a", "b"])
        if len(request.messages) == 1:
            return respond([("list_dir", {})], input_tokens=50, output_tokens=5)
        waiting += 1
        if waiting == 2:
            both_waiting.set()
        await asyncio.sleep(30)
        return reply("never")

    events: list[Event] = []
    rt = runtime(tmp_path, FunctionModel(model), sinks=[events.append])
    task = asyncio.create_task(rt.run("go"))
    await asyncio.wait_for(both_waiting.wait(), 30)  # each subagent has had its first answer counted
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    done = [e for e in events if e.type == "subagent.completed"]
    assert [e.data["status"] for e in done] == ["cancelled", "cancelled"]
    assert all(e.data["usage"]["input_tokens"] == 50 for e in done)
    assert events[-1].type == "run.completed" and events[-1].data["status"] == "cancelled"
    assert events[-1].data["usage"]["input_tokens"] >= 100


async def test_subagent_events_name_the_subagent_and_the_parent_call(tmp_path: Path) -> None:
    events: list[Event] = []

    async def model(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="explore", description="d", prompt="p")
            return reply("ok")
        await asyncio.sleep(0.15)
        return call("complete", summary="s")

    rt = runtime(tmp_path, FunctionModel(model), sinks=[events.append], loop=LoopSettings(heartbeat_interval=0.05))
    result = await rt.run("go")
    sub = result.subagents[0]
    mine = [e for e in events if e.agent_id == sub.id]
    assert {e.parent_agent_id for e in mine} == {"lead"}
    types = [e.type for e in mine]
    assert types[0] == "subagent.started" and types[-1] == "subagent.completed"
    assert "subagent.heartbeat" in types
    assert {e.tool_call_id for e in mine if e.type.startswith("subagent.")} == {sub.tool_call_id}


async def test_model_resolution_order(tmp_path: Path) -> None:
    lead = FunctionModel(
        lambda r: (
            call("task", subagent_type="general-purpose", description="d", prompts=["a"])
            if len(r.messages) == 1
            else respond([("task", {"subagent_type": "pinned", "description": "d", "prompt": "b"})])
            if len(r.messages) == 3
            else reply("ok")
        ),
        name="lead-model",
    )
    cheap = FunctionModel(lambda r: call("complete", summary="cheap"), name="cheap-model")
    pinned_model = FunctionModel(lambda r: call("complete", summary="pinned"), name="pinned-model")
    pinned = Subagent(name="pinned", description="p", model=pinned_model)
    result = await runtime(tmp_path, lead, subagents=[pinned], lead=Lead(subagent_model=cheap)).run("go")
    assert [(s.type, s.model) for s in result.subagents] == [
        ("general-purpose", "cheap-model"),
        ("pinned", "pinned-model"),
    ]
    inherit = delegating(
        dict(subagent_type="explore", description="d", prompt="x"), call("complete", summary="s"), name="lead-only"
    )
    result = await runtime(tmp_path, inherit).run("go")
    assert result.subagents[0].model == "lead-only"


async def test_acceptance_verdicts_come_back_with_the_result(tmp_path: Path) -> None:
    criteria = ["file:out.md non-empty", "file:missing.md exists", "the prose is lovely"]

    def model(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call(
                    "task",
                    subagent_type="general-purpose",
                    description="d",
                    prompt="write out.md",
                    acceptance_criteria=criteria,
                )
            return reply("ok")
        if len(request.messages) == 1:
            return call("write_file", path="out.md", content="hello")
        return call("complete", summary="wrote", paths=["out.md"])

    fm = FunctionModel(model)
    result = await runtime(tmp_path, fm).run("go")
    verdicts = [(v["criterion"], v["result"]) for v in result.subagents[0].acceptance or []]
    assert verdicts == [
        ("file:out.md non-empty", "holds"),
        ("file:missing.md exists", "does not hold"),
        ("the prose is lovely", "UNVERIFIED"),
    ]
    assert result.subagents[0].status == "completed"
    compact = task_result(fm.requests[-1])
    assert "[holds] file:out.md non-empty" in compact and "[UNVERIFIED] the prose is lovely" in compact
    sub = next(r for r in fm.requests if not is_lead(r))
    assert "Acceptance criteria from the delegating agent (untrusted input" in sub.messages[0].text
    assert "file:out.md" not in sub.system


async def test_snapshot_mode_gives_the_child_the_parents_conversation(tmp_path: Path) -> None:
    def model(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return respond(
                    [
                        (
                            "task",
                            {
                                "subagent_type": "explore",
                                "description": "d",
                                "prompt": "p",
                                "context_mode": "snapshot",
                            },
                        )
                    ],
                    text="I will delegate",
                )
            return reply("ok")
        return call("complete", summary="s")

    fm = FunctionModel(model)
    await runtime(tmp_path, fm).run("requirement: use British spelling")
    sub = next(r for r in fm.requests if not is_lead(r))
    first = sub.messages[0]
    assert (first.name, first.hidden) == ("parent_context_snapshot", True)
    assert "requirement: use British spelling" in first.text
    assert sub.messages[1].text == "p"
    assert (
        "not your own" in sub.system.lower()
        or "not its own" in sub.system.lower()
        or "belong to the parent" in sub.system.lower()
    )


async def test_task_results_survive_the_leads_compaction(tmp_path: Path) -> None:
    from delegate import Compaction

    turns = 0

    def model(request: ModelRequest) -> ModelResponse:
        nonlocal turns
        if request.system.startswith("You compact"):
            return reply("older turns, summarised")
        if not is_lead(request):
            if len(request.messages) == 1:
                return call("write_file", path="found.md", content="facts")
            return call("complete", summary="FOUND-THE-FACTS", paths=["found.md"])
        turns += 1
        if turns == 1:
            return respond(
                [("task", {"subagent_type": "general-purpose", "description": "d", "prompt": "p"})], input_tokens=10
            )
        if turns < 5:
            return respond([("list_dir", {})], input_tokens=5000)
        return reply("done")

    fm = FunctionModel(model)
    rt = runtime(tmp_path, fm, loop=LoopSettings(compaction=Compaction(max_context_tokens=1000, keep_recent=2)))
    result = await rt.run("go")
    assert result.final == "done"
    last = [r for r in fm.requests if is_lead(r)][-1].messages
    summary = next(m for m in last if m.name == "conversation_summary")
    assert "FOUND-THE-FACTS" in summary.text
    assert "[completed] general-purpose" in summary.text and "found.md" in summary.text


async def test_run_task_runs_one_subagent_without_a_lead(tmp_path: Path) -> None:
    model = FunctionModel(writer)
    rt = runtime(tmp_path, model)
    output = await rt.run_task(
        subagent_type="general-purpose",
        prompt="write the file item.md",
        description="one item",
        acceptance_criteria=["file:item.md non-empty"],
    )
    assert (output.status, output.summary) == ("completed", "wrote item.md")
    assert output.acceptance is not None and output.acceptance[0]["result"] == "holds"
    with pytest.raises(UserError, match="available: general-purpose, explore"):
        await rt.run_task(subagent_type="nope", prompt="p")
    with pytest.raises(UserError, match="at most 20"):
        await rt.run_task(subagent_type="explore", prompt="p", acceptance_criteria=["x"] * 21)


async def test_with_prompts_the_prompt_is_context_shared_by_each(tmp_path: Path) -> None:
    task = dict(subagent_type="explore", description="d", prompt="Shared rules.", prompts=["one", "two"])
    model = delegating(task, call("complete", summary="s"))
    await runtime(tmp_path, model).run("go")
    kickoffs = sorted(r.messages[0].text for r in model.requests if not is_lead(r))
    assert kickoffs == ["Shared rules.\n\none", "Shared rules.\n\ntwo"]


async def test_stream_yields_every_event_as_it_happens_and_ends_with_the_run(tmp_path: Path) -> None:
    model = delegating(dict(subagent_type="explore", description="d", prompt="p"), call("complete", summary="s"))
    events = [event async for event in runtime(tmp_path, model).stream("go")]
    types = [e.type for e in events]
    assert types[0] == "run.started" and types[-1] == "run.completed"
    assert types.index("subagent.started") < types.index("subagent.completed") < types.index("run.completed")
    assert events[-1].data["status"] == "completed" and events[-1].data["final"] == "ok"


async def test_a_subagent_type_can_name_the_tools_its_first_turns_must_call(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("text\n")
    reader = Subagent(
        name="reader", description="Reads.", tools=["read_file"], first_tool_choice="read_file", max_steps=3
    )
    model = delegating(dict(subagent_type="reader", description="d", prompt="p"), call("complete", summary="done"))
    result = await runtime(tmp_path, model, subagents=[reader], lead=Lead(tools=["write_file", "task"])).run("go")
    sub = [r for r in model.requests if not is_lead(r)]
    assert [t.name for t in sub[0].tools] == ["read_file", "complete"]  # named, though the lead lacks it
    assert sub[0].tool_choice == "read_file"
    assert [s.status for s in result.subagents] == ["completed"]

    steps = Subagent(
        name="steps",
        description="Steps.",
        tools=["read_file", "write_file"],
        first_tool_choice=["read_file", "write_file"],
    )
    turns = iter([call("read_file", path="in.txt"), call("write_file", path="out.txt", content="x")])
    model = delegating(
        dict(subagent_type="steps", description="d", prompt="p"), lambda r: next(turns, call("complete", summary="ok"))
    )
    await runtime(tmp_path, model, subagents=[steps]).run("go")
    assert [r.tool_choice for r in model.requests if not is_lead(r)] == ["read_file", "write_file", "auto"]


async def test_a_first_tool_the_subagent_lacks_is_refused_before_anything_starts(tmp_path: Path) -> None:
    broken = Subagent(name="broken", description="Broken.", tools=["read_file"], first_tool_choice="write_file")
    model = ScriptedModel([call("task", subagent_type="broken", description="d", prompt="p"), reply("ok")])
    rt = runtime(tmp_path, model, subagents=[broken])
    result = await rt.run("go")
    assert model.requests[1].messages[-1].tool_results[0].is_error
    assert "must call 'write_file' first but does not have that tool" in task_result(model.requests[1])
    assert result.subagents == []
    with pytest.raises(UserError, match="must call 'write_file' first"):
        await rt.run_task(subagent_type="broken", prompt="p")


async def test_the_leads_first_tool_choice_must_name_one_of_its_tools(tmp_path: Path) -> None:
    model = delegating(dict(subagent_type="explore", description="d", prompt="p"), call("complete", summary="done"))
    rt = runtime(tmp_path, model, store=None, lead=Lead(first_tool_choice="task"))
    await rt.run("go")
    lead = [r.tool_choice for r in model.requests if is_lead(r)]
    assert lead == ["task", "auto"]
    bad = runtime(tmp_path, ScriptedModel([reply("ok")]), store=None, lead=Lead(first_tool_choice="web_search"))
    with pytest.raises(UserError, match="first_tool_choice 'web_search' is not one of its tools"):
        await bad.run("go")
    assert len(bad.store.list_runs(None)) == 1  # the refused run left no record behind
    await rt.aclose()
    await bad.aclose()


# -- uploads ---------------------------------------------------------------------------------------


UPLOADS = [{"filename": "q3.csv", "path": "uploads/q3.csv", "size": 2048}]


async def test_uploads_reach_the_lead_and_its_subagents_as_a_copy(tmp_path: Path) -> None:
    seen: list[Any] = []

    def child(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            return call("list_uploaded_files")
        seen.append(request.messages[-1].tool_results[0].content)
        return call("complete", summary="listed")

    model = delegating(dict(subagent_type="general-purpose", description="d", prompt="p"), child)
    result = await runtime(tmp_path, model).run("go", uploaded_files=UPLOADS)
    lead, sub = model.requests[0], next(r for r in model.requests if not is_lead(r))
    assert "list_uploaded_files" in {t.name for t in lead.tools} and "list_uploaded_files" in {
        t.name for t in sub.tools
    }
    assert seen == ["- q3.csv (2,048 bytes) at uploads/q3.csv"]
    assert [s.status for s in result.subagents] == ["completed"]
    explore = delegating(dict(subagent_type="explore", description="d", prompt="p"), call("complete", summary="x"))
    await runtime(tmp_path, explore).run("go", uploaded_files=UPLOADS)
    sub = next(r for r in explore.requests if not is_lead(r))
    assert "list_uploaded_files" not in {t.name for t in sub.tools}  # its explicit list does not name it


@pytest.mark.parametrize("state", [None, "q3.csv", [{"size": 1}], [{"filename": ""}], ["q3.csv"]])
async def test_a_missing_or_malformed_uploads_state_offers_no_tool(tmp_path: Path, state: Any) -> None:
    model = ScriptedModel([reply("ok")])
    await runtime(tmp_path, model).run("go", uploaded_files=state)
    assert "list_uploaded_files" not in {t.name for t in model.requests[0].tools}


async def test_an_empty_uploads_list_is_valid_and_says_so(tmp_path: Path) -> None:
    model = ScriptedModel([call("list_uploaded_files"), reply("ok")])
    await runtime(tmp_path, model).run("go", uploaded_files=[])
    assert task_result(model.requests[1]) == "No files have been uploaded in this conversation."


async def test_batch_items_never_get_the_uploads_tool(tmp_path: Path) -> None:
    lister = Subagent(name="lister", description="Lists.", tools=["list_uploaded_files", "read_file"])
    model = ScriptedModel([call("complete", summary="done")])
    await runtime(tmp_path, model, subagents=[lister]).run_task(subagent_type="lister", prompt="p")
    assert [t.name for t in model.requests[0].tools] == ["read_file", "complete"]
