"""Overlay subagents through the real CLI: each writes into a private layer, merged all or nothing
when it completes; a conflict, a timeout or a read-only type leaves the workspace as it was."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from delegate.testing import is_lead
from tests.cli_support import delegate
from tests.durable_support import cli_env, run_json, workspace_files
from tests.loopback_openai import OpenAIServer, Reply

RUN = ("--model", "openai:m", "--max-parallel", "2", "--json")


def _first_user(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


def _turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def _run(server: OpenAIServer, root: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        delegate("run", "go", *RUN, "-w", str(root), *extra),
        env=cli_env(server.base_url),
        capture_output=True,
        text=True,
        timeout=180,
    )
    return run_json(proc)


def _shown(server: OpenAIServer, root: Path, run_id: str) -> dict[str, Any]:
    proc = subprocess.run(
        delegate("runs", "show", run_id, "--json", "-w", str(root)),
        env=cli_env(server.base_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _events(server: OpenAIServer, root: Path, run_id: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        delegate("runs", "events", run_id, "--json", "-w", str(root)),
        env=cli_env(server.base_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _lead(task: dict[str, Any]) -> Any:
    """A lead that delegates `task` once, then answers with what it read."""

    def answer(body: dict[str, Any]) -> Reply:
        if _turns(body) == 0:
            return Reply(tool_calls=[("task", task)])
        return Reply(content="done: " + " | ".join(_tool_results(body)))

    return answer


def test_two_parallel_overlay_subagents_editing_one_file_merge_one_and_report_the_other(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("draft\n")
    both_read = threading.Barrier(2, timeout=60)
    lead = _lead(
        {
            "subagent_type": "general-purpose",
            "description": "edit notes",
            "prompts": ["version A", "version B"],
            "isolation": "overlay",
        }
    )

    def respond(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            return lead(body)
        name = _first_user(body).split()[-1]
        turn = _turns(body)
        if turn == 0:
            return Reply(tool_calls=[("read_file", {"path": "notes.txt"})])
        if turn == 1:
            both_read.wait()  # each has seen the file as it was before either writes
            return Reply(tool_calls=[("write_file", {"path": "notes.txt", "content": f"notes by {name}\n"})])
        return Reply(tool_calls=[("complete", {"summary": f"{name} edited the notes", "paths": ["notes.txt"]})])

    with OpenAIServer(respond) as server:
        result = _run(server, tmp_path)
        shown = _shown(server, tmp_path, result["run_id"])
    records = {s["summary"].split()[0]: s for s in shown["subagents"]}
    merged = [n for n, s in records.items() if not s["conflicts"]]
    refused = [n for n, s in records.items() if s["conflicts"]]
    assert len(merged) == 1 and len(refused) == 1
    winner, loser = records[merged[0]], records[refused[0]]
    assert (tmp_path / "notes.txt").read_text() == f"notes by {merged[0]}\n"
    assert all(s["status"] == "completed" and s["isolation"] == "overlay" for s in records.values())
    assert winner["changes"][0] | {"diff": None} == {"path": "notes.txt", "op": "modify", "bytes": 11, "diff": None}
    assert "+notes by" in winner["changes"][0]["diff"]
    (conflict,) = loser["conflicts"]
    assert conflict["path"] == "notes.txt" and "changed in the workspace" in conflict["reason"]
    assert (tmp_path / conflict["version"]).read_text() == f"notes by {refused[0]}\n"
    assert loser["layer"] and (tmp_path / loser["layer"] / "upper" / "notes.txt").is_file()
    assert conflict["version"] in result["final"] and "Not merged" in result["final"]
    assert loser["artifacts"] == [] and conflict["version"] in loser["skipped"][0]["reason"]


def _definition(root: Path, name: str, front: str) -> None:
    folder = root / ".delegate" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.md").write_text(f"---\nname: {name}\ndescription: {name} for tests\n{front}---\nDo it.\n")


def test_an_overlay_subagent_that_writes_three_files_then_times_out_leaves_the_workspace_as_it_was(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep.txt").write_text("original\n")
    _definition(tmp_path, "slow", "isolation: worktree\ntimeout: 1\n")
    before = workspace_files(tmp_path)
    hang = threading.Event()
    lead = _lead({"subagent_type": "slow", "description": "write three", "prompt": "write"})

    def respond(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            return lead(body)
        if _turns(body) == 0:
            writes = [("write_file", {"path": f"out/{n}.txt", "content": f"{n}\n"}) for n in range(2)]
            return Reply(tool_calls=[*writes, ("write_file", {"path": "keep.txt", "content": "changed\n"})])
        hang.wait(60)  # never answers in time: the subagent's timeout ends it
        return Reply(content="too late")

    try:
        with OpenAIServer(respond) as server:
            result = _run(server, tmp_path)
            shown = _shown(server, tmp_path, result["run_id"])
    finally:
        hang.set()
    (record,) = shown["subagents"]
    assert record["status"] == "timed_out" and record["isolation"] == "overlay"
    assert workspace_files(tmp_path) == before  # byte for byte: nothing of the layer reached it
    assert sorted((c["path"], c["op"]) for c in record["changes"]) == [
        ("keep.txt", "modify"),
        ("out/0.txt", "create"),
        ("out/1.txt", "create"),
    ]
    assert (tmp_path / record["layer"] / "upper" / "keep.txt").read_text() == "changed\n"
    assert "kept in" in result["final"]


@pytest.fixture
def sandboxed() -> None:
    from delegate.workspace._overlay import _unshare_overlay  # pyright: ignore[reportPrivateUsage]
    from delegate.workspace._sandbox import _usable_bwrap  # pyright: ignore[reportPrivateUsage]

    try:
        _usable_bwrap("bwrap")
    except Exception as exc:  # pragma: no cover - machines without bubblewrap
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    if _unshare_overlay() is not None:  # pragma: no cover
        pytest.skip(f"no overlay mount here: {_unshare_overlay()}")


def test_a_command_s_writes_in_an_overlay_subagent_land_in_its_layer_and_merge(tmp_path: Path, sandboxed: None) -> None:
    (tmp_path / "old.txt").write_text("old\n")
    _definition(tmp_path, "builder", "tools: Bash, Write\nisolation: overlay\n")
    seen_between: dict[str, bool] = {}
    lead = _lead({"subagent_type": "builder", "description": "build", "prompt": "build"})

    def respond(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            return lead(body)
        turn = _turns(body)
        if turn == 0:
            return Reply(tool_calls=[("bash", {"command": "echo built > out.txt && rm old.txt && cat out.txt"})])
        seen_between["out in workspace"] = (tmp_path / "out.txt").exists()
        seen_between["old in workspace"] = (tmp_path / "old.txt").exists()
        seen_between["command output"] = "built" in _tool_results(body)[0]
        return Reply(tool_calls=[("complete", {"summary": "built", "paths": ["out.txt"]})])

    with OpenAIServer(respond) as server:
        result = _run(server, tmp_path, "--allow-commands")
        shown = _shown(server, tmp_path, result["run_id"])
        events = _events(server, tmp_path, result["run_id"])
    assert seen_between == {"out in workspace": False, "old in workspace": True, "command output": True}
    (merged,) = [e for e in events if e["type"] == "workspace.merged"]
    assert [(c["path"], c["op"]) for c in merged["data"]["changes"]] == [("old.txt", "delete"), ("out.txt", "create")]
    (record,) = shown["subagents"]
    assert (tmp_path / "out.txt").read_text() == "built\n" and not (tmp_path / "old.txt").exists()
    assert [(c["path"], c["op"]) for c in record["changes"]] == [("old.txt", "delete"), ("out.txt", "create")]
    assert record["conflicts"] == [] and record["layer"] is None
    assert [a["relative_path"] for a in record["artifacts"]] == ["out.txt"]
    assert not (tmp_path / ".delegate" / "layers" / result["run_id"]).exists()


def test_a_read_only_type_s_write_through_a_command_is_refused_and_reported(tmp_path: Path, sandboxed: None) -> None:
    (tmp_path / "src.txt").write_text("source\n")
    _definition(tmp_path, "checker", "tools: Read, Bash\n")
    refusals: list[str] = []
    lead = _lead({"subagent_type": "checker", "description": "check", "prompt": "check"})

    def respond(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            return lead(body)
        if _turns(body) == 0:
            return Reply(tool_calls=[("bash", {"command": "echo pwned > src.txt; echo x > hack.txt"})])
        refusals.extend(_tool_results(body))
        return Reply(tool_calls=[("complete", {"summary": "checked"})])

    with OpenAIServer(respond) as server:
        result = _run(server, tmp_path, "--allow-commands")
        shown = _shown(server, tmp_path, result["run_id"])
        events = _events(server, tmp_path, result["run_id"])
    assert (tmp_path / "src.txt").read_text() == "source\n" and not (tmp_path / "hack.txt").exists()
    assert "refused: this subagent's type is read-only" in refusals[0] and "hack.txt" in refusals[0]
    (record,) = shown["subagents"]
    assert record["isolation"] == "read-only"
    assert sorted(c["path"] for c in record["conflicts"]) == ["hack.txt", "src.txt"]
    assert "Refused writes" in result["final"]
    (conflict,) = [e for e in events if e["type"] == "workspace.conflict"]
    assert sorted(c["path"] for c in conflict["data"]["conflicts"]) == ["hack.txt", "src.txt"]
    assert conflict["agent_id"] == record["id"]
