"""Background subagents through the real CLI, its agents talking to a loopback OpenAI server: the
lead works while two subagents run, hears of each once, waits, stops one (`task_stop`, or
`delegate runs stop` from another process), sends a completed one a follow-up, and a run killed
with a background subagent running resumes to what an uninterrupted run gives."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.testing import is_lead
from tests.cli_support import delegate, run_cli
from tests.durable_support import cli_env, comparable, only_run, run_json, wait_for, workspace_files
from tests.loopback_openai import OpenAIServer, Reply

ARGS = ("--model", "openai:m", "--json")


def user_texts(body: dict[str, Any]) -> list[str]:
    texts: list[str] = []
    for message in body["messages"]:
        if message["role"] == "user":
            content = message["content"]
            texts.append(content if isinstance(content, str) else "".join(p.get("text", "") for p in content))
    return texts


def turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def last_tool(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")


def background(prompts: list[str], description: str = "two jobs") -> dict[str, Any]:
    return {
        "subagent_type": "general-purpose",
        "description": description,
        "prompts": prompts,
        "run_in_background": True,
    }


class Team:
    """Every agent's model. `lead` scripts the lead by its turn; a subagent answers by its first
    message: `job ...` lists the folder once, then completes (a `slow` one only when `release` is
    set, telling `holding` it waits). `bodies` keeps every request."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.holding = threading.Event()
        self.lock = threading.Lock()
        self.lead: Any = None

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.bodies.append(body)
        if is_lead(body):
            return self.lead(body)
        said = user_texts(body)
        if turns(body) == 0:
            return Reply(tool_calls=[("list_dir", {"path": "."})], prompt_tokens=20, completion_tokens=4)
        if "slow" in said[0]:
            self.holding.set()
            self.release.wait(60)
        summary = f"did {said[0]} after {len(said)} message(s)"
        return Reply(tool_calls=[("complete", {"summary": summary})], prompt_tokens=30, completion_tokens=6)

    def lead_bodies(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if is_lead(b)]


@pytest.fixture
def team() -> Team:
    return Team()


@pytest.fixture
def openai(team: Team) -> Iterator[OpenAIServer]:
    with OpenAIServer(team) as server:
        yield server
        team.release.set()  # never leave a responder thread waiting


def events_of(root: Path, run_id: str, env: dict[str, str]) -> list[dict[str, Any]]:
    proc = run_cli(["runs", "events", run_id, "--json", "-w", str(root)], env=env)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_a_lead_works_while_two_background_subagents_run_then_waits_for_both_and_finishes(
    team: Team, openai: OpenAIServer, tmp_path: Path
) -> None:
    def lead(body: dict[str, Any]) -> Reply:
        match turns(body):
            case 0:
                return Reply(tool_calls=[("task", background(["job a", "job b slow"]))])
            case 1:
                return Reply(tool_calls=[("write_file", {"path": "own.md", "content": "the lead's own work\n"})])
            case 2:
                team.release.set()  # the slow one ends only once the lead did its own work
                return Reply(tool_calls=[("task_wait", {"timeout_s": 60})])
            case _:
                return Reply(content="Both done:\n" + last_tool(body))

    team.lead = lead
    env = cli_env(openai.base_url)
    result = run_json(run_cli(["run", "do two jobs", *ARGS, "-w", str(tmp_path)], env=env))

    assert result["status"] == "completed"
    assert "2 of 2 subagents ended" in result["final"]
    assert "did job a after 1 message(s)" in result["final"] and "did job b slow" in result["final"]
    started = last_tool(team.lead_bodies()[1])
    assert started.startswith("Started sub1 (general-purpose: two jobs [1/2]) in the background.")
    records = [(s["id"], s["status"], s["background"], s["messages"]) for s in result["subagents"]]
    assert records == [("sub1", "completed", True, 0), ("sub2", "completed", True, 0)]
    shown = run_json(run_cli(["runs", "show", result["run_id"], "--json", "-w", str(tmp_path)], env=env))
    assert [(s["background"], s["messages"]) for s in shown["subagents"]] == [(True, 0), (True, 0)]
    events = events_of(tmp_path, result["run_id"], env)
    own = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "tool.completed" and e["agent_id"] == "lead" and e["data"]["name"] == "write_file"
    )
    slow_end = next(i for i, e in enumerate(events) if e["type"] == "subagent.completed" and e["agent_id"] == "sub2")
    assert own < slow_end  # the lead's own tool call ran while its subagent did
    assert (tmp_path / "own.md").read_text() == "the lead's own work\n"


