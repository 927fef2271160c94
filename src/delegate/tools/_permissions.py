"""Tools under a run's permission rules: refused, let through, or held until a person decides.

`CallGuard` is one run's: its compiled rules (`delegate.permissions._rules.CallPolicy`), who decides a
call under an `ask` rule (an `Approver`: the run layer's, which stores the request and waits for a
decision durably), and its hooks. `CallGuard.tools` gives an agent its tools: those a `deny` rule
names whole left out, those a rule or a hook may act on wrapped, every other tool as it was (a
call of it costs nothing more). A wrapped tool is made once a run and mode, not once an agent.

A refused call raises `ToolError`: the model reads the reason as the call's result and goes on.
A call that waits stops its agent's turn at that call; the other calls of the turn, and the
other agents, go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._empty import empty_dict
from .._errors import ToolError, WorkspaceError
from ..permissions import CallPolicy, Verdict, path_argument
from ._hooked import HookSet
from ._tool import Tool, ToolContext, ToolReturn


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call that waits for a person: its tool, arguments and the rule that asks."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    rule: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class Approval:
    """A person's decision on a call (`approved`), and why (`reason`, given to the model on a denial)."""

    approved: bool
    reason: str = ""


class Approver(Protocol):
    """Decides calls under an `ask` rule (the run layer stores each and waits for a person)."""

    async def decide(self, ctx: ToolContext, request: ApprovalRequest) -> Approval: ...


@dataclass(slots=True)
class CallGuard:
    """One run's rules, its approver (None: a call that would ask is refused), and its hooks."""

    policy: CallPolicy
    approver: Approver | None = None
    hooks: HookSet | None = None
    never_wait: str = ""
    """Set for runs nobody watches (a batch item): a call that would ask is refused, with this said."""
    _wrapped: dict[tuple[str, str | None, int], Tool] = field(default_factory=empty_dict)
    _lists: dict[tuple[str, str | None, int], tuple[Sequence[Tool], list[Tool]]] = field(default_factory=empty_dict)
    """What `tools` gave for each list it was given (kept with it, so its id is not reused)."""

    def tools(self, tools: Sequence[Tool], *, mode: str | None = None, agent_type: str | None = None) -> list[Tool]:
        """`tools` as an agent of permission `mode` (None: the run's) and type `agent_type` (None:
        the lead) gets them: the ones a `deny` rule names whole left out, the ones a rule or hook
        may act on wrapped."""
        policy = self.policy.for_mode(mode)
        made = self._lists.get((policy.mode, agent_type, id(tools)))
        if made is not None and made[0] is tools:  # a type's prepared tools: the same list each time
            return made[1]
        hooks = self.hooks
        out: list[Tool] = []
        for tool in tools:
            name = tool.name
            hooked = hooks is not None and hooks.acts_on(name, agent_type)
            if not hooked and not policy.named(name):
                out.append(tool)
            elif policy.offered(name):
                key = (policy.mode, agent_type, id(tool))
                wrapped = self._wrapped.get(key)
                if wrapped is None:
                    wrapped = self._wrapped[key] = _Guarded(tool, self, policy, agent_type, hooked)
                out.append(wrapped)
        self._lists[(policy.mode, agent_type, id(tools))] = (tools, out)
        return out

    async def check(self, ctx: ToolContext, tool: str, arguments: dict[str, Any], verdict: Verdict) -> None:
        """Refuse (`ToolError`) or let through a call the rules (or a hook) judged `verdict`,
        waiting for a person's decision when it asks."""
        if verdict.kind == "deny":
            raise ToolError(verdict.reason)
        if verdict.kind != "ask":
            return
        if self.never_wait or self.approver is None:
            why = self.never_wait or "nobody can approve calls in this run"
            raise ToolError(f"{verdict.reason}; {why}, so it is refused: do without it")
        request = ApprovalRequest(
            call_id=ctx.tool_call_id or "", tool=tool, arguments=arguments, rule=verdict.rule, reason=verdict.reason
        )
        approval = await self.approver.decide(ctx, request)
        if not approval.approved:
            said = f": {approval.reason}" if approval.reason else ""
            raise ToolError(f"a person denied this call of {tool}{said}. Do not try it again; go on without it")


class _Guarded(Tool):
    """A tool whose calls the run's rules and hooks judge first (see `CallGuard`)."""

    def __init__(self, inner: Tool, guard: CallGuard, policy: CallPolicy, agent_type: str | None, hooked: bool) -> None:
        self.__dict__.update(inner.__dict__)
        self._inner = inner
        self._guard = guard
        self._policy = policy
        self._agent_type = agent_type
        self._hooked = hooked

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolReturn:
        name = self.name
        arguments = self._inner.validate(arguments)  # bad arguments are the model's to fix, nobody is asked
        verdict = self._policy.verdict(name, _landing(ctx, name, arguments))
        hooks = self._guard.hooks if self._hooked else None
        if hooks is not None:
            verdict, arguments = await hooks.before(ctx, name, arguments, verdict, self._agent_type)
        await self._guard.check(ctx, name, arguments, verdict)
        result = await (self._inner.run(ctx, arguments) if hooks is not None else self._inner.run_valid(ctx, arguments))
        if hooks is not None:
            result = await hooks.after(ctx, name, arguments, result, self._agent_type)
        return result


def _landing(ctx: ToolContext, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments` as path rules judge them: the path the call names replaced by where it lands,
    its real place below the workspace root (`Workspace.locate`), so that an absolute spelling or
    a link to the folder is judged as the folder; as given when it lands nowhere (the tool refuses it)."""
    key = path_argument(tool, arguments)
    if key is None:
        return arguments
    try:
        with ctx.workspace.shared.locate(arguments[key]) as at:
            return {**arguments, key: at.rel}
    except WorkspaceError:
        return arguments
