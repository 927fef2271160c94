"""Threads from the shell: `delegate run PROMPT --continue [RUN_ID]`, `delegate runs list --thread`,
and a second turn killed with SIGKILL that `--resume` ends as an uninterrupted one; all through
the real CLI against the loopback OpenAI server."""

from __future__ import annotations

import json
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.testing import is_lead
from tests.cli_support import run_cli
from tests.durable_support import (
    FINAL_ANSWER,
    RUN_ARGS,
    cli_env,
    comparable,
    keyed_responder,
    run_json,
    wait_for,
    workspace_files,
)
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.test_run_crashes import CHECKPOINTS, Processes, procs

__all__ = ["procs"]  # the fixture, used here too

TRANSCRIPT_ONLY = "TRANSCRIPT-ONLY-9c1"
"""What the subagent reads: in its transcript, never in its summary."""


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def this_turn(body: dict[str, Any]) -> dict[str, Any]:
    """The lead's request with only this turn's messages (the system prompt, then from its prompt
    on): what `keyed_responder` keys on, so each turn of a thread plays its script afresh."""
    messages = body["messages"]
    if not is_lead(body):
        return body
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return body | {"messages": [messages[0], *messages[last_user:]]}


def thread_responder(body: dict[str, Any]) -> Reply | Fault:
    """The lead delegates one look per turn, then answers naming its prompt; the subagent reads
    `secret.txt` and completes with a summary that does not quote it."""
    messages = body["messages"]
    if is_lead(body):
        turn = this_turn(body)["messages"]
        prompt = _text(turn[1])
        if len(turn) == 2:
            look = {"subagent_type": "general-purpose", "description": "look", "prompt": f"look into {prompt}"}
            return Reply(tool_calls=[("task", look)], prompt_tokens=100, completion_tokens=10)
        return Reply(content=f"Answer to {prompt}.", prompt_tokens=200, completion_tokens=20)
    if messages[-1]["role"] == "user":
        return Reply(tool_calls=[("read_file", {"path": "secret.txt"})])
    return Reply(tool_calls=[("complete", {"summary": "looked into it"})])


@pytest.fixture
def threads_server() -> Iterator[OpenAIServer]:
    with OpenAIServer(thread_responder) as server:
        yield server


def _lead_requests(server: OpenAIServer) -> list[dict[str, Any]]:
    return [body for body in server.requests if is_lead(body)]


def test_run_continue_gives_the_lead_the_first_exchange_and_no_subagent_transcript(
    threads_server: OpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text(TRANSCRIPT_ONLY)
    env, where = cli_env(threads_server.base_url), ["-w", str(tmp_path), "--model", "openai:m", "--json"]
    first = run_json(run_cli(["run", "map the auth flow", *where], env))
    assert any(TRANSCRIPT_ONLY in json.dumps(b) for b in threads_server.requests)  # the subagent read it
    seen = len(_lead_requests(threads_server))
    second = run_json(run_cli(["run", "now fix the second point", "--continue", *where], env))
    assert second["status"] == "completed" and second["final"] == "Answer to now fix the second point."
    assert (second["thread_id"], second["previous_run_id"]) == (first["run_id"], first["run_id"])
    request = json.dumps(_lead_requests(threads_server)[seen])
    assert "map the auth flow" in request and "Answer to map the auth flow." in request
    assert "looked into it" in request  # the task result the lead got in the first turn
    assert TRANSCRIPT_ONLY not in request

    # the run id right after --continue, before the prompt, means the same
    third = run_json(run_cli(["run", "--continue", second["run_id"], "and the third", *where], env))
    assert third["previous_run_id"] == second["run_id"] and third["thread_id"] == first["run_id"]
    listed = run_cli(["runs", "list", "--thread", first["run_id"], "--json", "-w", str(tmp_path)], env)
    lines = json.loads(listed.stdout)  # one JSON array
    assert [r["run_id"] for r in lines] == [first["run_id"], second["run_id"], third["run_id"]]
    assert [r["usage"] for r in lines] == [first["usage"], second["usage"], third["usage"]]
    table = run_cli(["runs", "list", "-w", str(tmp_path)], env | {"COLUMNS": "200"})
    assert table.returncode == 0 and "thread" in table.stdout and first["run_id"] in table.stdout


def test_a_second_continue_of_the_same_run_is_refused_naming_the_thread_s_last_run(
    threads_server: OpenAIServer, tmp_path: Path
) -> None:
    env, where = cli_env(threads_server.base_url), ["-w", str(tmp_path), "--model", "openai:m", "--json"]
    first = run_json(run_cli(["run", "one", *where], env))
    second = run_json(run_cli(["run", "two", "--continue", first["run_id"], *where], env))
    again = run_cli(["run", "deux", "--continue", first["run_id"], *where], env)
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"error: run {first['run_id']} was already continued by run {second['run_id']} (thread {first['run_id']}): "
        f"continue the thread's last run, {second['run_id']}"
    )


