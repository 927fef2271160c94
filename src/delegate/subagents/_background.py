"""Background subagents: the lead starts them (`task(..., run_in_background=true)`), keeps working,
and hears of each one as it ends; and follow-ups to a completed subagent (`task_message`).

`Background` holds the background subagents of one run (the run's `background`, over its `Roster`). It is the
lead's `Inbox` (see `delegate.loop`): before each of the lead's model requests it adds one
notice of the subagents that ended since (each result in the bounded form of a `task` result,
`read`), once; and when the lead answers while some still run, the run waits for them and the
lead gets their results for one more turn. Its tools (`task_status`, `task_wait`, `task_stop`,
`task_message`) are offered once the run has a background subagent (`BackgroundGate`, the same
turn-by-turn gate that hides deferred tools), or from the start when the lead's definition names
them; `task_message` also once any subagent, foreground too, completed (a follow-up continues it).
A result the lead already read through one of them is not noticed again.

A follow-up continues a completed subagent's own conversation (kept in memory, and stored in its
subagent's row so that a resumed run can continue it too) with a new user message: one record, one id, its
steps and usage growing, `messages` counting the follow-ups.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from .._errors import ToolError
from .._events import Event, unheard
from .._messages import Message
from .._record import TaskOutput
from .._text import plural
from ..loop import AgentResult
from ..tools import Tool, ToolContext, ToolReturn
from ._conversation import Conversation
from ._output import read
from ._roster import Roster

BACKGROUND_TOOLS = ("task_status", "task_wait", "task_stop", "task_message")
"""The lead's tools for its background subagents and follow-ups."""
WAITING_TOOLS = ("task_status", "task_wait", "task_stop")
"""The background tools that need a subagent in the background (`task_message` needs a completed one)."""
BACKGROUND_HINT = (
    "Keep working: each one's result comes to you when it ends. task_status shows where they are, "
    "task_wait waits for them, task_stop stops one, task_message sends a completed one a follow-up."
)
NOTICE_NAME = "task_notification"
"""The name of the lead's message that tells it of background subagents that ended."""
MAX_NOTICE_CHARS = 8_000
"""The most characters of results one notice carries in full: more subagents that ended at once
are listed by id and status (`task_status` gives their results)."""
DEFAULT_WAIT = 300.0
"""Seconds `task_wait` waits when the lead gives no `timeout_s`."""


class FollowUps(Protocol):
    """What continues a completed subagent (the run's `SubagentRunner`)."""

    @property
    def continuable(self) -> bool: ...

    def conversation(self, record: TaskOutput) -> Conversation | None: ...

    async def follow_up(
        self, record: TaskOutput, kept: Conversation, message: str, parent: ToolContext, call_id: str | None
    ) -> TaskOutput: ...


