"""A run's approver: calls under an `ask` rule wait, durably, until a person decides.

A call that asks is stored first (`Store.request_approval`), then announced (`approval.requested`),
and its agent's turn waits at that call; the run reads `waiting` meanwhile. A decision comes from:

- any process on the same store (`delegate runs approve`, the HTTP API of a server): it is stored
  there, and this process finds it at its next heartbeat, on the recorder's writer thread, the
  path a cancellation from another process takes (`Recorder.on_beat`);
- this process (the terminal's inline question, a server's own run): `RunApprovals.deliver`,
  after it is stored.

The decision is stored before the call acts on it. A run whose process died reads `interrupted`;
a decision given meanwhile is kept, and the resumed run finds it when the call asks again (the
model's answers replayed, so it is the same call): nobody is asked twice. The time a call waits
does not count against the run's deadline (`deadlines_paused`); `RunLimits.approval_timeout`
denies it with "no decision within S s".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from .._errors import UserError
from .._events import Event, EventSink, unheard
from .._record import ApprovalRow
from .._time import utc_now
from ..loop import EVENT_VALUE_LIMIT, deadlines_paused
from ..permissions import HookEvent
from ..tools import Approval, ApprovalRequest, HookSet, ToolContext

if TYPE_CHECKING:
    from .._store import Store
    from ..subagents import Roster
    from ..workspace import Workspace
    from ._recorder import Recorder

NEVER_WAIT = "batch items never wait for a person (allow the call in the batch's rules: --allow RULE)"
"""Why a batch item's call under an `ask` rule is refused."""
ALWAYS = "always"
"""The reason recorded for the calls of a rule approved always, approved without asking (and for
the call it was given on, when the person gave no other). Only a row's `always` marks the rule:
a resumed run reads its rules from those (`RunApprovals.load`), never from a reason's words."""


