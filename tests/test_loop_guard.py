"""The loop guard ends an agent that goes round in circles, in the lead and in subagents, with a
stop reason of its own and a message that says what happened and what to try; it shows in
`delegate run --json` and in the store. Scripted turns through the real `openai` SDK on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Lead, LoopGuard, LoopSettings, Runtime, UserError
from delegate.models import OpenAIModel
from delegate.testing import is_lead
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply, scripted


def read(path: str) -> Reply:
    return Reply(tool_calls=[("read_file", {"path": path})])


def lead_run(server: OpenAIServer, tmp_path: Path, **options: Any) -> Any:
    model = OpenAIModel("m", base_url=server.base_url, api_key="k")
    rt = Runtime(
        model=model, workspace=tmp_path, store=False, extensions=Extensions(builtin_subagents=False), **options
    )
    return rt.run_sync("Look into notes.md.")


def test_the_same_call_failing_three_times_ends_the_agent_with_repeated_failure(tmp_path: Path) -> None:
    script = scripted([read("missing.md"), read("notes.md"), read("missing.md"), read("missing.md")])
    (tmp_path / "notes.md").write_text("notes\n")
    with OpenAIServer(script) as server:
        result = lead_run(server, tmp_path)
    script.assert_complete()

    assert (result.status, result.stop_reason, result.steps) == ("aborted", "repeated_failure", 4)
    assert result.error.startswith("went round in circles: it called read_file with the same arguments 3 times")
    assert "missing.md" in result.error  # what the failing call was told
    assert "more capable model" in result.error  # and what to try


def test_turns_without_progress_end_the_agent_with_no_progress(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("notes\n")
    script = scripted([read("notes.md")] * 4)
    with OpenAIServer(script) as server:
        result = lead_run(server, tmp_path, loop=LoopSettings(guard=LoopGuard(idle_steps=3)))
    script.assert_complete()

    assert (result.status, result.stop_reason, result.steps) == ("aborted", "no_progress", 4)
    assert result.error.startswith("made no progress in 3 turns in a row")
    assert "read_file" in result.error


def test_writing_a_file_is_progress_even_when_the_call_is_the_same(tmp_path: Path) -> None:
    write = Reply(tool_calls=[("write_file", {"path": "out.md", "content": "draft\n"})])
    script = scripted([write, write, write, write, Reply(content="Written.")])
    with OpenAIServer(script) as server:
        result = lead_run(server, tmp_path, loop=LoopSettings(guard=LoopGuard(idle_steps=2)))

    assert (result.status, result.final) == ("completed", "Written.")


def test_without_a_guard_the_step_limit_ends_the_agent(tmp_path: Path) -> None:
    script = scripted([read("missing.md")] * 5)
    with OpenAIServer(script) as server:
        result = lead_run(server, tmp_path, lead=Lead(max_steps=5), loop=LoopSettings(guard=None))

    assert (result.status, result.stop_reason) == ("aborted", "max_steps")


def test_a_guard_with_a_limit_below_one_is_refused() -> None:
    with pytest.raises(UserError, match="idle_steps=0: give a whole number of at least 1, or None"):
        LoopGuard(idle_steps=0)


def stuck_subagent(body: dict[str, Any]) -> Reply:
    """The lead delegates once, then answers; its subagent reads a missing file again and again."""
    messages = body["messages"]
    if is_lead(body):
        if messages[-1]["role"] == "user":
            task = {"subagent_type": "reader", "description": "read it", "prompt": "Read missing.md."}
            return Reply(tool_calls=[("task", task)])
        return Reply(content="The reader got stuck.")
    return Reply(tool_calls=[("read_file", {"path": "missing.md"})])


def test_a_subagent_going_round_in_circles_ends_alone_and_it_shows_in_json_and_the_store(tmp_path: Path) -> None:
    agents = tmp_path / ".delegate" / "agents"
    agents.mkdir(parents=True)
    (agents / "reader.md").write_text("---\nname: reader\ndescription: Reads files.\ntools: read_file\n---\nRead.\n")
    env = scrubbed_env()
    with OpenAIServer(stuck_subagent) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        done = subprocess.run(
            [sys.executable, "-m", "delegate", "run", "Read missing.md.", "--model", "openai:m", "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)
        stored = subprocess.run(
            [sys.executable, "-m", "delegate", "runs", "show", shown["run_id"], "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )

    assert (shown["status"], shown["final"]) == ("completed", "The reader got stuck.")
    for record in (shown["subagents"][0], json.loads(stored.stdout)["subagents"][0]):
        assert (record["status"], record["stop_reason"], record["steps"]) == ("aborted", "repeated_failure", 3)
        assert "read_file with the same arguments 3 times" in record["error"]


def test_the_guard_flags_of_delegate_run_reach_the_agents(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("notes\n")
    env = scrubbed_env()
    with OpenAIServer(scripted([read("notes.md")] * 2)) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        command = [sys.executable, "-m", "delegate", "run", "Look.", "--model", "openai:m", "--json"]
        done = subprocess.run(
            [*command, "--max-idle-steps", "1", "--max-repeated-failures", "0"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert done.returncode == 1
    shown = json.loads(done.stdout)
    assert (shown["status"], shown["stop_reason"], shown["steps"]) == ("aborted", "no_progress", 2)


def test_the_guard_flags_of_delegate_batch_reach_its_items(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("notes\n")
    (tmp_path / "items.jsonl").write_text(json.dumps({"key": "one", "prompt": "Look into notes.md."}) + "\n")
    env = scrubbed_env()
    with OpenAIServer(lambda body: read("notes.md")) as server:  # reads the same file for ever
        env["OPENAI_BASE_URL"] = server.base_url
        command = ["batch", "submit", "items.jsonl", "--type", "explore", "--model", "openai:m", "--max-attempts", "1"]
        done = run_cli([*command, "--max-idle-steps", "1", "--max-repeated-failures", "0"], env, tmp_path)
        assert done.returncode == 1, done.stderr
        batch_id = done.stdout.split()[-1]
        listed = run_cli(["batch", "items", batch_id, "--json"], env, tmp_path)

    [item] = json.loads(listed.stdout)
    assert (item["status"], item["outcome"], item["steps"]) == ("failed", "aborted", 2), item
    assert item["error"].startswith("made no progress in 1 turn: none of its calls did something new")
