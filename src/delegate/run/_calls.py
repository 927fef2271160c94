"""Each model call of one agent of a stored run, and, where the store keeps it, what the call was
sent and what it answered (`GET /runs/{id}/agents/{agent_id}/calls`, the web page's model calls).

Nothing is stored for this alone. The events say when each call started and ended and what it
spent: `model.request` its step and how many messages it was sent, `model.response` its usage
(`cost_usd` included), the names of the tools it called and the start of its text. The agent's
conversation is kept where a run keeps it for what may follow: the lead's as its run ends (the
checkpoint `conversation`/`end` a thread continues from, with the lead's system prompt), a
completed subagent's as it completes, in its row with its record (what a follow-up continues; its
system prompt kept once a run, `Store.subagent_conversation`). A call's request was the system
prompt and the first `request_messages` messages of that conversation, and its answer the message
at `answer_message`: an answer is taken only when it has the tool calls and the text its
`model.response` event recorded.

What is not kept is said so, never made up (`why_not_kept`, a call's `note`): the conversation of
an agent still running, of a subagent that did not complete, of a run whose process died; a call
made before its agent's conversation was compacted (the messages it was sent were replaced by a
summary); the request of a call cut to fit the context window (what was cut is not kept; its
answer is still found). The tool definitions offered with a request are not kept, nor the calls
that compacted a conversation (they are in the agent's usage).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._empty import empty_list
from .._messages import Message, messages_adapter
from .._record import LIVE_STATUSES
from .._usage import Usage

if TYPE_CHECKING:
    from .._events import Event
    from .._store import RunRow, Store

__all__ = ["AgentCalls", "ModelCall", "agent_calls"]

LEAD = "lead"
CONVERSATION = "conversation"
EXCERPT_CHARS = 200
"""How much of an answer's text its `model.response` event keeps (see `delegate.loop`)."""


@dataclass(kw_only=True, slots=True)
class ModelCall:
    """One model request of an agent and its answer: when, on which model, what it spent, and
    where its request and answer are in the agent's kept conversation (None: not kept, `note`
    says why)."""

    step: int
    model: str
    started_at: float
    completed_at: float | None = None
    usage: Usage | None = None
    """None until it answered (or when it never did: its agent was stopped, the model failed)."""
    tool_calls: list[str] = field(default_factory=empty_list)
    request_messages: int | None = None
    """The request was the system prompt and this many messages from the start of `messages`."""
    answer_message: int | None = None
    """The index in `messages` of its answer."""
    note: str | None = None
    sent: int = 0
    text: str = ""
    cut: bool = False
    compacted: bool = False

    def to_dict(self) -> dict[str, Any]:
        done = self.completed_at
        return {
            "step": self.step,
            "model": self.model,
            "started_at": self.started_at,
            "completed_at": done,
            "duration_s": None if done is None else max(0.0, done - self.started_at),
            "usage": None if self.usage is None else self.usage.to_dict(),
            "cost_usd": None if self.usage is None else self.usage.cost_usd,
            "tool_calls": self.tool_calls,
            "request_messages": self.request_messages,
            "answer_message": self.answer_message,
            "note": self.note,
        }


