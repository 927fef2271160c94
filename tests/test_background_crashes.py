"""Background subagents killed with SIGKILL mid-flight, through the real CLI: one running, one
stopped, one in a follow-up. After the kill no record reads `running`; after `--resume` what
finished is not asked (nor paid for) again, the stopped one is not started again, and the
follow-up ends once."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.testing import is_lead
from tests.cli_support import run_cli
from tests.durable_support import cli_env, only_run, run_json, wait_for
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_background_cli import background, last_tool, turns, user_texts
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture

ARGS = ("--model", "openai:m", "--json")


class Crew:
    """The lead starts three background subagents (`a` runs long, `b` ends at once, `c` is stopped),
    waits for `b`, stops `c`, then sends `b` a follow-up, and waits for all. `a` and the follow-up
    hold until `release` (`holding` counts those holding); every request is kept in `bodies`."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.holding: set[str] = set()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.bodies.append(body)
        if is_lead(body):
            return self.lead(body)
        said = user_texts(body)
        job = said[0]
        if job == "job c":
            if turns(body) == 0:
                return Reply(tool_calls=[("list_dir", {"path": "."})], prompt_tokens=7, completion_tokens=1)
            self._hold("c")  # until stopped (the stop cancels the request)
        elif job == "job a" or len(said) > 1:
            self._hold("a" if job == "job a" else "follow-up")
        summary = f"did {said[-1]} after {len(said)} message(s)"
        return Reply(tool_calls=[("complete", {"summary": summary})], prompt_tokens=30, completion_tokens=6)

    def _hold(self, who: str) -> None:
        with self.lock:
            self.holding.add(who)
        self.release.wait(60)

    def lead(self, body: dict[str, Any]) -> Reply:
        match turns(body):
            case 0:
                return Reply(tool_calls=[("task", background(["job a", "job b", "job c"], "three"))])
            case 1:
                return Reply(tool_calls=[("task_wait", {"ids": ["sub2"]})])
            case 2:
                wait_for(lambda: "c" in self.holding, what="c to be working")
                return Reply(tool_calls=[("task_stop", {"id": "sub3", "reason": "not needed"})])
            case 3:
                return Reply(tool_calls=[("task_message", {"id": "sub2", "message": "job b again"})])
            case 4:
                return Reply(tool_calls=[("task_wait", {"timeout_s": 60})])
            case _:
                return Reply(content="done: " + last_tool(body))

    def asked(self, job: str, messages: int) -> int:
        """How many requests the subagent given `job` made with `messages` user messages."""
        said = [user_texts(b) for b in self.bodies if not is_lead(b)]
        return sum(1 for texts in said if len(texts) == messages and texts[0] == job)


@pytest.fixture
def crew() -> Crew:
    return Crew()


def test_a_run_killed_with_subagents_running_stopped_and_in_a_follow_up_resumes_with_every_status_true(
    procs: Processes, crew: Crew, store_url: str, tmp_path: Path
) -> None:
    try:
        with OpenAIServer(crew) as server, Store.open(store_url) as store:
            env = cli_env(server.base_url, db=store_url)
            proc = procs.spawn(["run", "three jobs", *ARGS, "-w", str(tmp_path)], env, tmp_path / "run.log")
            wait_for(lambda: {"a", "follow-up"} <= crew.holding, what="a and the follow-up to be working")
            run = only_run(store)
            assert run is not None

            def stored() -> bool:
                answers = [c for c in store.checkpoints(run.id) if c.kind == "answer" and "/" not in c.key]
                records = {s.id: s.status for s in store.subagent_records(run.id)}
                return len(answers) >= 4 and records.get("sub3") == "cancelled"

            wait_for(stored, what="the lead's answers and sub3's record to be stored")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)

            shown = run_json(run_cli(["runs", "show", run.id, "--json", "-w", str(tmp_path)], env=env))
            assert shown["status"] == "interrupted"
            statuses = {s["id"]: (s["status"], s["messages"]) for s in shown["subagents"]}
            assert statuses == {"sub2": ("completed", 0), "sub3": ("cancelled", 0)}  # no `running` ghost

            crew.release.set()
            result = run_json(run_cli(["run", "--resume", run.id, *ARGS, "-w", str(tmp_path)], env=env))
    finally:
        crew.release.set()
    records = {s["id"]: (s["status"], s["stop_reason"], s["messages"]) for s in result["subagents"]}
    assert records == {
        "sub1": ("completed", "stop_tool", 0),
        "sub2": ("completed", "stop_tool", 1),
        "sub3": ("cancelled", "stopped", 0),
    }
    assert crew.asked("job b", 1) == 1  # b's first answer was not asked again
    assert crew.asked("job c", 1) == 2  # nor the stopped c's: started once, never again
    assert crew.asked("job b", 2) == 2  # the follow-up the kill cut short ran once more, and ended once
    assert result["status"] == "completed"
