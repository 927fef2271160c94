"""Hooks that can act: on a call before it runs and after, and on a subagent as it starts and ends.

Two kinds, one behaviour (see docs/approvals.md):

- Python hooks, `Hooks(before_tool=..., after_tool=..., subagent_start=..., subagent_stop=...)`
  in `Permissions(hooks=...)`: each a function (sync or async) of a `HookEvent`, answering a
  `HookAnswer` or None (no opinion). `before_tool` may allow, deny with a reason, ask a person, or
  change the arguments; `after_tool` may replace the result or add feedback to it;
  `subagent_start` may refuse a delegation with a reason; `subagent_stop` may send the subagent
  back once with feedback.
- Commands in Claude Code's `hooks` format (`PreToolUse`, `PostToolUse`, `SubagentStart`,
  `SubagentStop`, `Stop`, `UserPromptSubmit`, each a list of `{"matcher": ..., "hooks": [{"type":
  "command", "command": ..., "timeout": S}]}`), from the operator's settings files and from a
  definition file's `hooks:` (for that type only). The event goes to the command as JSON on stdin;
  exit 0 lets it be (its JSON answer, when it prints one, is read: `decision`,
  `permissionDecision`, `permissionDecisionReason`, `updatedInput`, `additionalContext`); exit 2
  blocks, its stderr given to the model; any other end (another code, a timeout, a command that
  cannot start) is a `hook.failed` event and the run goes on as if there were no hook.

A matcher is a regular expression over the tool's name, Claude Code's (`Bash`, `Write`, `Edit`,
...) or ours (`bash`, `write_file`, ...); empty or `*` matches every tool. Hook commands run only
from what the operator owns (see `Runtime`): never from a file an agent or an HTTP user can write.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .._empty import empty_dict
from .._errors import UserError

__all__ = ["HOOK_EVENTS", "CommandHook", "HookAnswer", "HookEvent", "Hooks", "command_hooks"]

HookName = Literal["PreToolUse", "PostToolUse", "SubagentStart", "SubagentStop", "Stop", "UserPromptSubmit"]
HOOK_EVENTS: tuple[HookName, ...] = (
    "PreToolUse",
    "PostToolUse",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "UserPromptSubmit",
)
DEFAULT_TIMEOUT = 60.0
"""Seconds a hook command may take (Claude Code's default) unless its entry says `timeout`."""
CLAUDE_NAME = {
    "bash": "Bash",
    "write_file": "Write",
    "edit_file": "Edit",
    "read_file": "Read",
    "grep": "Grep",
    "find_files": "Glob",
    "list_dir": "LS",
    "task": "Task",
}
"""Our tools by Claude Code's names: what a hook command is told, and what matchers match too."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HookEvent:
    """What a hook is told: the event, the run, the agent (and its type, None for the lead), and
    for a call its tool, arguments and (after it ran) result; for a subagent its prompt and, once
    it ended, its summary."""

    name: HookName
    run_id: str
    agent_id: str
    agent_type: str | None = None
    tool: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=empty_dict)
    result: str | None = None
    prompt: str | None = None
    summary: str | None = None

    def to_claude(self, cwd: str) -> dict[str, Any]:
        """The event as Claude Code gives it to a hook command on stdin (with our names beside)."""
        data: dict[str, Any] = {
            "session_id": self.run_id,
            "hook_event_name": self.name,
            "cwd": cwd,
            "agent_id": self.agent_id,
            "agent_type": self.agent_type,
        }
        if self.tool is not None:
            arguments = dict(self.arguments)
            if "path" in arguments:
                arguments.setdefault("file_path", arguments["path"])
            data |= {"tool_name": CLAUDE_NAME.get(self.tool, self.tool), "delegate_tool_name": self.tool}
            data["tool_input"] = arguments
        if self.result is not None:
            data["tool_response"] = self.result
        if self.prompt is not None:
            data["prompt"] = self.prompt
        if self.summary is not None:
            data["last_assistant_message"] = self.summary
        return data


@dataclass(frozen=True, kw_only=True, slots=True)
class HookAnswer:
    """What a hook says. `decision`: `allow`, `deny` (with `reason`) or `ask` a person (a call);
    `block` (a subagent: refused as it starts, or sent back once with `reason` as it ends; the
    lead: sent back once as it answers; a prompt: refused). `arguments`: the call's arguments,
    changed. `result`: the call's result, replaced. `context`: text added to what the model reads
    (after a call's result, or to the prompt)."""

    decision: Literal["allow", "deny", "ask", "block"] | None = None
    reason: str = ""
    arguments: dict[str, Any] | None = None
    result: str | None = None
    context: str | None = None

    @classmethod
    def deny(cls, reason: str) -> HookAnswer:
        return cls(decision="deny", reason=reason)

    @classmethod
    def ask(cls, reason: str = "") -> HookAnswer:
        return cls(decision="ask", reason=reason)

    @classmethod
    def block(cls, reason: str) -> HookAnswer:
        return cls(decision="block", reason=reason)


HookFunction = Callable[[HookEvent], "HookAnswer | Awaitable[HookAnswer | None] | None"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Hooks:
    """Python hooks (see the module's docstring); `tools` limits `before_tool` and `after_tool` to
    calls of these tools (names ours or Claude Code's; empty: every tool)."""

    before_tool: HookFunction | None = None
    after_tool: HookFunction | None = None
    subagent_start: HookFunction | None = None
    subagent_stop: HookFunction | None = None
    tools: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandHook:
    """One hook command of a settings file or a definition (`scope`: its type; None: every agent)."""

    event: HookName
    matcher: str
    command: str
    timeout: float
    source: str
    scope: str | None = None

    def matches(self, tool: str | None, agent_type: str | None) -> bool:
        if self.scope is not None and self.scope != agent_type:
            return False
        if tool is None or self.matcher in ("", "*"):
            return True
        names = (tool, CLAUDE_NAME.get(tool, tool))
        try:
            return any(re.fullmatch(self.matcher, name) for name in names)
        except re.error:
            return self.matcher in names


def command_hooks(value: object, source: str, scope: str | None = None) -> list[CommandHook]:
    """The hook commands of a `hooks` object in Claude Code's format; `UserError` naming `source`
    for one that is not."""
    if not isinstance(value, dict):
        raise UserError(f'{source}: "hooks" must be an object of events such as {{"PreToolUse": [...]}}')
    found: list[CommandHook] = []
    for event, groups in cast(dict[str, Any], value).items():
        if event not in HOOK_EVENTS:
            continue  # Claude Code's other events (SessionStart, Notification, ...): nothing here fires them
        if not isinstance(groups, list):
            raise UserError(f'{source}: "hooks.{event}" must be a list of {{"matcher": ..., "hooks": [...]}}')
        for group in cast(list[Any], groups):
            entries = cast(dict[str, Any], group).get("hooks") if isinstance(group, dict) else None
            if not isinstance(entries, list):
                raise UserError(f'{source}: each entry of "hooks.{event}" needs a "hooks" list of commands')
            matcher = str(cast(dict[str, Any], group).get("matcher") or "")
            for entry in cast(list[Any], entries):
                hook = cast(dict[str, Any], entry) if isinstance(entry, dict) else {}
                if hook.get("type", "command") != "command" or not hook.get("command"):
                    raise UserError(f'{source}: a hook of "{event}" must be {{"type": "command", "command": "..."}}')
                timeout = float(hook.get("timeout") or DEFAULT_TIMEOUT)
                found.append(
                    CommandHook(
                        event=event,
                        matcher=matcher,
                        command=str(hook["command"]),
                        timeout=timeout,
                        source=source,
                        scope=scope,
                    )
                )
    return found


@dataclass(frozen=True, slots=True)
class Ran:
    """What a hook command did: its answer, or why it failed (`failure`, for a `hook.failed` event)."""

    answer: HookAnswer | None
    failure: str | None = None


async def run_command(hook: CommandHook, event: HookEvent, cwd: str) -> Ran:
    """Run one hook command on `event` under its deadline (see the module's docstring)."""
    payload = json.dumps(event.to_claude(cwd), ensure_ascii=False).encode()
    env = {**os.environ, "CLAUDE_PROJECT_DIR": cwd, "DELEGATE_RUN_ID": event.run_id}
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            hook.command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return Ran(None, f"cannot start: {exc}")
    try:
        out, err = await asyncio.wait_for(proc.communicate(payload), hook.timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Ran(None, f"took longer than {hook.timeout:g} s and was stopped")
    stderr = err.decode("utf-8", "replace").strip()
    if proc.returncode == 2:
        reason = stderr or f"blocked by the {event.name} hook {hook.command!r}"
        return Ran(HookAnswer(decision="deny" if event.name == "PreToolUse" else "block", reason=reason))
    if proc.returncode != 0:
        return Ran(None, f"exited {proc.returncode}: {stderr[:500]}")
    return Ran(_claude_answer(event.name, out.decode("utf-8", "replace").strip()))


def _claude_answer(name: HookName, stdout: str) -> HookAnswer | None:
    """The JSON a hook command printed, as Claude Code reads it (plain text: no answer)."""
    if not stdout.startswith("{"):
        return HookAnswer(context=stdout) if stdout and name == "UserPromptSubmit" else None
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    given = cast(dict[str, Any], data)
    specific = cast(dict[str, Any], given.get("hookSpecificOutput") or {})
    decision: str | None = specific.get("permissionDecision")
    reason = str(specific.get("permissionDecisionReason") or given.get("reason") or "")
    if decision is None and given.get("decision") in ("block", "approve", "deny", "allow", "ask"):
        decision = {"approve": "allow", "block": "deny" if name == "PreToolUse" else "block"}.get(
            given["decision"], given["decision"]
        )
    updated = specific.get("updatedInput")
    context = specific.get("additionalContext")
    return HookAnswer(
        decision=cast(Any, decision if decision in ("allow", "deny", "ask", "block") else None),
        reason=reason,
        arguments=cast(dict[str, Any], updated) if isinstance(updated, dict) else None,
        context=str(context) if context else None,
    )


async def call_function(function: HookFunction, event: HookEvent) -> Ran:
    """Run a Python hook; its exception is a failure (a `hook.failed` event), never the run's."""
    try:
        answer = function(event)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:
        return Ran(None, f"raised {type(exc).__name__}: {exc}")
    return Ran(answer)