def test_continue_with_nothing_to_continue_and_a_stray_run_id_say_what_to_do(tmp_path: Path) -> None:
    env = cli_env("http://127.0.0.1:9")
    nothing = run_cli(["run", "hi", "--continue", "-w", str(tmp_path), "--model", "openai:m"], env)
    assert nothing.returncode == 2
    assert "there is no run in this workspace to continue: start one with `delegate run PROMPT`" in nothing.stderr
    stray = run_cli(["run", "hi", "run_abc", "-w", str(tmp_path), "--model", "openai:m"], env)
    assert stray.returncode == 2 and "a RUN_ID goes with --continue" in stray.stderr
    unknown = run_cli(["runs", "list", "--thread", "run_nope", "-w", str(tmp_path)], env)
    assert unknown.returncode == 2 and "no thread 'run_nope'" in unknown.stderr


def thread_keyed_responder(body: dict[str, Any]) -> Reply | Fault:
    """`keyed_responder`'s script, played afresh by each turn of a thread."""
    return keyed_responder(this_turn(body))


@pytest.fixture
def keyed_server() -> Iterator[OpenAIServer]:
    FINAL_ANSWER.set()
    try:
        with OpenAIServer(thread_keyed_responder) as server:
            yield server
    finally:
        FINAL_ANSWER.set()


def test_a_second_turn_killed_with_sigkill_resumes_to_the_uninterrupted_result(
    procs: Processes, keyed_server: OpenAIServer, tmp_path: Path
) -> None:
    env = cli_env(keyed_server.base_url)
    results: dict[str, dict[str, Any]] = {}
    for name in ("baseline", "killed"):
        root = tmp_path / name
        root.mkdir()
        first = run_json(run_cli(["run", "write the notes", *RUN_ARGS, "-w", str(root)], env))
        results[name] = first
    baseline_root = tmp_path / "baseline"
    second = ["run", "write them again", "--continue", *RUN_ARGS, "-w"]
    uninterrupted = run_json(run_cli([*second, str(baseline_root)], env))
    assert uninterrupted["status"] == "completed"

    root = tmp_path / "killed"
    store = Store.for_workspace(root)
    FINAL_ANSWER.clear()  # the turn cannot end before its kill lands
    proc = procs.spawn([*second, str(root)], env, tmp_path / "killed.log")
    target = random.Random(7).randint(1, CHECKPOINTS - 1)
    assert _kill_when_second(proc, store, results["killed"]["run_id"], target)
    killed = store.list_runs()[0]
    assert killed.status == "interrupted" and killed.previous_run_id == results["killed"]["run_id"]
    FINAL_ANSWER.set()
    resumed = run_json(run_cli(["run", "--resume", killed.id, *RUN_ARGS[:2], "--json", "-w", str(root)], env))
    store.close()
    assert comparable(resumed) == comparable(uninterrupted)
    assert resumed["previous_run_id"] == results["killed"]["run_id"]
    assert workspace_files(root) == workspace_files(baseline_root)


def _kill_when_second(proc: subprocess.Popen[str], store: Store, first_run: str, target: int) -> bool:
    """SIGKILL `proc` once the thread's second run (the store's newest) has `target` checkpoints."""

    def reached() -> bool:
        runs = store.list_runs()
        second = runs[0] if runs and runs[0].id != first_run else None
        return proc.poll() is not None or (second is not None and len(store.checkpoints(second.id)) >= target)

    wait_for(reached, what=f"{target} checkpoints of the second turn")
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return True
