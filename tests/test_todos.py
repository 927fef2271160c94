"""Todo lists (`todo_write`, `todo_read`): each agent its own, a subagent's starting empty (spec
000: a subagent does not inherit its lead's todos), shown in the live tree and `runs show`, and
kept through a resume after SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from rich.console import Console

from delegate import Runtime, Store
from delegate.cli._render import RunView
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.cli_support import delegate, run_cli, scrubbed_env
from tests.durable_support import only_run, wait_for
from tests.loopback_openai import OpenAIServer, Reply

PLAN = [
    {"content": "read the code", "status": "completed"},
    {"content": "write the report", "status": "in_progress"},
    {"content": "check the links", "status": "pending"},
]


def planning(request: ModelRequest) -> ModelResponse:
    """The lead writes its plan, delegates, then answers; the subagent reads its own list first,
    then writes one of its own, then completes with what it read."""
    done = [r for m in request.messages for r in m.tool_results]
    if is_lead(request):
        if not done:
            return call("todo_write", todos=PLAN)
        if len(done) == 1:
            return call("task", subagent_type="general-purpose", description="links", prompt="check the links")
        return reply("done")
    if not done:
        return call("todo_read")
    if len(done) == 1:
        return call("todo_write", todos=[{"content": "open each link", "status": "in_progress"}])
    return call("complete", summary=done[0].content)


async def test_a_subagent_gets_its_own_empty_todo_list_never_its_leads(tmp_path: Path) -> None:
    view = RunView()
    db = f"sqlite:///{tmp_path / 'store.db'}"
    result = await Runtime(model=FunctionModel(planning), workspace=tmp_path / "ws", store=db, sinks=[view]).run("go")
    [record] = result.subagents
    assert record.summary == "Your todo list is empty."
    assert result.todos == {"lead": PLAN, "sub1": [{"content": "open each link", "status": "in_progress"}]}
    console = Console(width=120, record=True)
    console.print(view.render())
    lines = console.export_text().splitlines()
    assert [line.strip("│├└─ ") for line in lines[1:4]] == [
        "[x] read the code",
        "[>] write the report",
        "[ ] check the links",
    ]
    assert lines[5].strip("│├└─ ") == "[>] open each link"  # under its subagent's line
    shown = run_cli(["runs", "show", result.run_id, "--workspace", str(tmp_path / "ws"), "--db", db])
    assert "todos of lead (1/3 completed):\n    [x] read the code\n    [>] write the report" in shown.stdout
    as_json = json.loads(run_cli(["runs", "show", "--json", "--workspace", str(tmp_path / "ws"), "--db", db]).stdout)
    assert as_json["todos"]["lead"] == PLAN


async def test_a_bad_todo_list_is_an_error_the_model_reads(tmp_path: Path) -> None:
    turns = iter([call("todo_write", todos=[{"content": "x", "status": "doing"}]), reply("ok")])
    model = FunctionModel(lambda request: next(turns))
    result = await Runtime(model=model, workspace=tmp_path, store=False).run("go")
    refused = model.requests[1].messages[-1].tool_results[0]
    assert refused.is_error and "status is one of pending, in_progress, completed, not 'doing'" in refused.content
    assert result.todos == {}


def _lead_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def test_a_run_killed_after_its_lead_wrote_its_plan_resumes_with_the_plan(tmp_path: Path) -> None:
    released = threading.Event()

    def planning_then_hanging(body: dict[str, Any]) -> Reply:
        if _lead_turns(body) == 0:
            return Reply(tool_calls=[("todo_write", {"todos": PLAN})])
        released.wait(timeout=60)  # the process is killed while it waits for this answer
        return Reply(content="too late")

    def reading_the_plan(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool" and "write the report" in str(last["content"]):
            return Reply(content=f"resumed with: {last['content']}")
        return Reply(tool_calls=[("todo_read", {})])

    args = ["--model", "openai:m", "--json", "--workspace", str(tmp_path)]
    with OpenAIServer(planning_then_hanging) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        run = subprocess.Popen(
            delegate("run", "plan the report", *args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for(lambda: len(server.requests) >= 2, timeout=60, what="the lead's second request")
            run.send_signal(signal.SIGKILL)
            run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait(timeout=30)
            released.set()
    with Store.for_workspace(tmp_path) as store:
        killed = only_run(store)
        assert killed is not None
        run_id = killed.id
    with OpenAIServer(reading_the_plan) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        resumed = run_cli(["run", "--resume", run_id, *args], env=env, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert out["status"] == "completed"
    assert "[>] write the report" in out["final"]  # todo_read gave the lead its list back
    assert out["todos"]["lead"] == PLAN
