"""Stopping a running workflow's agents from the faces users have (issue 36, item 5): one agent
with `delegate runs stop RUN AGENT` and `POST /runs/{id}/agents/{agent}/stop` ends `cancelled`
with its usage kept while the others go on; the whole workflow with `delegate runs cancel` and
`POST /runs/{id}/cancel` ends `cancelled`, its record saying which agents ended so."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from delegate import RunLimits, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import call
from tests.cli_support import delegate, run_cli
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_batch_cli import env_for
from tests.test_server_api import client, read_events, serving
from tests.workflow_support import task_of

MODEL = "openai:loopback-model"
ONE_STUCK = 'r = parallel(["one", "stuck", "two"])\nagent("after")\n[x if x is None else x["summary"] for x in r]'
TWO_STUCK = 'agent("a")\nparallel(["stuck b", "stuck c"])\nagent("never reached")'


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


class Held:
    """A loopback model whose agents of a task starting with `stuck` wait until `release` (at
    most a minute); the others complete at once, 12 tokens in and 3 out."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked: list[str] = []

    def answer(self, body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        self.asked.append(task)
        if task.startswith("stuck"):
            self.release.wait(60)
        return Reply(tool_calls=[("complete", {"summary": f"did {task}"})], prompt_tokens=12, completion_tokens=3)


def started_workflow(ws: Path, script: str, env: dict[str, str]) -> subprocess.Popen[str]:
    path = ws.parent / "plan.py"
    path.write_text(script)
    args = delegate("workflow", "run", str(path), "-m", MODEL, "--workspace", str(ws), "--max-parallel", "8", "--json")
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def only_run_id(ws: Path) -> str:
    def found() -> str | None:
        if not (ws / ".delegate").exists():
            return None
        with Store.for_workspace(ws) as store:
            runs = store.list_runs()
        return runs[0].id if runs else None

    return wait_for(found, "the workflow's run is stored")


def test_runs_stop_ends_one_workflow_agent_cancelled_with_its_usage_and_the_others_go_on(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    held = Held()
    with OpenAIServer(held.answer) as server:
        env = env_for(server.base_url)
        proc = started_workflow(ws, ONE_STUCK, env)
        try:
            run_id = only_run_id(ws)
            wait_for(lambda: "stuck" in held.asked and "one" in held.asked, "the stuck agent asks its model")
            stop = wait_for(  # refused (exit 2) until the agent's start is stored
                lambda: (
                    (done := run_cli(["runs", "stop", run_id, "sub2", "--reason", "wrong", "-w", str(ws)], env))
                    and done.returncode != 2
                    and done
                ),
                "runs stop finds sub2",
            )
            out, err = proc.communicate(timeout=120)
        finally:
            held.release.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == f"run {run_id}: sub2 cancelled (stopped)"
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "completed" and result["result"] == ["did one", None, "did two"]
    records = {s["description"]: s for s in result["subagents"]}
    stuck = records["stuck"]
    assert (stuck["status"], stuck["stop_reason"]) == ("cancelled", "stopped") and "wrong" in stuck["error"]
    assert stuck["usage"]["requests"] == 1  # its request was cut: counted, its tokens unknown
    assert records["after"]["status"] == "completed"  # the script went on
    assert {s["status"] for d, s in records.items() if d != "stuck"} == {"completed"}
    assert result["workflow"]["line"].startswith("4 agents: 3 completed")
    assert result["usage"]["input_tokens"] == 3 * 12  # the three that answered, counted once


def test_runs_cancel_stops_the_whole_workflow_and_its_record_says_which_agents_ended_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    held = Held()
    with OpenAIServer(held.answer) as server:
        env = env_for(server.base_url)
        proc = started_workflow(ws, TWO_STUCK, env)
        try:
            run_id = only_run_id(ws)
            wait_for(lambda: {"stuck b", "stuck c"} <= set(held.asked), "both stuck agents ask their model")
            cancel = run_cli(["runs", "cancel", run_id, "-w", str(ws)], env)
            out, _ = proc.communicate(timeout=120)
        finally:
            held.release.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    assert cancel.returncode == 0, cancel.stderr
    result = json.loads(out)
    assert proc.returncode == 1 and result["status"] == "cancelled"
    assert "never reached" not in held.asked
    record = result["workflow"]
    assert record["status"] == "cancelled"
    assert {a["label"]: a["status"] for a in record["agents"]} == {
        "a": "completed",
        "stuck b": "cancelled",
        "stuck c": "cancelled",
    }
    shown = json.loads(run_cli(["runs", "show", run_id, "--json", "-w", str(ws)], env).stdout)
    assert shown["status"] == "cancelled" and shown["workflow"]["agents"] == record["agents"]


def http_answer(release: threading.Event, asked: list[str]) -> Callable[[ModelRequest], Any]:
    async def respond(request: ModelRequest) -> ModelResponse:
        task = task_of(request)
        asked.append(task)
        if task.startswith("stuck"):
            await asyncio.to_thread(release.wait, 60)
        return call("complete", summary=f"did {task}")

    return respond


def test_http_stops_one_workflow_agent_then_another_workflow_whole(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    release = threading.Event()
    asked: list[str] = []
    limits = RunLimits(max_parallel=8)
    try:
        with (
            serving(workspace, store, http_answer(release, asked), limits=limits) as server,
            client(server, tokens["alice"]) as alice,
        ):
            one = alice.post("/runs", json={"workflow": ONE_STUCK}).json()["run_id"]
            stopped = wait_for(  # 404 until the agent's start is stored
                lambda: (
                    (r := alice.post(f"/runs/{one}/agents/sub2/stop", json={"reason": "wrong"}))
                    and r.status_code != 404
                    and r
                ),
                "the stop finds sub2",
            )
            read_events(alice, f"/runs/{one}/events")
            first = alice.get(f"/runs/{one}").json()

            whole = alice.post("/runs", json={"workflow": TWO_STUCK}).json()["run_id"]
            wait_for(lambda: {"stuck b", "stuck c"} <= set(asked), "both stuck agents ask their model")
            cancelled = alice.post(f"/runs/{whole}/cancel")
            read_events(alice, f"/runs/{whole}/events")
            second = alice.get(f"/runs/{whole}").json()
            release.set()  # the cut requests' threads end before the server stops
    finally:
        release.set()

    assert stopped.status_code == 202, stopped.text
    assert first["status"] == "completed" and first["result"] == ["did one", None, "did two"]
    stuck = next(s for s in first["subagents"] if s["id"] == "sub2")
    assert (stuck["status"], stuck["stop_reason"]) == ("cancelled", "stopped") and "wrong" in stuck["error"]
    assert stuck["usage"]["requests"] == 1
    assert {a["label"]: a["status"] for a in first["workflow"]["agents"]}["after"] == "completed"

    assert cancelled.status_code in (200, 202), cancelled.text
    assert second["status"] == "cancelled" and second["workflow"]["status"] == "cancelled"
    labels = {a["label"]: a["status"] for a in second["workflow"]["agents"]}
    assert labels == {"a": "completed", "stuck b": "cancelled", "stuck c": "cancelled"}
