"""Hooks that can act: Python hooks before and after a call and as a subagent starts and ends, and
hook commands in Claude Code's format (a real PreToolUse script that exits 2 blocks a Bash call,
its stderr given to the model; a failing hook is an event, not a crashed run)."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, HookAnswer, HookEvent, Hooks, Permissions, Runtime, UserError
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.approvals_support import write_notes
from tests.cli_support import delegate
from tests.durable_support import cli_env, run_json
from tests.loopback_openai import OpenAIServer, Reply


def runtime(tmp_path: Path, model: Any, hooks: Hooks) -> Runtime:
    return Runtime(
        model=model, workspace=tmp_path, store=False, extensions=Extensions(permissions=Permissions(hooks=hooks))
    )


async def test_before_tool_can_deny_with_a_reason_that_reaches_the_model(tmp_path: Path) -> None:
    def before(event: HookEvent) -> HookAnswer | None:
        return HookAnswer.deny("notes belong in docs/") if event.tool == "write_file" else None

    result = await runtime(tmp_path, FunctionModel(write_notes), Hooks(before_tool=before)).run("write notes")
    assert "a PreToolUse hook refused this call: notes belong in docs/" in result.final
    assert not (tmp_path / "notes.md").exists()


async def test_before_tool_can_change_the_arguments_and_after_tool_can_add_feedback(tmp_path: Path) -> None:
    seen: list[str] = []

    async def before(event: HookEvent) -> HookAnswer:
        return HookAnswer(arguments={**event.arguments, "path": "docs/notes.md"})

    def after(event: HookEvent) -> HookAnswer:
        seen.append(str(event.result))
        return HookAnswer(context="remember to link it from the index")

    hooks = Hooks(before_tool=before, after_tool=after, tools=["Write"])
    result = await runtime(tmp_path, FunctionModel(write_notes), hooks).run("write notes")
    assert (tmp_path / "docs" / "notes.md").exists() and not (tmp_path / "notes.md").exists()
    assert seen == ["created docs/notes.md (19 bytes written)"]
    assert "Hook feedback: remember to link it from the index" in result.final


async def test_after_tool_can_replace_the_result(tmp_path: Path) -> None:
    hooks = Hooks(after_tool=lambda event: HookAnswer(result="written, and checked by the hook"), tools=["write_file"])
    result = await runtime(tmp_path, FunctionModel(write_notes), hooks).run("write notes")
    assert "write said: written, and checked by the hook" in result.final


async def test_subagent_start_can_refuse_a_delegation_with_a_reason(tmp_path: Path) -> None:
    hooks = Hooks(subagent_start=lambda event: HookAnswer.block(f"no {event.agent_type} today"))
    model = FunctionModel(write_notes)
    result = await runtime(tmp_path, model, hooks).run("write notes")
    (record,) = result.subagents
    assert (record.status, record.stop_reason) == ("aborted", "refused")
    assert "a SubagentStart hook refused this delegation: no general-purpose today" in result.final
    assert all(is_lead(r) for r in model.requests)  # no subagent model was asked


async def test_subagent_stop_sends_the_subagent_back_once_with_its_feedback(tmp_path: Path) -> None:
    stops: list[str | None] = []

    def stop(event: HookEvent) -> HookAnswer | None:
        stops.append(event.summary)
        return HookAnswer.block("the notes need a title") if len(stops) == 1 else HookAnswer.block("still no")

    def model_answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if not is_lead(request) and last.role == "user" and "not done yet" in last.text:
            return call("complete", summary="added a title")
        return write_notes(request)

    result = await runtime(tmp_path, FunctionModel(model_answer), Hooks(subagent_stop=stop)).run("write notes")
    assert len(stops) == 1  # sent back once; its second answer stands
    (record,) = result.subagents
    assert record.status == "completed" and record.summary == "added a title"


async def test_a_hook_that_raises_is_an_event_and_the_run_goes_on(tmp_path: Path) -> None:
    def broken(event: HookEvent) -> HookAnswer:
        raise RuntimeError("hook bug")

    events: list[Any] = []
    rt = runtime(tmp_path, FunctionModel(write_notes), Hooks(before_tool=broken))
    result = await rt.run("write notes", sinks=[events.append])
    assert result.status == "completed" and (tmp_path / "notes.md").exists()
    failed = [e.data for e in events if e.type == "hook.failed"]
    assert failed and "RuntimeError: hook bug" in failed[0]["error"]


BLOCK_RM = """#!/bin/bash
# A Claude Code PreToolUse hook: refuse destructive commands.
input=$(cat)
command=$(printf '%s' "$input" | python3 -c 'import json, sys; print(json.load(sys.stdin)["tool_input"]["command"])')
tool=$(printf '%s' "$input" | python3 -c 'import json, sys; print(json.load(sys.stdin)["tool_name"])')
if [ "$tool" = "Bash" ] && printf '%s' "$command" | grep -q 'rm -rf'; then
  echo "Blocked by policy: rm -rf is not allowed here; delete files one by one" >&2
  exit 2
