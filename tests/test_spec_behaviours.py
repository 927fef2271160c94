"""Behaviours of the specs that the audit of issue 38 found missing, each through the Python API and
through the CLI (against the loopback OpenAI server, through the real `openai` SDK).

The audit's rows, as best they map to the behaviours (its numbering follows the specs' order):
row 14, spec 000's `compactionModel` of a definition; row 42, spec 000's `fsType: symlink`
artifacts; row 51, spec 002's `/mnt/user-data/workspace` and `/mnt/user-data/outputs` seen by
both (`tests/test_outputs_folder.py`); row 59, spec 002's snapshot message named
`parent_context_snapshot`; row 115, spec 003's architecture context reaching subagents; row 120,
follow-ups to a completed subagent (`task_message`); row 106, spec 003's read-only subagents with
`todo`, `memory read` and `memory search`; row 111, spec 003's `memory write` withheld from them
(more of memory and todos in `tests/test_memory.py` and `tests/test_todos.py`). Acceptance as
DeerFlow's users expect it is in `tests/test_tests_passed.py` and `tests/test_acceptance.py`; its
CLI test is here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from delegate import Compaction, LoopSettings, Runtime, Store
from delegate.agents import Subagent, load_definition
from delegate.memory import Notes, Reader
from delegate.models import ModelRequest, ModelResponse, OpenAIModel
from delegate.testing import FunctionModel, call, is_lead, reply, respond
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

COMPACTING = "You compact a conversation"


def cli_env(server: OpenAIServer) -> dict[str, str]:
    return scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}


def turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def system_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else ""


def run_json(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- row 14: a compaction model per definition ------------------------------------------------------


async def test_a_definitions_compaction_model_writes_its_summaries(tmp_path: Path) -> None:
    summariser = FunctionModel(lambda request: reply("SUMMARY OF THE EARLY WORK"), name="test:summariser")
    steps: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="thrifty", description="d", prompt="look around")
            return reply("done")
        assert not request.system.startswith(COMPACTING)  # its own model never compacts
        steps.append(request)
        if len(steps) < 6:
            return respond([("list_dir", {})], input_tokens=5_000)
        return call("complete", summary="looked")

    thrifty = Subagent(name="thrifty", description="Looks around.", compaction_model=summariser)
    loop = LoopSettings(compaction=Compaction(max_context_tokens=1_000, keep_recent=2))
    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, subagents=[thrifty], loop=loop, store=False)
    result = await rt.run("go")
    assert result.subagents[0].status == "completed"
    assert summariser.requests and summariser.requests[0].system.startswith(COMPACTING)


def test_compaction_model_is_read_from_front_matter_in_both_spellings(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("---\nname: a\ndescription: A.\ncompaction_model: openai:cheap\n---\nBody.\n")
    (tmp_path / "b.md").write_text("---\nname: b\ndescription: B.\ncompactionModel: inherit\n---\nBody.\n")
    assert load_definition(tmp_path / "a.md").compaction_model == "openai:cheap"
    assert load_definition(tmp_path / "b.md").compaction_model is None


def test_delegate_run_compacts_a_subagent_with_its_definitions_compaction_model(tmp_path: Path) -> None:
    agents = tmp_path / ".delegate" / "agents"
    agents.mkdir(parents=True)
    (agents / "thrifty.md").write_text(
        "---\nname: thrifty\ndescription: Looks around.\ncompactionModel: openai:summariser\n---\nLook.\n"
    )

    steps: list[dict[str, Any]] = []

    def responder(body: dict[str, Any]) -> Reply:
        if system_of(body).startswith(COMPACTING):
            return Reply(content="SUMMARY OF THE EARLY WORK")
        if is_lead(body):
            if turns(body) == 0:
                task = {"subagent_type": "thrifty", "description": "d", "prompt": "look around"}
                return Reply(tool_calls=[("task", task)])
            return Reply(content="done")
        steps.append(body)
        if len(steps) < 6:
            return Reply(tool_calls=[("list_dir", {})], prompt_tokens=5_000)
        return Reply(tool_calls=[("complete", {"summary": "looked"})])

    with OpenAIServer(responder) as server:
        done = run_cli(
            ["run", "go", "--model", "openai:main", "--context-window", "2048", "--json", "--workspace", str(tmp_path)],
            env=cli_env(server),
        )
    assert run_json(done)["subagents"][0]["status"] == "completed"
    compactions = [b for b in server.requests if system_of(b).startswith(COMPACTING)]
    assert compactions and {b["model"] for b in compactions} == {"summariser"}
    shown = run_cli(["agents", "show", "thrifty", "--json", "--workspace", str(tmp_path)], env=scrubbed_env())
    assert json.loads(shown.stdout)["compaction_model"] == "openai:summariser"


# --- row 42: symlink artifacts ---------------------------------------------------------------------


def linking(request: ModelRequest) -> ModelResponse:
    if is_lead(request):
        if len(request.messages) == 1:
            return call("task", subagent_type="general-purpose", description="d", prompt="deliver")
        return reply(request.messages[-1].tool_results[0].content)
    return call("complete", summary="delivered", paths=["latest.md", "reports/2026.md"])


async def test_a_symlink_artifact_is_reported_as_the_link_with_its_target_named(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "2026.md").write_text("the report, long enough to tell apart")
    (tmp_path / "latest.md").symlink_to("reports/2026.md")
    result = await Runtime(model=FunctionModel(linking), workspace=tmp_path, store=False).run("go")
    link, target = result.subagents[0].artifacts
    assert (link.relative_path, link.fs_type, link.target) == ("latest.md", "symlink", "reports/2026.md")
    assert link.path == str(tmp_path.resolve() / "latest.md")
    assert link.size == len("reports/2026.md")  # its own size: the link, not the report
    assert (target.relative_path, target.fs_type, target.size) == ("reports/2026.md", "file", 37)
    assert "- latest.md (15 bytes, symlink to reports/2026.md)" in result.final


def test_delegate_run_reports_a_symlink_artifact_and_its_target_both(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "2026.md").write_text("the report")
    os.symlink("reports/2026.md", tmp_path / "latest.md")

    def responder(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            if turns(body) == 0:
                return Reply(tool_calls=[("task", {"subagent_type": "explore", "description": "d", "prompt": "p"})])
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": "s", "paths": ["latest.md", "reports/2026.md"]})])

    with OpenAIServer(responder) as server:
        done = run_cli(
            ["run", "go", "--model", "openai:m", "--json", "--workspace", str(tmp_path)], env=cli_env(server)
        )
    record = run_json(done)["subagents"][0]
    kinds = [(a["relative_path"], a["fs_type"], a.get("target")) for a in record["artifacts"]]
    assert kinds == [("latest.md", "symlink", "reports/2026.md"), ("reports/2026.md", "file", None)]
    assert record["skipped"] == []


# --- row 59: the snapshot message is named parent_context_snapshot on the wire ----------------------


def snapshotting(body: dict[str, Any]) -> Reply:
    if is_lead(body):
        if turns(body) == 0:
            task = {"subagent_type": "explore", "description": "d", "prompt": "p", "context_mode": "snapshot"}
            return Reply(tool_calls=[("task", task)])
        return Reply(content="done")
    return Reply(tool_calls=[("complete", {"summary": "s"})])


def snapshot_messages(server: OpenAIServer) -> list[dict[str, Any]]:
    subagent = next(b for b in server.requests if not is_lead(b))
    return [m for m in subagent["messages"] if m["role"] == "user"]


async def test_the_snapshot_reaches_an_openai_compatible_server_named_parent_context_snapshot(
    tmp_path: Path,
) -> None:
    with OpenAIServer(snapshotting) as server:
        model = OpenAIModel("m", base_url=server.base_url, api_key="k")
        await Runtime(model=model, workspace=tmp_path, store=False).run("Remember: the answer is 42.")
        await model.aclose()
    snapshot, task = snapshot_messages(server)
    assert snapshot["name"] == "parent_context_snapshot" and "the answer is 42" in snapshot["content"]
    assert "name" not in task  # the task message itself is the user's, unnamed


def test_delegate_run_sends_the_snapshot_named_parent_context_snapshot(tmp_path: Path) -> None:
    with OpenAIServer(snapshotting) as server:
        done = run_cli(
            ["run", "go", "--model", "openai:m", "--json", "--workspace", str(tmp_path)], env=cli_env(server)
        )
    assert run_json(done)["status"] == "completed"
    assert snapshot_messages(server)[0]["name"] == "parent_context_snapshot"


# --- row 115: ARCHITECTURE.md reaches every agent ----------------------------------------------------


async def test_architecture_md_reaches_the_lead_and_every_subagent_as_project_context(tmp_path: Path) -> None:
    (tmp_path / "ARCHITECTURE.md").write_text("Layers: faces over the core. ARCH-MARKER\n" + "x" * 20_000)
    model = FunctionModel(
        lambda r: (
            (
                call("task", subagent_type="explore", description="d", prompt="p")
                if len(r.messages) == 1
                else reply("ok")
            )
            if is_lead(r)
            else call("complete", summary="s")
        )
    )
    await Runtime(model=model, workspace=tmp_path, store=False).run("go")
    systems = [r.system for r in model.requests]
    assert len({is_lead(r) for r in model.requests}) == 2
    for system in systems:
        assert '<project-context file="ARCHITECTURE.md">' in system and "ARCH-MARKER" in system
        assert "more characters: read ARCHITECTURE.md with read_file]" in system  # today's bound holds
        assert len(system) < 16_000


def explore_once_through_the_cli(workspace: Path) -> dict[str, Any]:
    """`delegate run` in `workspace` with a lead that asks `explore` once: the subagent's request."""

    def responder(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            if turns(body) == 0:
                return Reply(tool_calls=[("task", {"subagent_type": "explore", "description": "d", "prompt": "p"})])
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": "s"})])

    with OpenAIServer(responder) as server:
        run_json(
            run_cli(["run", "go", "--model", "openai:m", "--json", "--workspace", str(workspace)], env=cli_env(server))
        )
    return next(b for b in server.requests if not is_lead(b))


def test_delegate_run_gives_subagents_the_architecture_context(tmp_path: Path) -> None:
    (tmp_path / "ARCHITECTURE.md").write_text("ARCH-MARKER: the store is under the core.\n")
    assert "ARCH-MARKER" in system_of(explore_once_through_the_cli(tmp_path))


# --- row 120: task_message to a completed foreground subagent ----------------------------------------


def following_up(request: ModelRequest) -> ModelResponse:
    if is_lead(request):
        offered = {t.name for t in request.tools}
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if steps == 0:
            assert "task_message" not in offered  # nothing to continue yet
            return call("task", subagent_type="general-purpose", description="count", prompt="count to 2")
        if steps == 1:
            assert "task_message" in offered and "task_wait" not in offered  # no background subagent
            return call("task_message", id="sub1", message="now count to 3")
        return reply(request.messages[-1].tool_results[0].content)
    said = [m.text for m in request.messages if m.role == "user"]
    return call("complete", summary=f"counted: {' / '.join(said)}")


async def test_a_completed_foreground_subagent_takes_a_follow_up_with_task_message(tmp_path: Path) -> None:
    result = await Runtime(model=FunctionModel(following_up), workspace=tmp_path, store=False).run("count")
    (record,) = result.subagents
    assert (record.status, record.messages) == ("completed", 1)
    assert "counted: count to 2 / now count to 3" in result.final


def test_delegate_run_offers_task_message_after_a_foreground_subagent_completes(tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply:
        offered = {t["function"]["name"] for t in body.get("tools", [])}
        if is_lead(body):
            if turns(body) == 0:
                assert "task_message" not in offered
                task = {"subagent_type": "general-purpose", "description": "count", "prompt": "count to 2"}
                return Reply(tool_calls=[("task", task)])
            if turns(body) == 1:
                assert "task_message" in offered
                return Reply(tool_calls=[("task_message", {"id": "sub1", "message": "now count to 3"})])
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": f"heard {turns(body) + 1}"})])

    with OpenAIServer(responder) as server:
        done = run_cli(
            ["run", "go", "--model", "openai:m", "--json", "--workspace", str(tmp_path)], env=cli_env(server)
        )
    (record,) = run_json(done)["subagents"]
    assert (record["status"], record["messages"]) == ("completed", 1)


# --- row 106: read-only subagents have todo, memory read and memory search -------------------------

READ_ONLY_KIT = {"todo_write", "todo_read", "memory_read", "memory_search"}


def exploring(db: str) -> FunctionModel:
    """A lead that asks `explore` once; the subagent writes a todo list, searches memory and
    tries `memory_write`, then completes with what it found."""

    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="explore", description="look", prompt="which build tool?")
            return reply("done")
        done = sum(1 for m in request.messages if m.role == "assistant")
        if done == 0:
            return call("todo_write", todos=[{"content": "find the build tool", "status": "in_progress"}])
        if done == 1:
            return call("memory_search", query="build tool")
        if done == 2:
            return call("memory_write", text="Subagents may write here too.")
        said = " | ".join(r.content for m in request.messages for r in m.tool_results)
        return call("complete", summary=said)

    return FunctionModel(answer)


async def test_a_read_only_subagent_has_todo_memory_read_and_memory_search(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(db) as store:
        Notes(store).write(Reader("default", str(tmp_path.resolve())), "The build tool is make.")
    model = exploring(db)
    result = await Runtime(model=model, workspace=tmp_path, store=db).run("which build tool?")
    explore = next(r for r in model.requests if not is_lead(r))
    assert {t.name for t in explore.tools} >= READ_ONLY_KIT
    (record,) = result.subagents
    assert "The build tool is make." in record.summary  # memory_search found the lead's note
    assert result.todos["sub1"][0]["content"] == "find the build tool"  # its own list, kept in the run


def test_delegate_run_gives_a_read_only_subagent_todo_memory_read_and_memory_search(tmp_path: Path) -> None:
    subagent = explore_once_through_the_cli(tmp_path)
    assert {t["function"]["name"] for t in subagent["tools"]} >= READ_ONLY_KIT


# --- row 111: memory write is withheld from read-only subagents ------------------------------------


async def test_memory_write_is_withheld_from_a_read_only_subagent_and_its_call_keeps_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    model = exploring(db)
    result = await Runtime(model=model, workspace=tmp_path, store=db).run("which build tool?")
    explore = next(r for r in model.requests if not is_lead(r))
    assert "memory_write" not in {t.name for t in explore.tools}
    assert "memory_write" in {t.name for t in model.requests[0].tools}  # the lead has it
    assert "memory_write" in result.subagents[0].summary  # the refused call is an error it reads
    with Store.open(db) as store:
        assert Notes(store).count(Reader("default", str(tmp_path.resolve()))) == 0


def test_delegate_run_withholds_memory_write_from_a_read_only_type_that_names_it(tmp_path: Path) -> None:
    agents = tmp_path / ".delegate" / "agents"
    agents.mkdir(parents=True)
    (agents / "scout.md").write_text(
        "---\nname: scout\ndescription: Reads code.\ntools: Read, Grep, memory_write\n---\nRead and report.\n"
    )

    def responder(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            if turns(body) == 0:
                return Reply(tool_calls=[("task", {"subagent_type": "scout", "description": "d", "prompt": "p"})])
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": "s"})])

    with OpenAIServer(responder) as server:
        run_json(
            run_cli(["run", "go", "--model", "openai:m", "--json", "--workspace", str(tmp_path)], env=cli_env(server))
        )
    lead = next(b for b in server.requests if is_lead(b))
    subagent = next(b for b in server.requests if not is_lead(b))
    assert "memory_write" in {t["function"]["name"] for t in lead["tools"]}
    assert "memory_write" not in {t["function"]["name"] for t in subagent["tools"]}
    assert "read_file" in {t["function"]["name"] for t in subagent["tools"]}


# --- acceptance as DeerFlow's users expect it, through the CLI ---------------------------------------


def test_delegate_run_checks_criteria_case_insensitively_and_never_passes_a_fake_test_run(tmp_path: Path) -> None:
    criteria = ["FILE:report.md exists", "File_Written:report.md", "tests_passed:echo '12 passed'"]

    def responder(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            if turns(body) == 0:
                task = {"subagent_type": "general-purpose", "description": "d", "prompt": "p"}
                return Reply(tool_calls=[("task", task | {"acceptance_criteria": criteria})])
            return Reply(content=body["messages"][-1]["content"])
        if turns(body) == 0:
            return Reply(tool_calls=[("write_file", {"path": "report.md", "content": "r"})])
        return Reply(tool_calls=[("complete", {"summary": "all tests pass", "paths": ["report.md"]})])

    with OpenAIServer(responder) as server:
        done = run_cli(
            [
                "run",
                "go",
                "--model",
                "openai:m",
                "--json",
                "--allow-commands",
                "--unsandboxed-commands",
                "--workspace",
                str(tmp_path),
            ],
            env=cli_env(server),
        )
    out = run_json(done)
    assert [v["result"] for v in out["subagents"][0]["acceptance"]] == ["holds", "holds", "UNVERIFIED"]
    assert "execution evidence only" in out["final"]
    assert "Acceptance: 2 of 3 criteria hold, 0 does not hold, 1 UNVERIFIED" in out["final"]
