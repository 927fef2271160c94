"""Permission rules in Claude Code's format, through the Python API: what a lead and its subagents
are offered, which calls are refused, and which wait for a person (stored, decided from another
store handle as another process would)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Permissions, RunLimits, Runtime, Store, UserError
from delegate.models import ModelRequest, ModelResponse
from delegate.permissions import CallPolicy, Rule
from delegate.testing import FunctionModel, call, is_lead, reply


def offered(request: ModelRequest) -> set[str]:
    return {t.name for t in request.tools}


def writing_subagent(path: str = "notes.md") -> FunctionModel:
    """A lead that delegates one write of `path` to a general-purpose subagent, then answers with
    what the task gave back; the subagent writes, then completes with what its write gave back."""

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="general-purpose", description="write notes", prompt="write")
            return reply(last.tool_results[0].content)
        if last.role == "user":
            return call("write_file", path=path, content="notes\n")
        return call("complete", summary=f"write said: {last.tool_results[0].content}")

    return FunctionModel(answer)


def test_a_deny_rule_in_claude_settings_removes_the_tool_from_what_the_lead_is_offered(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Write"]}}))
    model = FunctionModel(lambda request: reply("done"))
    Runtime(model=model, workspace=tmp_path, store=False).run_sync("hello")
    assert "write_file" not in offered(model.requests[0])
    assert "read_file" in offered(model.requests[0])


def test_rules_match_commands_paths_and_mcp_tools_as_claude_code_writes_them() -> None:
    policy = CallPolicy.compile(
        Permissions(
            allow=["Bash(npm run test:*)"],
            ask=["Edit(docs/**)", "mcp__github"],
            deny=["Bash(rm:*)", "Read(*.env)"],
        )
    )
    assert policy.verdict("bash", {"command": "npm run test:unit"}).kind == "allow"
    assert policy.verdict("bash", {"command": "npm run test && rm -rf /"}).kind == "deny"
    assert policy.verdict("write_file", {"path": "docs/a/b.md"}).kind == "ask"
    assert policy.verdict("edit_file", {"path": "./docs/x.md"}).kind == "ask"
    assert policy.verdict("write_file", {"path": "src/x.py"}).kind == "allow"
    assert policy.verdict("read_file", {"path": "config/prod.env"}).kind == "deny"
    assert policy.verdict("mcp__github__create_issue", {}).kind == "ask"
    assert policy.verdict("mcp__gitlab__create_issue", {}).kind == "allow"


def test_deny_wins_over_ask_and_ask_over_allow() -> None:
    policy = CallPolicy.compile(Permissions(allow=["Write", "Bash"], ask=["Write", "Bash(git push:*)"], deny=["Bash"]))
    assert policy.verdict("bash", {"command": "ls"}).kind == "deny"
    assert policy.verdict("write_file", {"path": "a", "content": ""}).kind == "ask"
    assert not policy.offered("bash") and policy.offered("write_file")


def test_permission_modes_change_what_ask_and_unnamed_calls_do() -> None:
    rules = Permissions(ask=["Write", "Bash"])
    policy = CallPolicy.compile(rules)
    assert policy.for_mode("acceptEdits").verdict("write_file", {"path": "a"}).kind == "allow"
    assert policy.for_mode("acceptEdits").verdict("bash", {"command": "ls"}).kind == "ask"
    assert policy.for_mode("bypassPermissions").verdict("bash", {"command": "ls"}).kind == "allow"
    assert policy.for_mode("dontAsk").verdict("bash", {"command": "ls"}).kind == "deny"
    assert policy.for_mode("dontAsk").verdict("edit_file", {"path": "a"}).kind == "deny"
    assert policy.for_mode("dontAsk").verdict("read_file", {"path": "a"}).kind == "allow"
    assert not policy.for_mode("plan").offered("edit_file")


def test_a_rule_that_cannot_be_read_says_how_to_write_one() -> None:
    with pytest.raises(UserError, match=r"Bash\(npm run test:\*\)"):
        Rule.parse("Bash(npm")
    with pytest.raises(UserError, match="list of rules"):
        Permissions(deny="Write")  # type: ignore[arg-type]


def test_a_settings_file_that_is_not_json_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / ".delegate").mkdir()
    (tmp_path / ".delegate" / "settings.json").write_text("{permissions: ")
    with pytest.raises(UserError, match=r"\.delegate/settings\.json: not valid JSON"):
        Runtime(model=FunctionModel(lambda r: reply("x")), workspace=tmp_path, store=False)


async def test_a_denied_call_reaches_the_model_as_its_result_with_the_rule(tmp_path: Path) -> None:
    rt = Runtime(
        model=writing_subagent("secret/key.md"),
        workspace=tmp_path,
        store=False,
        extensions=Extensions(permissions=Permissions(deny=["Write(secret/**)"])),
    )
    result = await rt.run("write notes")
    assert "refused by the permission rule deny 'Write(secret/**)'" in result.final
    assert not (tmp_path / "secret").exists()


async def _pending(store: Store, count: int = 1) -> list[Any]:
    while len(found := store.approvals(store.list_runs()[0].id, pending=True) if store.list_runs() else []) < count:
        await asyncio.sleep(0.02)
    return found


async def test_a_call_under_an_ask_rule_waits_and_runs_once_another_process_approves(tmp_path: Path) -> None:
    rt = Runtime(
        model=writing_subagent(),
        workspace=tmp_path,
        extensions=Extensions(permissions=Permissions(ask=["Write"])),
    )
    events: list[Any] = []
    run = asyncio.create_task(rt.run("write notes", sinks=[events.append]))
    other = Store.for_workspace(tmp_path)  # what `delegate runs approve` opens
    try:
        (waiting,) = await _pending(other)
        assert waiting.tool == "write_file" and waiting.arguments["path"] == "notes.md"
        assert waiting.subagent_type == "general-purpose" and waiting.description == "write notes"
        assert other.get_run(waiting.run_id).status == "waiting"  # type: ignore[union-attr]
        assert not (tmp_path / "notes.md").exists()
        other.decide_approval(waiting.run_id, waiting.call_id, "approve")
        result = await run
    finally:
        other.close()
    assert result.status == "completed"
    assert (tmp_path / "notes.md").read_text() == "notes\n"
    requested = [e for e in events if e.type == "approval.requested"]
    assert requested[0].data["tool"] == "write_file" and requested[0].parent_agent_id == "lead"


async def test_a_denial_with_a_reason_reaches_the_model_and_nothing_is_written(tmp_path: Path) -> None:
    rt = Runtime(
        model=writing_subagent(), workspace=tmp_path, extensions=Extensions(permissions=Permissions(ask=["Write"]))
    )
    run = asyncio.create_task(rt.run("write notes"))
    (waiting,) = await _pending(rt.store)  # type: ignore[arg-type]
    await rt.decide(waiting.run_id, waiting.call_id, approve=False, reason="not in this folder")
    result = await run
    assert "a person denied this call of write_file: not in this folder" in result.final
    assert not (tmp_path / "notes.md").exists()


async def test_no_decision_within_the_approval_timeout_denies_the_call(tmp_path: Path) -> None:
    rt = Runtime(
        model=writing_subagent(),
        workspace=tmp_path,
        limits=RunLimits(approval_timeout=0.2),
        extensions=Extensions(permissions=Permissions(ask=["Write"])),
    )
    result = await rt.run("write notes")
    assert "no decision within 0.2 s" in result.final
    assert not (tmp_path / "notes.md").exists()


async def test_waiting_for_a_decision_does_not_count_against_the_run_timeout(tmp_path: Path) -> None:
    rt = Runtime(
        model=writing_subagent(),
        workspace=tmp_path,
        limits=RunLimits(timeout=0.5, approval_timeout=1.0),
        extensions=Extensions(permissions=Permissions(ask=["Write"])),
    )
    result = await rt.run("write notes")
    assert result.status == "completed"
    assert "no decision within 1 s" in result.final


async def test_a_batch_item_never_waits_and_is_told_which_rule_asked(tmp_path: Path) -> None:
    def subagent(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "user":
            return call("write_file", path="n.md", content="x")
        return call("complete", summary=last.tool_results[0].content)

    rt = Runtime(
        model=FunctionModel(subagent),
        workspace=tmp_path,
        store=False,
        extensions=Extensions(permissions=Permissions(ask=["Write"])),
    )
    record = await rt.run_task(subagent_type="general-purpose", prompt="write")
    assert "rule ask 'Write'" in record.summary and "batch items never wait" in record.summary
    assert not (tmp_path / "n.md").exists()