def test_the_lead_hears_of_each_finished_background_subagent_exactly_once(
    team: Team, openai: OpenAIServer, tmp_path: Path
) -> None:
    def lead(body: dict[str, Any]) -> Reply:
        told = "\n".join(user_texts(body))
        if turns(body) == 0:
            return Reply(tool_calls=[("task", background(["job a", "job b"]))])
        if "Background subagent sub1 ended" in told and "Background subagent sub2 ended" in told:
            return Reply(content="heard of both")
        time.sleep(0.02)  # the lead's own work takes a moment
        return Reply(tool_calls=[("list_dir", {"path": "."})])

    team.lead = lead
    result = run_json(run_cli(["run", "do two jobs", *ARGS, "-w", str(tmp_path)], env=cli_env(openai.base_url)))

    assert result["final"] == "heard of both"
    told = "\n".join(user_texts(team.lead_bodies()[-1]))
    assert told.count("Background subagent sub1 ended") == 1
    assert told.count("Background subagent sub2 ended") == 1
    assert "did job a after 1 message(s)" in told and "did job b after 1 message(s)" in told


def test_task_stop_stops_one_subagent_while_its_sibling_completes_and_a_follow_up_continues_the_sibling(
    team: Team, openai: OpenAIServer, tmp_path: Path
) -> None:
    def lead(body: dict[str, Any]) -> Reply:
        match turns(body):
            case 0:
                return Reply(tool_calls=[("task", background(["job a", "job b slow"]))])
            case 1:
                team.holding.wait(60)
                return Reply(tool_calls=[("task_stop", {"id": "sub2", "reason": "enough of b"})])
            case 2:
                return Reply(tool_calls=[("task_wait", {"ids": ["sub1"]})])
            case 3:
                return Reply(tool_calls=[("task_message", {"id": "sub1", "message": "now job c"})])
            case 4:
                return Reply(tool_calls=[("task_message", {"id": "sub2", "message": "go on"})])
            case _:
                return Reply(content="\n---\n".join(m["content"] for m in body["messages"] if m["role"] == "tool"))

    team.lead = lead
    env = cli_env(openai.base_url)
    result = run_json(run_cli(["run", "do two jobs", *ARGS, "-w", str(tmp_path)], env=env))

    first, second = result["subagents"]
    assert (first["status"], first["messages"], first["steps"]) == ("completed", 1, 3)
    assert (second["status"], second["stop_reason"], second["error"]) == (
        "cancelled",
        "stopped",
        "stopped: enough of b",
    )
    assert second["usage"]["input_tokens"] >= 20  # what it spent before the stop is kept
    stopped, waited, followed, refused = result["final"].split("\n---\n")[1:]
    assert stopped.startswith("Stopped sub2.") and "[cancelled]" in stopped
    assert "did job a" in waited
    assert "did job a after 2 message(s)" in followed  # it saw its earlier turn and the follow-up
    follow_up = next(b for b in team.bodies if not is_lead(b) and "now job c" in user_texts(b))
    assert user_texts(follow_up) == ["job a", "now job c"]
    assert any(m.get("tool_calls") for m in follow_up["messages"] if m["role"] == "assistant")  # its own turns
    assert refused.startswith("Error: sub2 ended cancelled (stopped) and cannot be continued")
    message_events = [e for e in events_of(tmp_path, result["run_id"], env) if e["type"] == "subagent.message"]
    assert [(e["agent_id"], e["data"]["messages"]) for e in message_events] == [("sub1", 1)]


