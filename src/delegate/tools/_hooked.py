"""A run's hooks, put to work: Python hooks and hook commands (see `delegate.permissions._hooks`) asked in
turn at each point they act on, their answers merged, every failure a `hook.failed` event.

`HookSet` is what `CallGuard` asks before and after a call of a tool some hook matches; the
subagent runner asks it as a subagent starts and ends, the runtime as the lead ends and as a
prompt comes in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..permissions import (
    CallPolicy,
    CommandHook,
    HookAnswer,
    HookEvent,
    HookFunction,
    HookName,
    Hooks,
    Ran,
    Verdict,
    call_function,
    run_command,
)
from ._tool import ToolContext, ToolReturn

_PYTHON: dict[HookName, str] = {
    "PreToolUse": "before_tool",
    "PostToolUse": "after_tool",
    "SubagentStart": "subagent_start",
    "SubagentStop": "subagent_stop",
}
"""The Python hook of each event (the lead's `Stop` and `UserPromptSubmit` have commands only)."""


class HookSet:
    """The hooks of one runtime: `python` (a `Hooks`, or None) and `commands`, run in `cwd` (the
    operator's folder)."""

    def __init__(self, python: Hooks | None, commands: Sequence[CommandHook], cwd: str, policy: CallPolicy) -> None:
        self.python = python
        self.commands = list(commands)
        self.cwd = cwd
        self.policy = policy
        self._tools: frozenset[str] = frozenset(python.tools) if python is not None else frozenset[str]()

    def __bool__(self) -> bool:
        return bool(self.commands) or self.python is not None

    def acts_on(self, tool: str, agent_type: str | None) -> bool:
        """Whether any hook may act on a call of `tool` by an agent of `agent_type` (None: the lead)."""
        python = self.python
        if python is not None and (python.before_tool or python.after_tool) and self._python_matches(tool):
            return True
        return any(h.event in ("PreToolUse", "PostToolUse") and h.matches(tool, agent_type) for h in self.commands)

    def _python_matches(self, tool: str) -> bool:
        from ..permissions import CLAUDE_NAME

        return not self._tools or tool in self._tools or CLAUDE_NAME.get(tool, "") in self._tools

    async def fire(self, ctx: ToolContext, event: HookEvent) -> list[HookAnswer]:
        """Every hook of `event` that matches it, in turn: their answers (a failure is an event)."""
        answers: list[HookAnswer] = []
        function: HookFunction | None = None
        if self.python is not None and (event.tool is None or self._python_matches(event.tool)):
            function = getattr(self.python, _PYTHON.get(event.name, ""), None)
        if function is not None:
            self._note(ctx, event, "python", await call_function(function, event), answers)
        for hook in self.commands:
            if hook.event == event.name and hook.matches(event.tool, event.agent_type):
                self._note(ctx, event, hook.command, await run_command(hook, event, self.cwd), answers)
        return answers

    def _note(self, ctx: ToolContext, event: HookEvent, which: str, ran: Ran, answers: list[HookAnswer]) -> None:
        data: dict[str, Any] = {"hook": event.name, "command": which, "tool": event.tool}
        if ran.failure is not None:
            ctx.event("hook.failed", data | {"error": ran.failure}, tool_call_id=ctx.tool_call_id)
        elif ran.answer is not None:
            answers.append(ran.answer)
            said = {"decision": ran.answer.decision, "reason": ran.answer.reason}
            ctx.event("hook.acted", data | said, tool_call_id=ctx.tool_call_id)

    async def before(
        self, ctx: ToolContext, tool: str, arguments: dict[str, Any], verdict: Verdict, agent_type: str | None
    ) -> tuple[Verdict, dict[str, Any]]:
        """The verdict on a call once its `PreToolUse` hooks spoke, and its arguments (a hook may
        change them: the rules judge the changed ones). A hook's deny wins; its ask makes the call
        wait for a person; its allow lets through a call the rules would ask about (never one
        they deny)."""
        event = HookEvent(
            name="PreToolUse", run_id=ctx.run_id, agent_id=ctx.agent_id, agent_type=agent_type, tool=tool,
            arguments=arguments,
        )  # fmt: skip
        answers = await self.fire(ctx, event)
        for answer in answers:
            if answer.arguments is not None:
                arguments = answer.arguments
                verdict = self.policy.for_mode(None).verdict(tool, arguments) if verdict.kind != "deny" else verdict
        for answer in answers:
            if answer.decision == "deny":
                return Verdict("deny", None, f"a PreToolUse hook refused this call: {answer.reason}"), arguments
        if any(a.decision == "ask" for a in answers) and verdict.kind != "deny":
            reasons = "; ".join(a.reason for a in answers if a.decision == "ask" and a.reason)
            return Verdict("ask", verdict.rule, reasons or f"a PreToolUse hook asks a person about {tool}"), arguments
        if any(a.decision == "allow" for a in answers) and verdict.kind == "ask":
            return Verdict("allow", verdict.rule, ""), arguments
        return verdict, arguments

    async def after(
        self, ctx: ToolContext, tool: str, arguments: dict[str, Any], result: ToolReturn, agent_type: str | None
    ) -> ToolReturn:
        """The call's result once its `PostToolUse` hooks spoke: replaced, or with feedback added."""
        event = HookEvent(
            name="PostToolUse", run_id=ctx.run_id, agent_id=ctx.agent_id, agent_type=agent_type, tool=tool,
            arguments=arguments, result=result.content,
        )  # fmt: skip
        for answer in await self.fire(ctx, event):
            if answer.result is not None:
                result = replace(result, content=answer.result)
            feedback = answer.context or (answer.reason if answer.decision == "block" else None)
            if feedback:
                result = replace(result, content=f"{result.content}\n\nHook feedback: {feedback}")
        return result

    async def blocked(self, ctx: ToolContext, event: HookEvent) -> str | None:
        """Why the hooks of `event` block it (a delegation refused, a subagent or the lead sent
        back, a prompt refused); None when none does."""
        reasons = [
            a.reason or f"a {event.name} hook blocked it"
            for a in await self.fire(ctx, event)
            if a.decision in ("block", "deny")
        ]
        return "; ".join(reasons) if reasons else None

    async def context(self, ctx: ToolContext, event: HookEvent) -> tuple[str | None, str]:
        """A prompt's `UserPromptSubmit` hooks: why they refuse it (or None), and the context they add."""
        answers = await self.fire(ctx, event)
        refused = [a.reason or "a UserPromptSubmit hook refused it" for a in answers if a.decision in ("block", "deny")]
        added = "\n\n".join(a.context for a in answers if a.context)
        return ("; ".join(refused) if refused else None), added
