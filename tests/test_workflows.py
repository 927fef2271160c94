"""Workflows through the Python API: a plan in code whose agents are the run's subagents, counted
by whether their work passed; a sandbox a script cannot leave; typed results; `parallel`'s
isolation; a budget; a resume that answers finished agents from the journal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from delegate import RunLimits, Runtime, UserError
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from delegate.workflows import ScriptLimits, Workflow
from tests.workflow_support import MAP_REVIEW_MERGE, by_task, files_args, summary_of, task_of


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# project\n")
    for i in range(3):
        (root / "src" / f"file{i}.txt").write_text(f"text {i}\n")
    return root


async def run_workflow(ws: Path, script: str, model: Any, **kwargs: Any) -> Any:
    limits = kwargs.pop("limits", RunLimits(max_parallel=None))
    args = kwargs.pop("args", {})
    async with Runtime(model=model, workspace=ws, limits=limits, **kwargs) as rt:
        return await rt.run("", workflow=Workflow(script=script, args=args))


async def test_a_300_agent_map_review_merge_completes_with_counts_that_say_what_passed(ws: Path) -> None:
    result = await run_workflow(ws, MAP_REVIEW_MERGE, by_task(summary_of), args=files_args(100))

    assert result.status == "completed"
    line = "300 agents: 290 completed, 96 with every criterion holding, 4 with a criterion not holding, 10 failed"
    assert result.workflow["line"] == line
    assert result.final.startswith(line)
    assert result.result == {"accepted": 90, "summaries": 100}
    assert [p["name"] for p in result.workflow["phases"]] == ["summarise", "review", "merge"]
    assert result.workflow["phases"][0]["holding"] == 96 and result.workflow["phases"][1]["failed"] == 10
    assert len(result.subagents) == 300 and result.usage.requests == 290  # the 10 failed got no answer
    failed = [a for a in result.workflow["agents"] if a["status"] != "completed"]
    assert len(failed) == 10 and all(a["phase"] == "review" and a["label"].startswith("review B") for a in failed)
    assert {a["line"] for a in result.workflow["agents"] if a["phase"] == "summarise"} == {3}  # parallel(...)


async def test_completed_is_never_read_as_the_criteria_holding(ws: Path) -> None:
    script = 'parallel([call("a", acceptance=["file:missing.md exists"]), call("b")])'
    result = await run_workflow(ws, script, by_task(lambda t: "ok"))

    assert result.status == "completed"  # the script ran to its end ...
    counts = result.workflow["counts"]
    assert counts["completed"] == 2 and counts["holding"] == 0 and counts["not_holding"] == 1
    verdicts = {a["label"]: a["verdict"] for a in result.workflow["agents"]}
    assert verdicts == {"a": "does not hold", "b": "none"}  # ... and says what its agents' work was


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("open('/etc/passwd').read()", "no file system"),
        ("import socket", "socket"),
        ("import time\nx = time.time()", "time.time() is not available"),
        ("import random\nx = random.random()", "os.urandom() is not available"),
        ("from datetime import datetime\nx = datetime.now()", "datetime.now() is not available"),
        ("while True:\n    pass", "TimeoutError: feed time limit exceeded"),
        ("x = [0] * 10**9", "MemoryError"),
        ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError"),
        ("x = __import__('os').system('id')", "not available"),
    ],
)
async def test_a_script_that_reaches_out_of_its_sandbox_is_stopped_with_a_clear_error(
    ws: Path, line: str, says: str
) -> None:
    script = f'first = agent("before", label="before")\n{line}\nagent("after")'
    workflow = Workflow(script=script, limits=ScriptLimits(cpu_seconds=1.0, memory=64 * 1024 * 1024))
    async with Runtime(model=by_task(lambda t: "ok"), workspace=ws) as rt:
        result = await rt.run("", workflow=workflow)

    assert result.status == "error"
    assert says in (result.error or "")
    assert [s.description for s in result.subagents] == ["before"]  # it ran, nothing after did
    assert result.subagents[0].status == "completed"
    assert (ws / "README.md").read_text() == "# project\n"


async def test_a_script_error_names_its_line(ws: Path) -> None:
    result = await run_workflow(ws, 'x = 1\ny = {}["missing"]\n', by_task(lambda t: "ok"))

    assert result.status == "error"
    assert result.error is not None and result.error.startswith("the workflow script failed at line 2: KeyError")


async def test_parallel_gives_none_for_a_failed_agent_beside_the_others(ws: Path) -> None:
    def answer(task: str) -> str:
        if task == "two":
            raise RuntimeError("model down")
        return f"did {task}"

    script = 'r = parallel(["one", "two", "three"])\n[x if x is None else x["summary"] for x in r]'
    result = await run_workflow(ws, script, by_task(answer))

    assert result.status == "completed"
    assert result.result == ["did one", None, "did three"]
    assert "3 agents: 2 completed" in result.final and "1 failed" in result.final


async def test_agent_raises_for_a_failed_agent_and_the_script_may_catch_it(ws: Path) -> None:
    def answer(task: str) -> str:
        raise RuntimeError("model down")

    script = 'try:\n    agent("x")\nexcept RuntimeError as e:\n    r = str(e)\nr'
    result = await run_workflow(ws, script, by_task(answer))

    assert result.status == "completed"
    assert result.result.startswith("agent sub1 (x) ended error")


async def test_a_schema_typed_agent_is_retried_then_its_result_validated(ws: Path) -> None:
    attempts: list[Any] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        wrong = not any(m.role == "tool" for m in request.messages)
        result: Any = {"price": "cheap"} if wrong else {"price": 4.5}
        attempts.append(result)
        return call("complete", summary="priced", result=result)

    script = (
        'r = agent("price the mug", schema={"type": "object", "properties": {"price": {"type": "number"}}, '
        '"required": ["price"]})\nr["result"]'
    )
    result = await run_workflow(ws, script, FunctionModel(respond))

    assert result.status == "completed"
    assert result.result == {"price": 4.5}
    assert attempts == [{"price": "cheap"}, {"price": 4.5}]


async def test_a_spent_budget_stops_new_agents_and_the_workflow_ends_with_what_it_has(ws: Path) -> None:
    script = (
        "done = []\nfor i in range(20):\n    done.append(parallel(['task ' + str(i)])[0])\nlen([d for d in done if d])"
    )
    limits = RunLimits(token_budget=60, max_parallel=None)  # each agent spends 15 tokens
    result = await run_workflow(ws, script, by_task(lambda t: "ok"), limits=limits)

    assert result.status == "completed"
    assert result.result == 4
    assert result.workflow["counts"]["not_started"] == 16
    assert "16 not started" in result.workflow["line"]
    assert result.usage.total_tokens == 60


@pytest.mark.parametrize(("workflow_agents", "max_subagents"), [(3, None), (None, 3), (3, 4), (4, 3)])
async def test_a_workflow_starts_no_more_agents_than_the_tighter_of_the_runs_caps(
    ws: Path, workflow_agents: int | None, max_subagents: int | None
) -> None:
    script = "r = parallel(['t' + str(i) for i in range(5)])\nlen([x for x in r if x])"
    limits = RunLimits(workflow_agents=workflow_agents, max_subagents=max_subagents, max_parallel=None)
    result = await run_workflow(ws, script, by_task(lambda t: "ok"), limits=limits)

    assert result.result == 3 and result.workflow["counts"]["not_started"] == 2


async def test_an_unknown_agent_type_names_the_available_ones(ws: Path) -> None:
    result = await run_workflow(ws, 'agent("x", type="nope")', by_task(lambda t: "ok"))

    assert result.status == "error"
    assert "unknown agent type 'nope'; available: general-purpose" in (result.error or "")


async def test_read_and_glob_see_the_workspace_and_nothing_behind_it(ws: Path) -> None:
    (ws / ".delegate").mkdir(exist_ok=True)
    (ws / ".delegate" / "secret.txt").write_text("no")
    script = 'files = glob("src/*.txt")\n[files, read(files[0]), read("../x") if False else 0]'
    result = await run_workflow(ws, script, by_task(lambda t: "ok"))
    assert result.result == [["src/file0.txt", "src/file1.txt", "src/file2.txt"], "text 0\n", 0]

    hidden = await run_workflow(ws, 'read(".delegate/secret.txt")', by_task(lambda t: "ok"))
    assert hidden.status == "error" and "PermissionError" in (hidden.error or "")


async def test_an_empty_script_is_refused() -> None:
    with pytest.raises(UserError, match="script is empty"):
        Workflow(script="  \n")


async def test_a_killed_workflow_resumes_answering_finished_agents_from_its_journal(ws: Path) -> None:
    asked: list[str] = []
    release = asyncio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        task = task_of(request)
        asked.append(task)
        if task.startswith("slow"):
            await release.wait()
        return call("complete", summary=f"did {task}")

    script = "a = parallel(['quick ' + str(i) for i in range(5)] + ['slow'])\nlen([x for x in a if x])"
    model = FunctionModel(respond)
    store = str(ws.parent / "store.db")
    rt = Runtime(model=model, workspace=ws, store=store, limits=RunLimits(max_parallel=None))
    going = asyncio.create_task(rt.run("", workflow=script))
    while len([t for t in asked if t.startswith("quick")]) < 5 or len(asked) < 6:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # the finished agents' records reach the store
    rt.interrupt()
    first = await going
    assert first.status == "interrupted"

    asked.clear()
    release.set()
    resumed = await rt.resume(first.run_id)
    await rt.aclose()

    assert resumed.status == "completed" and resumed.result == 6
    assert asked == ["slow"]  # the five that finished were not asked again
    assert resumed.usage.requests == 6
    assert sum(a["replayed"] for a in resumed.workflow["agents"]) == 5


async def test_a_changed_script_replays_its_unchanged_prefix_and_says_where_it_diverged(ws: Path) -> None:
    asked: list[str] = []
    release = asyncio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        task = task_of(request)
        asked.append(task)
        if task == "three":
            await release.wait()
        return call("complete", summary=f"did {task}")

    rt = Runtime(model=FunctionModel(respond), workspace=ws, store=str(ws.parent / "store.db"))
    going = asyncio.create_task(rt.run("", workflow='agent("one")\nagent("two")\nagent("three")'))
    while "three" not in asked:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    rt.interrupt()
    first = await going
    assert first.status == "interrupted"

    asked.clear()
    release.set()
    changed = Workflow(script='agent("one")\nagent("TWO")\nagent("three")')
    again = await rt.resume(first.run_id, workflow=changed)
    await rt.aclose()

    assert again.status == "completed"
    assert asked == ["TWO", "three"]  # the prefix before the change was answered from the journal
    assert again.workflow["diverged_at_line"] == 2


async def test_the_lead_runs_a_workflow_and_sees_its_value_beside_the_count_line(ws: Path) -> None:
    seen: list[str] = []
    script = 'r = parallel([call("a", acceptance=["file:README.md exists"]), call("b")])\n[x["summary"] for x in r]'

    async def respond(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            results = [p for m in request.messages if m.role == "tool" for p in m.parts]
            if not results:
                return call("workflow", script=script, description="two agents")
            seen.append(str(getattr(results[-1], "content", "")))
            return reply("done")
        return call("complete", summary=f"did {task_of(request)}")

    async with Runtime(model=FunctionModel(respond), workspace=ws) as rt:
        result = await rt.run("summarise a and b")

    assert result.status == "completed" and result.final == "done"
    line = "2 agents: 2 completed, 1 with every criterion holding, 0 with a criterion not holding, 0 failed"
    assert seen[0].startswith(line) and '"did b"' in seen[0]
    assert [s.description for s in result.subagents] == ["a", "b"]


async def test_agents_of_a_workflow_cannot_start_one(ws: Path) -> None:
    tools: list[list[str]] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            tools.append([t.name for t in request.tools])
            done = any(m.role == "tool" for m in request.messages)
            return reply("done") if done else call("workflow", script='agent("x")', description="one")
        tools.append([t.name for t in request.tools])
        return call("complete", summary="ok")

    async with Runtime(model=FunctionModel(respond), workspace=ws) as rt:
        await rt.run("go")

    assert "workflow" in tools[0]
    assert all("workflow" not in names and "task" not in names for names in tools[1:-1])