def test_delegate_runs_stop_stops_one_foreground_subagent_from_another_process(
    team: Team, openai: OpenAIServer, tmp_path: Path
) -> None:
    def lead(body: dict[str, Any]) -> Reply:
        if turns(body) == 0:
            task = {"subagent_type": "general-purpose", "description": "two jobs", "prompts": ["job a", "job b slow"]}
            return Reply(tool_calls=[("task", task)])
        return Reply(content=last_tool(body))

    team.lead = lead
    env = cli_env(openai.base_url)
    with subprocess.Popen(
        delegate("run", "do two jobs", *ARGS, "-w", str(tmp_path)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert team.holding.wait(60)
        with Store.for_workspace(tmp_path) as store:
            run = only_run(store)
            assert run is not None

        def shown() -> str:  # the id `runs stop` takes, which `runs show` is where its help says to look
            text = run_cli(["runs", "show", run.id, "-w", str(tmp_path)], env=env).stdout
            return text if "sub2 [running] general-purpose: two jobs" in text and "sub1 [completed]" in text else ""

        wait_for(shown, what="runs show listing the completed sub1 (its record) and the running sub2 (its events)")
        stop = run_cli(["runs", "stop", run.id, "sub2", "--reason", "enough", "-w", str(tmp_path)], env=env)
        out, err = proc.communicate(timeout=120)

    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == f"run {run.id}: sub2 cancelled (stopped)"
    result = run_json(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    first, second = result["subagents"]
    assert first["status"] == "completed"
    assert (second["status"], second["stop_reason"], second["error"]) == ("cancelled", "stopped", "stopped: enough")
    assert "[cancelled]" in result["final"] and "stopped: enough" in result["final"]  # the lead got it, went on
    again = run_cli(["runs", "stop", run.id, "sub2", "-w", str(tmp_path)], env=env)
    assert again.returncode == 2 and "is completed, not running" in again.stderr


def test_stopping_a_subagent_of_an_unknown_run_or_with_a_bad_id_says_what_to_fix(tmp_path: Path) -> None:
    unknown = run_cli(["runs", "stop", "run_nope", "sub1", "-w", str(tmp_path)])
    assert unknown.returncode == 2 and "no run 'run_nope'" in unknown.stderr


HOLD = threading.Event()
"""Subagent 1's completion waits for this while a test clears it (to kill the run meanwhile)."""
HOLD.set()
HOLDING = threading.Event()


def notes_team(body: dict[str, Any]) -> Reply:
    """The lead starts two note writers in the background, writes its report meanwhile, waits for
    them and answers; each writer writes its note and completes. Usage is keyed on what is asked."""
    time.sleep(0.02)
    if is_lead(body):
        match turns(body):
            case 0:
                prompts = [f"topic {i}: write notes/{i}.md" for i in range(2)]
                task = background(prompts, "notes")
                return Reply(tool_calls=[("task", task)], prompt_tokens=100, completion_tokens=40)
            case 1:
                write = {"path": "report.md", "content": "report\n"}
                return Reply(tool_calls=[("write_file", write)], prompt_tokens=200, completion_tokens=30)
            case 2:
                return Reply(tool_calls=[("task_wait", {"timeout_s": 120})], prompt_tokens=250, completion_tokens=10)
            case _:
                return Reply(content="Report written: report.md", prompt_tokens=300, completion_tokens=20)
    n = int(user_texts(body)[0].split(":")[0].removeprefix("topic "))
    if turns(body) == 0:
        write = {"path": f"notes/{n}.md", "content": f"notes on topic {n}\n"}
        return Reply(tool_calls=[("write_file", write)], prompt_tokens=20 + n, completion_tokens=10 + n)
    if n == 1 and not HOLD.is_set():
        HOLDING.set()
        HOLD.wait(60)
    done = {"summary": f"wrote notes on topic {n}", "paths": [f"notes/{n}.md"]}
    return Reply(tool_calls=[("complete", done)], prompt_tokens=40 + n, completion_tokens=5 + n)


def test_a_run_killed_with_a_background_subagent_running_resumes_to_the_uninterrupted_result(
    tmp_path: Path,
) -> None:
    HOLD.set()
    HOLDING.clear()
    with OpenAIServer(notes_team) as server:
        env = cli_env(server.base_url)
        baseline_root, root = tmp_path / "baseline", tmp_path / "killed"
        baseline_root.mkdir()
        root.mkdir()
        baseline = run_json(run_cli(["run", "write the notes", *ARGS, "-w", str(baseline_root)], env=env))
        assert baseline["status"] == "completed"

        HOLD.clear()
        try:
            with (
                subprocess.Popen(
                    delegate("run", "write the notes", *ARGS, "-w", str(root)),
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ) as proc,
                Store.for_workspace(root) as store,
            ):
                assert HOLDING.wait(60)

                def first_stored() -> bool:
                    run = only_run(store)
                    return run is not None and any(s.id == "sub1" for s in store.subagent_records(run.id))

                wait_for(first_stored, what="sub1's record")
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                run = only_run(store)
                assert run is not None and run.status == "interrupted"
        finally:
            HOLD.set()
        resumed = run_json(run_cli(["run", "--resume", run.id, *ARGS, "-w", str(root)], env=env))

    assert comparable(resumed) == comparable(baseline)
    assert [s["background"] for s in resumed["subagents"]] == [True, True]
    assert workspace_files(root) == workspace_files(baseline_root)