class Background:
    """The background subagents of one run, and what the lead has heard of them."""

    def __init__(self, roster: Roster, follow_ups: FollowUps) -> None:
        self.roster = roster
        self.follow_ups = follow_ups
        self.tasks: dict[str, asyncio.Task[TaskOutput]] = {}
        """Each background subagent's task (its last follow-up's, when it took one in the background)."""
        self.named = False
        """The lead's definition names the background tools: they are offered from the start."""
        self._unheard: dict[str, None] = {}
        """Subagents that ended in the background, in the order they ended, that the lead has not read."""
        self._read: dict[str, int] = {}
        """Per subagent, the last of its results the lead read (by its `messages`: a follow-up's is new)."""
        self._follow_ups: dict[str, asyncio.Future[TaskOutput]] = {}
        """Each subagent's last follow-up, as it was sent (before anything awaits): a second one to
        the same subagent while it is under way is refused, even within one turn."""

    @property
    def open(self) -> bool:
        """Whether the lead is offered the background tools now."""
        return self.named or bool(self.tasks)

    @property
    def continuable(self) -> bool:
        """Whether the run has a completed subagent, foreground or background, whose conversation a
        follow-up can continue: `task_message` is offered from then on."""
        return self.follow_ups.continuable

    def start(self, agent_id: str, work: Coroutine[Any, Any, TaskOutput]) -> None:
        """Run `work` (one subagent, or a follow-up) in the background."""
        task = asyncio.create_task(work, name=f"delegate-{agent_id}")
        self.tasks[agent_id] = task
        task.add_done_callback(functools.partial(self._ended, agent_id))

    def _ended(self, agent_id: str, task: asyncio.Task[TaskOutput]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        record = task.result()
        # A task's done callbacks run a loop turn after it ends: `task_wait` may have found it done
        # and given its result first. Then the lead has read this result, and is not told again.
        if self._read.get(agent_id) != record.messages:
            self._unheard[agent_id] = None

    def _heard(self, agent_id: str) -> None:
        self._unheard.pop(agent_id, None)
        record = self.roster.by_id.get(agent_id)
        if record is not None and agent_id not in self.roster.live:
            self._read[agent_id] = record.messages

    # -- the lead's inbox -------------------------------------------------------------------

    def take(self) -> list[Message]:
        """One notice of the background subagents that ended since the last request, each once."""
        if not self._unheard:
            return []
        roster = self.roster
        ended = [roster.by_id[a] for a in self._unheard if a in roster.by_id and a not in roster.live]
        self._unheard.clear()
        if not ended:
            return []
        self._read.update((r.id, r.messages) for r in ended)
        texts: list[str] = []
        room = MAX_NOTICE_CHARS
        for at, record in enumerate(ended):
            text = f"Background subagent {record.id} ended:\n{record.id} {read(record)[0]}"
            if len(text) > room and texts:
                rest = ", ".join(f"{r.id} [{r.status}]" for r in ended[at:])
                texts.append(f"Also ended: {rest}. task_status with their ids gives their results.")
                break
            texts.append(text)
            room -= len(text)
        if roster.emit is not unheard:
            for record in ended:
                roster.emit(
                    Event(
                        type="subagent.notified",
                        run_id=roster.run_id,
                        agent_id="lead",
                        data={"subagent": record.id, "status": record.status, "messages": record.messages},
                    )
                )
        return [Message.user("\n\n".join(texts), name=NOTICE_NAME, hidden=True)]

    async def settle(self) -> bool:
        """The lead answered: wait for the background subagents still running (a run does not
        end under its subagents); True when the lead has results to read in one more turn."""
        running = [t for t in self.tasks.values() if not t.done()]
        if running:
            await asyncio.wait(running)
        return any(a in self.roster.by_id for a in self._unheard)

    async def outlast(self, lead: Awaitable[AgentResult]) -> AgentResult:
        """Run the lead to its end, then let its background subagents end: a run does not end
        under its subagents (their time is up with the run's, though)."""
        ended = await lead
        await self.close(timed_out=ended.status == "timed_out")
        return ended

    async def close(self, *, timed_out: bool) -> None:
        """The lead ended: wait for what still runs, or stop it when the run's time is up."""
        running = [t for t in self.tasks.values() if not t.done()]
        if not running:
            return
        if timed_out:
            await self.cancel_all()
        else:
            await asyncio.wait(running)

    async def cancel_all(self) -> None:
        """The run is cancelled (or interrupted): so is every background subagent."""
        running = [t for t in self.tasks.values() if not t.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, agent_id: str, reason: str) -> bool:
        """Stop `agent_id` (foreground or background, running or waiting to start); False if it
        is not running."""
        roster = self.roster
        if roster.stop(agent_id, reason):
            return True
        task = self.tasks.get(agent_id)
        if task is None or task.done() or agent_id in roster.stopping:
            return False
        roster.stop_when_started({agent_id: reason})  # not started yet: it ends as soon as it starts
        return True

    def stop_from_outside(self, agent_id: str, reason: str | None) -> None:
        """A stop asked from another process (`delegate runs stop`, the HTTP API)."""
        if not self.stop(agent_id, reason or "stopped by the operator"):
            roster = self.roster
            roster.emit(
                Event(
                    type="warning",
                    run_id=roster.run_id,
                    agent_id="lead",
                    data={"message": f"asked to stop {agent_id}, which is not running: nothing stopped"},
                )
            )

    def _task(self, agent_id: str) -> asyncio.Task[Any] | None:
        task = self.tasks.get(agent_id)
        if task is not None and not task.done():
            return task
        return self.roster.tasks.get(agent_id)

    # -- the tools' work --------------------------------------------------------------------

    def known(self, ids: object) -> list[str]:
        """The subagents a tool call names (`ids`; default: every background one), checked."""
        roster = self.roster
        if ids is None:
            return list(self.tasks)
        if isinstance(ids, str):
            ids = [ids]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in cast(list[object], ids)):
            raise ToolError('ids must be a list of subagent ids, such as ["sub1", "sub2"]')
        names = cast(list[str], ids)
        for agent_id in names:
            if agent_id not in self.tasks and agent_id not in roster.by_id and agent_id not in roster.live:
                ran = sorted({*self.tasks, *roster.by_id, *roster.live}, key=_number)
                listed = ", ".join(ran) or "none yet"
                raise ToolError(f"no subagent {agent_id!r} in this run; its subagents: {listed}")
        return list(dict.fromkeys(names))

    def report(self, agent_id: str) -> str:
        """Where `agent_id` is: its result once it ended (then read: no notice repeats it)."""
        roster = self.roster
        live = roster.live.get(agent_id)
        if live is not None:
            record, ctx = live
            elapsed = (datetime.now(UTC) - record.started_at).total_seconds() if record.started_at else 0.0
            steps = (record.steps if record.messages else 0) + ctx.steps
            return (
                f"{agent_id} [running] {record.type}: {record.description} ({plural(steps, 'step')}, "
                f"{plural(ctx.usage.total_tokens, 'token')} so far, {elapsed:.0f}s)"
            )
        record = roster.by_id.get(agent_id)
        if record is None:
            return f"{agent_id} [running] waiting for a place to start (the run's max_parallel)"
        self._heard(agent_id)
        return f"{agent_id} {read(record)[0]}"

    async def wait(self, ids: list[str], timeout: float, any_: bool) -> str:
        running = [t for t in (self._task(a) for a in ids) if t is not None and not t.done()]
        if running:
            how = asyncio.FIRST_COMPLETED if any_ else asyncio.ALL_COMPLETED
            await asyncio.wait(running, timeout=timeout, return_when=how)
        still = [a for a in ids if a in self.roster.live or (self._task(a) is not None and a not in self.roster.by_id)]
        ended = len(ids) - len(still)
        head = f"{ended} of {plural(len(ids), 'subagent')} ended."
        if still and not any_:
            head += f" Waited {timeout:g}s; {', '.join(still)} still running."
        return "\n\n".join([head, *(self.report(a) for a in ids)])

    async def stop_one(self, agent_id: str, reason: str) -> str:
        task = self._task(agent_id)
        if task is None or not self.stop(agent_id, reason):
            return f"{agent_id} is not running; nothing to stop.\n\n{self.report(agent_id)}"
        await asyncio.wait([task])
        return f"Stopped {agent_id}.\n\n{self.report(agent_id)}"

    async def message(
        self, agent_id: str, text: str, parent: ToolContext, call_id: str | None, background: bool
    ) -> str:
        roster = self.roster
        earlier = self._follow_ups.get(agent_id)
        if (
            agent_id in roster.live
            or (earlier is not None and not earlier.done())  # one sent this turn, not begun yet
            or (self._task(agent_id) is not None and agent_id not in roster.by_id)
        ):
            raise ToolError(
                f"{agent_id} is still running: wait for it (task_wait) or stop it (task_stop) before sending "
                "it a follow-up"
            )
        record = roster.by_id[agent_id]
        if record.depth > 1:
            raise ToolError(
                f"{agent_id} was started by {record.parent_agent_id}, not by you: only the subagents you "
                "started take a follow-up. Start a new task with what it needs instead."
            )
        kept = self.follow_ups.conversation(record)
        if kept is not None and call_id is not None and call_id in kept.follow_ups:
            done = record  # answered before the run was interrupted: not asked again
        elif record.status != "completed":
            raise ToolError(
                f"{agent_id} ended {record.status} ({record.stop_reason}) and cannot be continued: only a "
                "completed subagent takes a follow-up. Start a new task with what it needs instead."
            )
        elif kept is None:
            raise ToolError(
                f"{agent_id}'s conversation was not kept, so it cannot be continued: start a new task with "
                "what it needs instead."
            )
        elif background:
            self.start(agent_id, self.follow_ups.follow_up(record, kept, text, parent, call_id))
            self._follow_ups[agent_id] = self.tasks[agent_id]
            return f"Sent the follow-up to {agent_id} in the background.\n{BACKGROUND_HINT}"
        else:  # in a task of its own, so that it can be stopped
            sent = self._follow_ups[agent_id] = asyncio.ensure_future(
                self.follow_ups.follow_up(record, kept, text, parent, call_id)
            )
            done = await sent
        if background:
            self.start(agent_id, _given(done))
            return f"Sent the follow-up to {agent_id} in the background.\n{BACKGROUND_HINT}"
        self._heard(agent_id)
        return read(done)[0]