class RunApprovals:
    """The `Approver` of one run (see the module's docstring)."""

    def __init__(self, recorder: Recorder, timeout: float | None, roster: Roster) -> None:
        self.recorder = recorder
        self.timeout = timeout
        self.roster = roster
        """The run's subagents: a request names the type and description of its agent."""
        self.waiting: dict[str, asyncio.Future[Approval]] = {}
        """The calls waiting now, by call id."""
        self.always: set[str] = set()
        """Rules a person approved for the rest of the run."""
        self.claimed: set[str] = set()
        """The stored calls (by approval id) already bound to a call of this process."""
        self._loop: asyncio.AbstractEventLoop | None = None
        recorder.on_beat(functools.partial(_poll, self))  # decisions given elsewhere, found at each beat

    def load(self, rows: Sequence[ApprovalRow]) -> None:
        """Take in the rules a person approved "always" in the interrupted run being resumed (its
        stored calls: each such decision is stored with the call it was given on, in one statement)."""
        always = (r.rule for r in rows if r.decision == "approve" and r.always)
        self.always.update(rule for rule in always if rule is not None)

    async def decide(self, ctx: ToolContext, request: ApprovalRequest) -> Approval:
        self._loop = asyncio.get_running_loop()
        row = self._row(ctx, request)
        store = self.recorder.store
        if request.rule is not None and request.rule in self.always:
            row.decision, row.reason, row.decided_at, row.always = "approve", ALWAYS, utc_now(), True
        if store is not None:
            row = await self._stored(store, row)
        if row.decision is not None:  # decided before (a resumed run, or "always"): nobody is asked again
            self._decided(ctx, row)
            return Approval(row.decision == "approve", row.reason or "")
        future = self._loop.create_future()
        self.waiting[row.call_id] = future
        self._event(ctx, "approval.requested", row.to_dict() | {"arguments": _capped(row.arguments)})
        try:
            with deadlines_paused():
                approval = await asyncio.wait_for(asyncio.shield(future), self.timeout)
        except TimeoutError:
            approval = await self._deny(row, f"no decision within {self.timeout:g} s")
        except asyncio.CancelledError:
            if ctx.agent_id in self.roster.stopping:  # it will never run
                stopped = await self._deny(row, f"{ctx.agent_id} was stopped before anyone decided")
                row.decision, row.reason = ("approve" if stopped.approved else "deny"), stopped.reason
                self._decided(ctx, row)
            raise
        finally:
            self.waiting.pop(row.call_id, None)
        row.decision, row.reason = ("approve" if approval.approved else "deny"), approval.reason
        self._decided(ctx, row)
        return approval

    async def _stored(self, store: Store, row: ApprovalRow) -> ApprovalRow:
        """`row` as stored: the stored request of this very call (a resumed run asks again, and
        gets the decision given), else a new one. The model chose the call's id, and may give it
        to another call (of another subagent, or after a compaction): a stored request with that
        id is this call's only when its agent, tool and arguments are the same and no call of
        this process took it already; otherwise the call is stored, and asked for, as `<id>_<n>`.
        A decision is never applied to a call it was not made on. A request of this call under
        `<id>_<n>` is looked for first: a resume forgets the undecided requests (`Store.claim_run`),
        so `<id>` may be free now while this call's decided request is further on."""
        given, n = row.call_id, 2
        chain = re.compile(rf"{re.escape(given)}(_\d+)?")
        for found in await asyncio.to_thread(functools.partial(store.approvals, row.run_id, under=given)):
            if chain.fullmatch(found.call_id) and found.call_id not in self.claimed and _same_call(found, row):
                self.claimed.add(found.call_id)
                return found
        while True:
            stored = await asyncio.to_thread(store.request_approval, row)
            if stored is row or (stored.call_id not in self.claimed and _same_call(stored, row)):
                self.claimed.add(stored.call_id)
                return stored
            row.call_id, n = f"{given}_{n}", n + 1

    async def _deny(self, row: ApprovalRow, reason: str) -> Approval:
        """Deny a call nobody decided, for `reason`: nobody decided in time, or its agent was
        stopped (it will never run: nobody is to be asked for it). A decision that came
        meanwhile stands. Shielded: the agent's own cancellation (a stop) does not cut it short."""
        store = self.recorder.store
        if store is None:
            return Approval(False, reason)
        return await asyncio.shield(asyncio.to_thread(_denied, store, row, reason))

    def deliver(self, call_id: str, approval: Approval, *, always: str | None = None) -> bool:
        """Give a waiting call its decision (already stored); on the event loop. `always` approves
        that rule's calls for the rest of the run. False if no such call waits here."""
        if always is not None and approval.approved:
            self.always.add(always)
        future = self.waiting.get(call_id)
        if future is None or future.done():
            return False
        future.set_result(approval)
        return True

    def poll(self) -> None:
        """Look for decisions given elsewhere (on the recorder's writer thread, at each beat)."""
        store, loop = self.recorder.store, self._loop
        ids = list(self.waiting)
        if store is None or loop is None or not ids:
            return
        for row in store.approval_decisions(self.recorder.run_id, ids):
            approval = Approval(row.decision == "approve", row.reason or "")
            always = row.rule if approval.approved and row.always else None
            loop.call_soon_threadsafe(functools.partial(self.deliver, row.call_id, approval, always=always))

    def _row(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalRow:
        live = self.roster.live.get(ctx.agent_id)
        record = live[0] if live is not None else None
        return ApprovalRow(
            run_id=ctx.run_id,
            call_id=request.call_id,
            agent_id=ctx.agent_id,
            parent_agent_id=ctx.parent_agent_id,
            subagent_type=record.type if record is not None else None,
            description=record.description if record is not None else None,
            tool=request.tool,
            arguments=request.arguments,
            rule=request.rule,
            requested_at=utc_now(),
        )

    def _decided(self, ctx: ToolContext, row: ApprovalRow) -> None:
        data = {"call_id": row.call_id, "tool": row.tool, "decision": row.decision, "reason": row.reason}
        self._event(ctx, "approval.decided", data)

    def _event(self, ctx: ToolContext, type: str, data: dict[str, Any]) -> None:
        self.recorder.emit(
            Event(
                type=type,  # type: ignore[arg-type]
                run_id=ctx.run_id,
                agent_id=ctx.agent_id,
                parent_agent_id=ctx.parent_agent_id,
                tool_call_id=ctx.tool_call_id,
                data=data,
            )
        )


def _denied(store: Store, row: ApprovalRow, reason: str) -> Approval:
    """What `RunApprovals._deny` stores (on a thread of its own)."""
    try:
        stored = store.decide_approval(row.run_id, row.call_id, "deny", reason)
    except UserError:  # decided meanwhile: that decision stands
        found = store.approval_decisions(row.run_id, [row.call_id])
        stored = found[0] if found else row
    return Approval(stored.decision == "approve", stored.reason or reason)


def _same_call(stored: ApprovalRow, row: ApprovalRow) -> bool:
    """Whether the stored request `stored` is the call `row` (its agent, tool and arguments)."""
    same = stored.agent_id == row.agent_id and stored.tool == row.tool
    return same and to_json(stored.arguments) == to_json(row.arguments)


def _capped(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments as an event keeps them: a long text cut (the store keeps the whole call)."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        out[key] = value[:EVENT_VALUE_LIMIT] if isinstance(value, str) else value
    return out


async def decide_call(
    store: Store | None,
    live: RunApprovals | None,
    run_id: str,
    call_id: str,
    approve: bool,
    reason: str,
    always: bool,
    user_id: str | None,
) -> ApprovalRow:
    """Store a person's decision on a waiting call, then give it to the call at once when its run
    goes on here (`live`); `always` approves that rule's calls for the rest of the run. What
    `Runtime.decide` does."""
    if store is None:
        raise UserError("deciding a call needs the store of its run (store=False keeps nothing)")
    decision = "approve" if approve else "deny"
    if always and approve and not reason:
        reason = ALWAYS
    decide = functools.partial(store.decide_approval, always=always and approve)
    row = await asyncio.to_thread(decide, run_id, call_id, decision, reason or None, user_id)
    if live is not None:
        live.deliver(call_id, Approval(approve, reason), always=row.rule if always else None)
    return row


def _poll(approvals: RunApprovals) -> None:
    """The recorder's beat hook of `approvals`: errors of one poll are left for the next."""
    with contextlib.suppress(Exception):
        approvals.poll()


async def prompt_hooks(hooks: HookSet, prompt: str, workspace: Workspace, sinks: list[EventSink]) -> str:
    """A prompt once its `UserPromptSubmit` hooks spoke: refused (`UserError` with their reason),
    or with the context they add after it."""

    def emit(event: Event) -> None:
        for sink in sinks:
            sink(event)

    ctx = ToolContext(run_id="", agent_id="lead", workspace=workspace, emit=emit if sinks else unheard)
    why, added = await hooks.context(ctx, HookEvent(name="UserPromptSubmit", run_id="", agent_id="lead", prompt=prompt))
    if why is not None:
        raise UserError(f"a UserPromptSubmit hook refused the prompt: {why}")
    return f"{prompt}\n\n{added}" if added else prompt