@dataclass(kw_only=True, slots=True)
class AgentCalls:
    """An agent's model calls in the order it made them, and its conversation as kept."""

    run_id: str
    agent_id: str
    calls: list[ModelCall]
    system: str | None = None
    """Its system prompt, when kept (a lead of a run stored before it was kept has none)."""
    messages: list[Message] = field(default_factory=empty_list)
    why_not_kept: str | None = None
    """Why its conversation is not kept (None: it is)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "kept": self.why_not_kept is None,
            "why_not_kept": self.why_not_kept,
            "system": self.system,
            "messages": messages_adapter().dump_python(self.messages, mode="json"),
            "calls": [c.to_dict() for c in self.calls],
        }


def agent_calls(store: Store, run: RunRow, agent_id: str) -> AgentCalls | None:
    """The model calls of `agent_id` in `run` (read by its owner: the caller checked), with what
    the store keeps of their requests and answers; None when the run has no such agent."""
    events = [e for e in store.events(run.id) if e.agent_id == agent_id]
    if not any(e.type in ("agent.started", "subagent.started", "run.started") for e in events):
        return None
    calls = _calls(events)
    found = _conversation(store, run, agent_id)
    if isinstance(found, str):
        for call in calls:
            call.note = "not kept"
        return AgentCalls(run_id=run.id, agent_id=agent_id, calls=calls, why_not_kept=found)
    system, messages = found
    _place(calls, messages)
    return AgentCalls(run_id=run.id, agent_id=agent_id, calls=calls, system=system, messages=messages)


def _calls(events: list[Event]) -> list[ModelCall]:
    """The agent's calls, from its events (in the order they happened)."""
    calls: list[ModelCall] = []
    model, cut = "", False
    for event in events:
        data = event.data
        if event.type in ("agent.started", "run.started"):
            model = str(data.get("model") or model)
        elif event.type == "context.cut":
            cut = True
        elif event.type == "compaction":
            for call in calls:
                call.compacted = True
        elif event.type == "model.request":
            step, sent = int(data.get("step", 0)), int(data.get("messages", 0))
            calls.append(ModelCall(step=step, model=model, started_at=event.ts, sent=sent, cut=cut))
            cut = False
        elif event.type == "model.response" and calls and calls[-1].completed_at is None:
            call = calls[-1]
            call.completed_at = event.ts
            call.usage = Usage.from_dict(data.get("usage"))
            call.tool_calls = [str(name) for name in data.get("tool_calls", [])]
            call.text = str(data.get("text", ""))
    return calls


def _conversation(store: Store, run: RunRow, agent_id: str) -> tuple[str | None, list[Message]] | str:
    """The agent's system prompt and conversation as kept, or why they are not kept."""
    if agent_id == LEAD:
        data = store.checkpoint(run.id, CONVERSATION, "end")
        if data is None:
            if run.status in LIVE_STATUSES:
                return "not kept yet: the lead's conversation is kept when its run ends"
            return f"not kept: the run ended {run.status} without keeping the lead's conversation"
    else:
        record = store.subagent_record(run.id, agent_id)
        if record is None or record.status in LIVE_STATUSES:
            return "not kept yet: a subagent's conversation is kept when it completes"
        if record.status != "completed":
            return f"not kept: a subagent's conversation is kept when it completes, and this one ended {record.status}"
        data = store.subagent_conversation(run.id, agent_id)
        if data is None or data["messages"] != record.messages:
            return "not kept: this subagent completed in a run stored before its conversation was kept"
        data = {"messages": data.get("conversation", []), "system": data.get("system")}
    system = data.get("system")
    return (None if system is None else str(system)), messages_adapter().validate_python(data.get("messages", []))


def _place(calls: list[ModelCall], messages: list[Message]) -> None:
    """Find each call's request and answer in the kept conversation, or say why not."""
    after = 0  # where the last answer found was: a cut request's answer comes later
    for call in calls:
        if call.compacted:
            call.note = "not kept: sent before the conversation was compacted, which replaced these messages"
            continue
        if call.completed_at is None:
            call.note = "no answer came"
        if call.cut:
            found = next((i for i in range(after, len(messages)) if _answers(call, messages[i])), None)
            call.answer_message = found
            call.note = "cut to fit the context window before it was sent: the request as sent is not kept"
        elif call.sent < len(messages) and call.completed_at is not None and _answers(call, messages[call.sent]):
            call.request_messages = call.answer_message = call.sent
        elif call.completed_at is None and call.sent == len(messages):
            call.request_messages = call.sent  # its agent ended while it waited: the conversation is its request
        elif call.completed_at is not None:
            call.note = "not kept: the kept conversation does not hold this call (a follow-up still running?)"
        if call.answer_message is not None:
            after = call.answer_message + 1


def _answers(call: ModelCall, message: Message) -> bool:
    """Whether `message` is the answer `call`'s event describes."""
    return (
        message.role == "assistant"
        and [c.name for c in message.tool_calls] == call.tool_calls
        and message.text[:EXCERPT_CHARS] == call.text
    )