async def _given(record: TaskOutput) -> TaskOutput:
    return record


def _number(agent_id: str) -> tuple[int, str]:
    digits = agent_id.removeprefix("sub")
    return (int(digits), "") if digits.isascii() and digits.isdigit() else (1 << 30, agent_id)


class BackgroundGate:
    """Hides the background tools until the run has a background subagent (see the module)."""

    def __init__(self, background: Background) -> None:
        self.background = background

    def visible(self, messages: list[Message], names: list[str]) -> list[str]:
        if self.background.open:
            return names
        hidden = WAITING_TOOLS if self.background.continuable else BACKGROUND_TOOLS
        return [n for n in names if n not in hidden]

    def why_hidden(self, name: str) -> str:
        if name == "task_message":
            return "task_message continues a completed subagent, and none has completed yet: start one with task"
        return (
            f"{name} is for subagents started in the background: start one first with task(..., run_in_background=true)"
        )


def background_tools(background: Background) -> list[Tool]:
    """The lead's `task_status`, `task_wait`, `task_stop` and `task_message`."""
    ids_schema = {
        "type": "array",
        "items": {"type": "string"},
        "description": "Subagent ids (sub1, sub2, ...). Default: every subagent started in the background.",
    }

    def status(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        ids = background.known(args.get("ids"))
        if not ids:
            return ToolReturn(content="No subagent runs in the background.")
        return ToolReturn(content="\n\n".join(background.report(a) for a in ids))

    async def wait(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        ids = background.known(args.get("ids"))
        timeout = args.get("timeout_s", DEFAULT_WAIT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ToolError("timeout_s must be a number of seconds above 0")
        any_ = args.get("any", False)
        if not isinstance(any_, bool):
            raise ToolError("any must be true or false")
        if not ids:
            return ToolReturn(content="No subagent runs in the background: nothing to wait for.")
        return ToolReturn(content=await background.wait(ids, float(timeout), any_))

    async def stop(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        agent_id = _one_id(args)
        background.known([agent_id])
        reason = args.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ToolError("reason must be a string")
        return ToolReturn(content=await background.stop_one(agent_id, reason or "stopped by the lead"))

    async def message(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        agent_id = _one_id(args)
        background.known([agent_id])
        text = args.get("message")
        if not isinstance(text, str) or not text.strip():
            raise ToolError("message is required: what the subagent should do next, as you would tell it")
        in_background = args.get("run_in_background", False)
        if not isinstance(in_background, bool):
            raise ToolError("run_in_background must be true or false")
        return ToolReturn(content=await background.message(agent_id, text, ctx, ctx.tool_call_id, in_background))

    return [
        Tool(
            name="task_status",
            description=(
                "Where subagents are: each one's status, steps and tokens so far, and the result of each that ended."
            ),
            parameters={"type": "object", "properties": {"ids": ids_schema}, "additionalProperties": False},
            function=status,
        ),
        Tool(
            name="task_wait",
            description=(
                "Wait until all (or, with any=true, any) of the given subagents end, or until timeout_s; "
                "returns the results of those that ended."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "ids": ids_schema,
                    "timeout_s": {
                        "type": "number",
                        "description": f"Seconds to wait at most (default {DEFAULT_WAIT:g}).",
                    },
                    "any": {"type": "boolean", "default": False, "description": "Return as soon as one of them ends."},
                },
                "additionalProperties": False,
            },
            function=wait,
            watched=False,  # it waits on subagents (each watched itself), at most timeout_s
        ),
        Tool(
            name="task_stop",
            description="Stop one running subagent: it ends cancelled, and you get what it did so far.",
            parameters={
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The subagent's id (sub1, sub2, ...)."},
                    "reason": {"type": "string", "description": "Why, for the record."},
                },
                "required": ["id"],
                "additionalProperties": False,
            },
            function=stop,
        ),
        Tool(
            name="task_message",
            description=(
                "Send a completed subagent a follow-up: it goes on in its own conversation (it remembers "
                "what it read and did) and returns its new result. Only a completed subagent can be continued."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The completed subagent's id (sub1, sub2, ...)."},
                    "message": {"type": "string", "description": "What it should do next."},
                    "run_in_background": {
                        "type": "boolean",
                        "default": False,
                        "description": "true: return at once; its result comes to you when it ends.",
                    },
                },
                "required": ["id", "message"],
                "additionalProperties": False,
            },
            function=message,
            watched=False,  # a follow-up runs its subagent, whose calls are watched themselves
        ),
    ]


def _one_id(args: dict[str, Any]) -> str:
    agent_id = args.get("id")
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise ToolError("id is required: the subagent's id, such as sub1")
    return agent_id.strip()


def names_background_tools(names: Sequence[str] | None) -> bool:
    """Whether a definition's tool names name any background tool."""
    return names is not None and any(n in BACKGROUND_TOOLS for n in names)
