"""Calls that wait for a person, through the real CLI: `delegate run --ask Write` waits at its
subagent's write; `delegate runs approve` in another process decides; a SIGKILL while waiting,
then a decision, then `--resume` asks neither the model nor the person again."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import Store
from tests.approvals_support import Writers, waiting_calls
from tests.cli_support import delegate
from tests.durable_support import cli_env, run_json, wait_for
from tests.loopback_openai import OpenAIServer
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture

RUN = ("--model", "openai:m", "--json", "--ask", "Write")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.for_workspace(tmp_path) as opened:
        yield opened


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(delegate(*args), env=env, capture_output=True, text=True, timeout=120)


@contextmanager
def asking_run(
    procs: Processes, tmp_path: Path, *paths: str
) -> Iterator[tuple[OpenAIServer, dict[str, str], subprocess.Popen[str]]]:
    """`delegate run --ask Write` in a process of its own (its output in `run.log`), its lead
    starting a subagent to write each of `paths`, over the loopback OpenAI server: the server,
    the environment that reaches it, the process."""
    with OpenAIServer(Writers(*paths)) as server:
        env = cli_env(server.base_url)
        yield server, env, procs.spawn(["run", "write notes", *RUN, "-w", str(tmp_path)], env, tmp_path / "run.log")


def test_a_subagent_write_under_ask_waits_until_another_process_approves_it(
    procs: Processes, store: Store, tmp_path: Path
) -> None:
    with asking_run(procs, tmp_path, "notes.md") as (server, env, proc):
        (call,) = waiting_calls(store)
        shown = run_json(cli(env, "runs", "show", call.run_id, "--json", "-w", str(tmp_path)))
        assert shown["status"] == "waiting"
        (pending,) = shown["pending_approvals"]
        assert pending["tool"] == "write_file" and pending["arguments"]["path"] == "notes.md"
        assert pending["call_id"] == call.call_id and pending["agent_id"] == "sub1" and pending["requested_at"]
        assert not (tmp_path / "notes.md").exists()
        text = cli(env, "runs", "show", call.run_id, "-w", str(tmp_path)).stdout  # what to approve, and how
        assert f"waiting for a person: {call.call_id} sub1 write_file (rule Write)" in text
        assert f"delegate runs approve {call.run_id} CALL_ID" in text
        approved = cli(env, "runs", "approve", call.run_id, call.call_id, "-w", str(tmp_path))
        assert approved.returncode == 0, approved.stderr
        proc.wait(timeout=120)
        *said, last = (tmp_path / "run.log").read_text().strip().splitlines()  # stderr, then the JSON
        result = json.loads(last)
    # with no terminal to ask on, the run said on stderr that it waits, and what decides it
    assert f"`delegate runs approve {call.run_id} {call.call_id}`" in "\n".join(said)
    assert result["status"] == "completed"
    assert (tmp_path / "notes.md").read_text() == "notes for notes.md\n"
    assert result["usage"]["input_tokens"] == server.total_usage.prompt_tokens  # each answer counted once
    assert result["pending_approvals"] == []


def test_a_denial_with_a_reason_reaches_the_model_and_writes_nothing(
    procs: Processes, store: Store, tmp_path: Path
) -> None:
    with asking_run(procs, tmp_path, "notes.md") as (_, env, proc):
        (call,) = waiting_calls(store)
        denied = cli(
            env,
            "runs",
            "approve",
            call.run_id,
            "--all",
            "--deny",
            "--reason",
            "notes go elsewhere",
            "-w",
            str(tmp_path),
        )
        assert denied.returncode == 0, denied.stderr
        proc.wait(timeout=120)
        result = json.loads((tmp_path / "run.log").read_text().strip().splitlines()[-1])
    assert result["status"] == "completed"
    assert "a person denied this call of write_file: notes go elsewhere" in result["final"]
    assert not (tmp_path / "notes.md").exists()


def test_two_subagents_waiting_at_once_are_decided_apart(procs: Processes, store: Store, tmp_path: Path) -> None:
    with asking_run(procs, tmp_path, "a.md", "b.md") as (_, env, proc):
        calls = {c.arguments["path"]: c for c in waiting_calls(store, 2)}
        run_id = calls["a.md"].run_id
        assert cli(env, "runs", "approve", run_id, calls["a.md"].call_id, "-w", str(tmp_path)).returncode == 0
        wait_for(lambda: (tmp_path / "a.md").exists(), what="a.md to be written")
        assert store.get_run(run_id).status == "waiting"  # type: ignore[union-attr]  # b.md still waits
        assert cli(env, "runs", "approve", run_id, calls["b.md"].call_id, "--deny", "-w", str(tmp_path)).returncode == 0
        proc.wait(timeout=120)
    assert (tmp_path / "a.md").exists() and not (tmp_path / "b.md").exists()
    assert proc.returncode == 0


def test_a_run_killed_while_waiting_resumes_with_the_decision_given_meanwhile(
    procs: Processes, store: Store, tmp_path: Path
) -> None:
    with asking_run(procs, tmp_path, "notes.md") as (server, env, proc):
        (call,) = waiting_calls(store)
        wait_for(lambda: len(store.checkpoints(call.run_id)) >= 2, what="the answers so far to be stored")
        asked = len(server.requests)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert store.get_run(call.run_id).status == "interrupted"  # type: ignore[union-attr]
        assert cli(env, "runs", "approve", call.run_id, "--all", "-w", str(tmp_path)).returncode == 0
        resumed = cli(
            env, "run", "--resume", call.run_id, "--model", "openai:m", "--json", "--ask", "Write", "-w", str(tmp_path)
        )
        result: dict[str, Any] = run_json(resumed)
    assert result["status"] == "completed"
    assert (tmp_path / "notes.md").read_text() == "notes for notes.md\n"
    assert asked == 2 and len(server.requests) == 4  # the answers before the kill were not asked again
    assert result["usage"]["input_tokens"] == server.total_usage.prompt_tokens
    assert [a.decision for a in store.approvals(call.run_id)] == ["approve"]  # nobody was asked twice


def test_agents_show_prints_the_rules_a_type_runs_under_and_the_tools_they_withhold(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    settings = {"permissions": {"deny": ["Write"], "ask": ["Bash(git push:*)"]}}
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(settings))
    shown = cli(cli_env("http://127.0.0.1:9"), "agents", "show", "general-purpose", "-w", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "rules ask:         Bash(git push:*)" in lines
    assert "rules deny:        Write" in lines
    assert "tools withheld:    write_file" in lines


def test_a_rule_that_cannot_be_read_on_the_command_line_is_bad_usage(tmp_path: Path) -> None:
    bad = cli(
        cli_env("http://127.0.0.1:9"), "run", "hi", "--model", "openai:m", "--deny", "Bash(rm", "-w", str(tmp_path)
    )
    assert bad.returncode == 2
    assert "permission rule 'Bash(rm' cannot be read" in bad.stderr


def test_serve_denies_a_call_nobody_decides_within_its_approval_timeout_or_the_runs_own(
    procs: Processes, store: Store, tmp_path: Path
) -> None:
    _, token = store.add_user("alice")
    with OpenAIServer(Writers("notes.md")) as server:
        env = cli_env(server.base_url)
        log = tmp_path / "serve.log"
        db = f"sqlite:///{tmp_path}/.delegate/delegate.db"
        _, url = procs.serve(db, env, tmp_path, log, "--ask", "Write", "--approval-timeout", "0.3")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=f"{url}/api/v1", headers=headers, timeout=60) as api:
            finals = []
            for body in ({}, {"approval_timeout": 0.2}):
                run_id = api.post("/runs", json={"prompt": "write notes", **body}).json()["run_id"]

                def ended(run_id: str = run_id) -> dict[str, Any] | None:
                    run = api.get(f"/runs/{run_id}").json()
                    return run if run["status"] not in ("running", "waiting") else None

                run = wait_for(ended, what=f"run {run_id} to end")
                assert run["status"] == "completed", run
                finals.append(run["final"])
            assert api.post("/runs", json={"prompt": "x", "approval_timeout": 0}).status_code == 422
    assert "no decision within 0.3 s" in finals[0]
    assert "no decision within 0.2 s" in finals[1]
    assert not list(tmp_path.rglob("notes.md"))