fi
exit 0
"""


def _bash_then_answer(body: dict[str, Any]) -> Reply:
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    if not tools:
        return Reply(tool_calls=[("bash", {"command": "rm -rf build"})])
    return Reply(content=f"The command said: {tools[-1]['content']}")


def test_a_claude_code_pre_tool_use_hook_that_exits_2_blocks_bash_and_its_stderr_reaches_the_model(
    tmp_path: Path,
) -> None:
    (tmp_path / ".claude" / "hooks").mkdir(parents=True)
    script = tmp_path / ".claude" / "hooks" / "block-rm.sh"
    script.write_text(BLOCK_RM)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    hook = {"type": "command", "command": '"$CLAUDE_PROJECT_DIR"/.claude/hooks/block-rm.sh', "timeout": 30}
    settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(settings))
    (tmp_path / "build").mkdir()
    with OpenAIServer(_bash_then_answer) as server:
        args = ["run", "clean up", "--model", "openai:m", "--json", "--allow-commands", "-w", str(tmp_path)]
        done = subprocess.run(
            delegate(*args), env=cli_env(server.base_url), capture_output=True, text=True, timeout=120
        )
    result = run_json(done)
    assert "Blocked by policy: rm -rf is not allowed here; delete files one by one" in result["final"]
    assert (tmp_path / "build").is_dir()


def test_a_hook_command_that_fails_is_a_clear_event_and_the_run_completes(tmp_path: Path) -> None:
    (tmp_path / ".delegate").mkdir()
    hook = {"type": "command", "command": "echo broken >&2; exit 3"}
    (tmp_path / ".delegate" / "settings.json").write_text(json.dumps({"hooks": {"PostToolUse": [{"hooks": [hook]}]}}))
    events: list[Any] = []
    rt = Runtime(model=FunctionModel(write_notes), workspace=tmp_path, store=False)
    result = rt.run_sync("write notes", sinks=[events.append])
    assert result.status == "completed" and (tmp_path / "notes.md").exists()
    failed = [e.data for e in events if e.type == "hook.failed"]
    assert failed[0]["hook"] == "PostToolUse" and "exited 3: broken" in failed[0]["error"]


def test_a_definition_files_hooks_act_on_its_own_type_only(tmp_path: Path) -> None:
    (tmp_path / ".claude" / "agents").mkdir(parents=True)
    (tmp_path / ".claude" / "agents" / "careful.md").write_text(
        "---\nname: careful\ndescription: Writes carefully.\nhooks:\n  PreToolUse:\n    - matcher: Write\n"
        "      hooks:\n        - type: command\n          command: echo 'careful writers ask first' >&2; exit 2\n---\n"
    )
    rt = Runtime(model=FunctionModel(write_notes), workspace=tmp_path, store=False)
    assert rt.run_sync("write notes").status == "completed"  # general-purpose: not its hook
    assert (tmp_path / "notes.md").exists()

    def careful(request: ModelRequest) -> ModelResponse:
        if is_lead(request) and len(request.messages) == 1:
            return call("task", subagent_type="careful", description="write notes", prompt="write notes.md")
        return write_notes(request)

    (tmp_path / "notes.md").unlink()
    rt = Runtime(model=FunctionModel(careful), workspace=tmp_path, store=False)
    assert "careful writers ask first" in rt.run_sync("write notes").final
    assert not (tmp_path / "notes.md").exists()


def _settings_hooks(root: Path, hooks: dict[str, Any]) -> None:
    (root / ".delegate").mkdir(exist_ok=True)
    (root / ".delegate" / "settings.json").write_text(json.dumps({"hooks": hooks}))


def test_a_stop_hook_that_exits_2_sends_the_lead_back_once_with_its_stderr(tmp_path: Path) -> None:
    stop = {"hooks": [{"type": "command", "command": "echo 'cite your sources' >&2; exit 2"}]}
    _settings_hooks(tmp_path, {"Stop": [stop]})

    def lead(request: ModelRequest) -> ModelResponse:
        told = [m.text for m in request.messages if m.role == "user"]
        return reply("answer with sources" if any("cite your sources" in t for t in told) else "bare answer")

    result = Runtime(model=FunctionModel(lead), workspace=tmp_path, store=False).run_sync("answer")
    assert result.final == "answer with sources"  # sent back once; its second answer stands


def test_user_prompt_submit_hooks_add_context_or_refuse_the_prompt(tmp_path: Path) -> None:
    context = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "Team rule: be brief."}}
    added = {"hooks": [{"type": "command", "command": f"echo '{json.dumps(context)}'"}]}
    _settings_hooks(tmp_path, {"UserPromptSubmit": [added]})
    model = FunctionModel(lambda request: reply("ok"))
    Runtime(model=model, workspace=tmp_path, store=False).run_sync("summarise")
    assert "Team rule: be brief." in model.requests[0].messages[-1].text

    refuse = {"hooks": [{"type": "command", "command": "echo 'no secrets in prompts' >&2; exit 2"}]}
    _settings_hooks(tmp_path, {"UserPromptSubmit": [refuse]})
    with pytest.raises(UserError, match="a UserPromptSubmit hook refused the prompt: no secrets in prompts"):
        Runtime(model=model, workspace=tmp_path, store=False).run_sync("the password is hunter2")
