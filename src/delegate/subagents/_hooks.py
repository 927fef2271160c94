"""An agent run under its `Stop`/`SubagentStop` hooks: once it ends with an answer, the hooks may
send it back, once, with their reason as a new message (e.g. when its acceptance criteria do not
hold); whatever it answers then stands."""

from __future__ import annotations

from dataclasses import replace

from .._messages import Message
from ..loop import AgentResult, AgentSpec, run_agent
from ..permissions import HookEvent
from ..tools import HookSet, ToolContext

SENT_BACK = "A check of your work did not pass, so you are not done yet: {why}\nFix this, then finish again."


async def run_checked(
    spec: AgentSpec, ctx: ToolContext, messages: list[Message], hooks: HookSet | None, agent_type: str | None
) -> AgentResult:
    """`run_agent`, then the agent's stop hooks (`Stop` for the lead, `agent_type` None;
    `SubagentStop` for a subagent): sent back once when one blocks."""
    result = await run_agent(spec, ctx, messages)
    if hooks is None or result.status != "completed":
        return result
    said = result.stop_return.content if result.stop_return is not None else result.final
    name = "Stop" if agent_type is None else "SubagentStop"
    event = HookEvent(name=name, run_id=ctx.run_id, agent_id=ctx.agent_id, agent_type=agent_type, summary=said)
    why = await hooks.blocked(ctx, event)
    if why is None:
        return result
    again = [*result.messages, Message.user(SENT_BACK.format(why=why))]
    return await run_agent(replace(spec, journal=None), ctx, again)  # its first answers are the journal's
