"""The turn loop: ask the model, run the turn's tool calls concurrently, decide the next step.

Each turn ends in one of three step results, dispatched exhaustively:

- `Final`: the model answered without tool calls; its text is the answer.
- `Stop`: a stop tool (such as a subagent's `complete`) succeeded; its return is the answer.
- `RunAgain`: tool results were appended; ask the model again.

The loop also ends on the step limit, the token budget, the timeout, cancellation, the loop
guard (`_guard.py`: the same call failing again and again, or turns in a row without progress),
and a model request that makes no progress for `AgentSpec.stall_timeout` seconds. A tool call
that makes none that long is ended by the same idle watchdog (`Watchdog`), and its result says
so: the agent goes on.

Every request fits the model's context window (`delegate.models.context_window`): the
conversation is compacted once it passes `COMPACT_AT` of the window (unless `compaction` says
otherwise), and what still does not fit is cut before sending (`_fit.py`). A server that refuses a
request as too long anyway tells its window; the loop holds to it and asks again.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, assert_never

from .._config import Compaction, LoopSettings
from .._empty import empty_dict, empty_set
from .._errors import ContextOverflowError, ModelError, ToolError, UserError, WorkspaceError
from .._messages import Message, TextPart, ToolCallPart, ToolResultPart, safe_part, safe_parts
from .._record import EndStatus, StopReason
from .._usage import Usage
from ..models import (
    FREE_CHOICES,
    MessageTally,
    Model,
    ModelRequest,
    ModelResponse,
    PathState,
    ToolChoice,
    ToolSpec,
    context_window,
    estimate_tokens,
    mentioned_paths,
    request_cost,
)
from ..tools import Tool, ToolContext, ToolReturn
from ..workspace import Workspace
from ._budget import NOTHING, Reserve, RunBudget, cost_over, reserve_for
from ._deadline import Deadline, passed_deadline
from ._fit import cut_text, fit_request
from ._guard import LoopWatch
from ._watchdog import Watchdog


class _BudgetSpent(Exception):
    """No model request may start: the run's budget is spent (`reason` says which)."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason)
        self.reason: StopReason = reason


class _Stalled(Exception):
    """A model request made no progress for the stall timeout: the idle watchdog ended it."""


COMPACT_AT = 0.7
"""The share of the context window past which an agent's conversation is compacted."""
OVERFLOW_RETRIES = 2
"""How many times a request the server refused as too long is cut down further and sent again."""


def reply_reserve(window: int, max_tokens: int | None) -> int:
    """The tokens of the window kept free for the model's reply."""
    return max_tokens or min(window // 8, 8192)


class Journal(Protocol):
    """Where an agent's model answers and tool results are recorded as they happen, and read back
    when a run resumes: an answer or result found there is used instead of asking or calling again."""

    def answer(self, step: int) -> ModelResponse | None:
        """The recorded answer of turn `step` (1 is the first), or None to ask the model."""
        ...

    def record_answer(self, step: int, response: ModelResponse) -> None: ...

    def tool_result(self, call: ToolCallPart) -> ToolResultPart | None:
        """The recorded result of `call`, or None to call the tool."""
        ...

    def record_tool(self, call: ToolCallPart, result: ToolResultPart) -> None: ...


class ToolGate(Protocol):
    """Narrows an agent's tools turn by turn, from its conversation so far."""

    def visible(self, messages: list[Message], names: list[str]) -> list[str]:
        """Which of `names` the model is offered this turn."""
        ...

    def why_hidden(self, name: str) -> str:
        """What a call of hidden tool `name` is told."""
        ...


class Inbox(Protocol):
    """News for an agent from work it left running (the lead's background subagents), given to it
    between its turns."""

    def take(self) -> list[Message]:
        """What to add to the conversation before the next model request (each piece of news once)."""
        ...

    async def settle(self) -> bool:
        """The agent answered: wait for the work still running; True when there is news for it
        to read in one more turn (its answer is not final yet)."""
        ...


@dataclass(kw_only=True, slots=True)
class AgentSpec:
    """Everything the loop needs to run one agent."""

    name: str
    instructions: str
    model: Model
    tools: list[Tool]
    max_steps: int = 50
    timeout: float | None = None
    token_budget: int | None = None
    cost_budget: float | None = None
    """US dollars this agent alone may spend (see `cost_over`); the run's are `budget`'s."""
    max_tokens: int | None = None
    loop: LoopSettings = field(default_factory=LoopSettings)
    """Compaction, the context window and the loop guard: the run's, the same for all its agents."""
    budget: RunBudget | None = None
    """The run's budget, shared by the lead and its subagents (checked before every model request)."""
    gates: Sequence[ToolGate] = ()
    """Decide turn by turn which of `tools` the model is offered (an active skill's allowed tools,
    deferred tools not yet found with `tool_search`); a call of a hidden tool gets the gate's reason."""
    journal: Journal | None = None
    """Records what the agent did as it happens, and replays it when its run resumes."""
    first_tool_choice: ToolChoice | Sequence[ToolChoice] = "auto"
    """The tool choice of the first turn (`auto`, `required`, or the name of the tool to call), or
    of each of the first turns in order; later turns are `auto`. A weak model then delegates
    instead of answering, or takes the steps its work needs in their order."""
    inbox: Inbox | None = None
    """News from its background work: added before each request; an answer waits for the work."""
    compaction_model: Model | None = None
    """Its definition's compaction model, over the run's (`Compaction.model`); None: the run's."""
    stall_timeout: float | None = None
    """Seconds a tool call or a model request may go without progress before the idle watchdog
    ends it (`RunLimits.stall_timeout`; None: never)."""

    offered: tuple[dict[str, Tool], list[ToolSpec]] = field(init=False, repr=False, compare=False)
    """`tools` by name, and their specs (what a turn without gates offers): made once a spec,
    which the subagents of one type share (and `estimate_tokens` then counts their schemas once)."""

    def __post_init__(self) -> None:
        self.offered = ({t.name: t for t in self.tools}, [t.spec for t in self.tools])
        names = [t.name for t in self.tools]
        for choice in opening_choices(self.first_tool_choice):
            if choice not in FREE_CHOICES and choice not in names:
                raise UserError(
                    f"{self.name}: first_tool_choice {choice!r} is not one of its tools "
                    f"({', '.join(names) or 'none'}); use 'auto', 'required' or one of those names"
                )

    def tool_choice(self, step: int) -> ToolChoice:
        """The tool choice of turn `step` (0 is the first)."""
        choices = opening_choices(self.first_tool_choice)
        return choices[step] if step < len(choices) and self.tools else "auto"


def opening_choices(value: ToolChoice | Sequence[ToolChoice]) -> tuple[ToolChoice, ...]:
    """A `first_tool_choice` as the choices of the first turns, in order."""
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(kw_only=True, slots=True)
class AgentResult:
    status: EndStatus
    stop_reason: StopReason
    final: str
    messages: list[Message]
    steps: int
    usage: Usage
    stop_return: ToolReturn | None = None
    error: str | None = None


@dataclass(slots=True)
class Final:
    text: str


@dataclass(slots=True)
class Stop:
    result: ToolReturn


@dataclass(slots=True)
class RunAgain:
    pass


Step = Final | Stop | RunAgain


@dataclass(kw_only=True, slots=True)
class _State:
    messages: list[Message]
    window: int
    """The model's context window, lowered when the server says it is smaller."""
    watch: LoopWatch | None = None
    """What the loop guard has seen (made at the first turn that runs again: see `_watch`)."""
    steps: int = 0
    context_tokens: int = 0
    tally: MessageTally = field(default_factory=MessageTally)
    """The conversation's characters, for the estimate of each request."""
    last_text: str = ""
    last_cost: float | None = None
    """What its last answer cost (None: none yet, or not priced)."""
    usage: Usage = field(default_factory=Usage)
    progressed: set[str] = field(default_factory=empty_set)
    """The ids of this turn's calls whose tools said they changed something."""
    call_ids: set[str] = field(default_factory=empty_set)
    """Every tool call id the conversation has held, compacted turns included (see `_own_ids`)."""
    given_ids: dict[str, str] = field(default_factory=empty_dict)
    """The id the model gave each call `_own_ids` renamed, by its own id."""
    dog: Watchdog | None = None
    """Its idle watchdog (None: its calls are not watched)."""

    def end(self, status: EndStatus, reason: StopReason, **extra: object) -> AgentResult:
        return AgentResult(
            status=status,
            stop_reason=reason,
            final=self.last_text,
            messages=self.messages,
            steps=self.steps,
            usage=self.usage,
            **extra,  # type: ignore[arg-type]
        )


async def run_agent(spec: AgentSpec, ctx: ToolContext, messages: list[Message]) -> AgentResult:
    """Run `spec` over `messages` until it ends. Usage so far stays in `ctx.usage` even if cancelled."""
    window = context_window(spec.model, spec.loop.context_window)
    state = _State(messages=list(messages), window=window, usage=ctx.usage)
    if len(messages) > 1:  # a conversation resumed or continued: its calls' ids are taken
        state.call_ids.update(
            p.id for m in messages if m.role == "assistant" for p in m.parts if isinstance(p, ToolCallPart)
        )
    if ctx.heard:
        pricing = spec.model.profile.pricing
        started = {"name": spec.name, "model": spec.model.name, "pricing": pricing and pricing.label}
        ctx.event("agent.started", started, detail=messages)
    deadline = Deadline(spec.timeout) if spec.timeout is not None else None
    if spec.stall_timeout is not None:
        state.dog = Watchdog(spec.stall_timeout).start()
    try:
        if deadline is None:
            result = await _turns(spec, ctx, state)
        else:
            with deadline:
                result = await _turns(spec, ctx, state)
    except TimeoutError:
        if deadline is None or not deadline.expired():
            raise
        result = state.end("timed_out", "timeout", error=f"timed out after {spec.timeout:g}s")
    except ModelError as exc:
        result = state.end("error", "model_error", error=str(exc))
    except _Stalled as exc:
        result = state.end("timed_out", "stalled", error=str(exc))
    except asyncio.CancelledError:
        ended = state.end("timed_out", "run_timeout") if passed_deadline() is not None else None
        ended = ended or state.end("cancelled", "cancelled")
        ctx.event("agent.completed", _summary(ended), detail=ended)
        raise
    finally:
        if state.dog is not None:
            state.dog.stop()
    if ctx.heard:
        ctx.event("agent.completed", _summary(result), detail=result)
    return result


async def _turns(spec: AgentSpec, ctx: ToolContext, state: _State) -> AgentResult:
    tools, specs = spec.offered
    while True:
        if state.steps >= spec.max_steps:
            return state.end("aborted", "max_steps", error=f"reached the step limit ({spec.max_steps})")
        if spec.token_budget is not None and state.usage.total_tokens >= spec.token_budget:
            return state.end("aborted", "token_budget", error=f"spent the token budget ({spec.token_budget})")
        if spec.cost_budget is not None and (over := cost_over(spec.cost_budget, state.usage, state.last_cost)):
            return state.end("aborted", "cost_budget", error=over)
        if spec.inbox is not None:
            state.messages += spec.inbox.take()
        offered, offered_specs = (tools, specs) if not spec.gates else _gated(spec.gates, tools, state.messages)
        try:
            response = await _answer(spec, ctx, state, offered_specs)
        except _BudgetSpent as spent:
            assert spec.budget is not None
            return state.end("aborted", spent.reason, error=spec.budget.why(spent.reason))
        state.steps += 1
        ctx.steps = state.steps
        step = await _next_step(response, offered, ctx, state, spec)
        match step:
            case Final(text=text):
                if spec.inbox is not None and await spec.inbox.settle():
                    continue  # its background work ended meanwhile: one more turn to read it
                return _final(state, text)
            case Stop(result=stop):
                return state.end("completed", "stop_tool", stop_return=stop)
            case RunAgain():
                stuck = _watch(spec, state)
                if stuck is not None:
                    reason, error = stuck
                    ctx.event("agent.stuck", {"stop_reason": reason, "error": error})
                    return state.end("aborted", reason, error=error)
            case _:
                assert_never(step)


async def _answer(spec: AgentSpec, ctx: ToolContext, state: _State, offered: list[ToolSpec]) -> ModelResponse:
    """This turn's answer, to a request that fits the context window: compacted when the
    conversation passes `COMPACT_AT` of it, cut down when it still does not fit, and cut further
    when the server refuses it as too long all the same."""
    for attempt in range(OVERFLOW_RETRIES + 1):
        request = ModelRequest(
            system=spec.instructions,
            messages=list(state.messages),
            tools=offered,
            max_tokens=spec.max_tokens,
            tool_choice=spec.tool_choice(state.steps),
            path_states=path_states(ctx.workspace, state.messages) if spec.model.profile.grounds_paths else None,
        )
        limit = state.window - reply_reserve(state.window, spec.max_tokens)
        threshold = int(state.window * COMPACT_AT)
        if spec.loop.compaction is not None:
            threshold = min(threshold, spec.loop.compaction.max_context_tokens)
        estimate = estimate_tokens(request, state.tally)
        if max(state.context_tokens, estimate) > threshold and await compact(spec, ctx, state):
            request.messages = list(state.messages)
            estimate = estimate_tokens(request, state.tally)
        fitted = fit_request(request, limit, estimate)
        if fitted is not request:
            ctx.event("context.cut", {"estimated_tokens": estimate, "limit": limit})
        try:
            return await _ask(spec, ctx, fitted, state)
        except ContextOverflowError as exc:
            if attempt == OVERFLOW_RETRIES:
                raise
            smaller = exc.limit if exc.limit and exc.limit < state.window else int(state.window * 0.75)
            ctx.event("context.overflow", {"window": state.window, "now": smaller, "error": str(exc)[:300]})
            state.window = smaller
            state.context_tokens = max(state.context_tokens, state.window)  # compact now, if it can
    raise AssertionError("unreachable")


def _watch(spec: AgentSpec, state: _State) -> tuple[StopReason, str] | None:
    """What the loop guard says of the turn that just ran (its calls, then their results). Its
    watch starts at the first such turn: an agent that ends in one turn never needs one."""
    guard = spec.loop.guard
    if not guard or len(state.messages) < 2:
        return None
    if state.watch is None:
        state.watch = LoopWatch(guard, advice=spec.model.profile.when_stuck)
    calls, results = state.messages[-2].tool_calls, state.messages[-1].tool_results
    return state.watch.after_turn(calls, results, state.progressed)


def path_states(workspace: Workspace, messages: list[Message]) -> dict[str, PathState]:
    """What `workspace` holds at each path `messages` mention: what a model that grounds path
    arguments gets, instead of the workspace itself."""
    states: dict[str, PathState] = {}
    for path in mentioned_paths(messages):
        try:
            with workspace.locate(path) as at:
                states[path] = "file" if at.is_file() else "absent" if at.info is None else "other"
        except WorkspaceError:
            states[path] = "other"
    return states


def _gated(
    gates: Sequence[ToolGate], tools: dict[str, Tool], messages: list[Message]
) -> tuple[dict[str, Tool], list[ToolSpec]]:
    """The tools each gate lets through this turn, as callable tools and as specs to offer; a
    hidden tool stays callable as a refusal that gives its gate's reason."""
    names = list(tools)
    callable_: dict[str, Tool] = {}
    for gate in gates:
        shown = gate.visible(messages, names)
        for name in names:
            if name not in shown and name not in callable_:
                callable_[name] = _refusal(name, gate.why_hidden(name))
        names = [name for name in names if name in shown]
    callable_.update((name, tools[name]) for name in names)
    return callable_, [tools[name].spec for name in names]


def _refusal(name: str, reason: str) -> Tool:
    def refuse(ctx: ToolContext, arguments: dict[str, object]) -> ToolReturn:
        raise ToolError(reason)

    return Tool(name=name, description=reason, parameters={"type": "object"}, function=refuse)


def _final(state: _State, text: str) -> AgentResult:
    state.last_text = text
    return state.end("completed", "final_answer")


async def _complete(
    model: Model,
    request: ModelRequest,
    usage: Usage,
    budget: RunBudget | None = None,
    reserve: Reserve = NOTHING,
    dog: Watchdog | None = None,
    turn: str = "a compaction",
) -> ModelResponse:
    """`model`'s answer to `request`, its usage priced (`Usage.cost_usd`, from the table its
    profile names; None without one). A request cut off by a timeout, a cancel or the idle
    watchdog (`dog`: no progress for its `idle` seconds; `_Stalled`, naming `turn`) still counts in
    `usage`, as one request whose tokens are unknown (`Usage.requests_without_usage`): the
    provider may have billed it, and no answer says for how much, so no token is made up, and
    its cost (so the agent's and the run's) is unknown, never $0.00."""
    try:
        if dog is None:
            response = await model.complete(request)
        else:
            with dog:
                response = await model.complete(request)
    except (asyncio.CancelledError, TimeoutError) as exc:
        if isinstance(exc, TimeoutError) and (dog is None or not dog.ended):
            if budget is not None:
                budget.release(reserve)
            raise
        usage.add(Usage(requests=1, requests_without_usage=1, cost_usd=None))
        if budget is not None:
            budget.cut(reserve)
        if dog is not None and dog.ended:
            raise _Stalled(
                f"the idle watchdog ended {model.name}'s request of {turn}: no progress for {dog.hung:.3g} s "
                f"(stall timeout {dog.idle:g} s)"
            ) from None
        raise
    except BaseException:
        if budget is not None:
            budget.release(reserve)
        raise
    pricing = model.profile.pricing
    spent = response.usage  # the answer's own: priced in place (two copies cost a fan-out 4 µs a subagent)
    spent.cost_usd = (
        None if pricing is None else request_cost(pricing, spent, model.name.partition(":")[2], response.model)
    )
    return response


async def _ask(spec: AgentSpec, ctx: ToolContext, request: ModelRequest, state: _State) -> ModelResponse:
    """The model's answer of this turn: recorded before an interruption, else asked (if the run's
    budget lets a request start: `_BudgetSpent` if not)."""
    step = state.steps + 1
    journal = spec.journal
    budget = spec.budget
    recorded = journal.answer(step) if journal is not None else None
    reserve = NOTHING
    answered: float | None = None
    if recorded is not None:  # answered before the run was interrupted: not asked (nor paid) again
        response = _own_ids(_safe(recorded), state.call_ids, state.given_ids)
        if budget is not None:
            budget.requests += 1  # but it was a request of this run, and counts against its budget
    else:
        reserve = reserve_for(budget, spec.model, state.context_tokens)
        if budget is not None and (spent := budget.begin(reserve)) is not None:
            raise _BudgetSpent(spent)
        if ctx.heard:
            ctx.event("model.request", {"step": step, "messages": len(request.messages)}, detail=request)
        response = _own_ids(
            _safe(await _complete(spec.model, request, state.usage, budget, reserve, state.dog, f"turn {step}")),
            state.call_ids,
            state.given_ids,
        )
        answered = time.time()  # the answer's time: what follows (a checkpoint written) is not the model's
        if journal is not None:
            journal.record_answer(step, response)
    state.usage.add(response.usage)
    state.last_cost = response.usage.cost_usd
    if budget is not None:
        budget.spend(response.usage, spec.model.name, reserve)
    state.context_tokens = response.context_tokens or response.usage.input_tokens + response.usage.output_tokens
    if response.text:
        state.last_text = response.text
    if recorded is None and ctx.heard:
        ctx.event(
            "model.response",
            {
                "step": step,
                "usage": response.usage.to_dict(),
                "tool_calls": [c.name for c in response.tool_calls],
                "text": response.text[:200],
            },
            detail=response,
            ts=answered,
        )
    return response


def _safe(response: ModelResponse) -> ModelResponse:
    """The answer with its text valid UTF-8: any model (a JSON `"\\ud800"`, a checkpoint of an
    older version) may answer a lone surrogate, which no provider, store or stream can take."""
    parts = safe_parts(response.parts)
    return response if parts is response.parts else replace(response, parts=parts)


_RENAMED = re.compile(r"(.+)_[0-9]+")
"""A call id `_own_ids` may have given: `<id>_<n>`."""


def _own_ids(response: ModelResponse, seen: set[str], renamed: dict[str, str]) -> ModelResponse:
    """The answer with an id of its own for each tool call: the model chooses them, and may give
    two calls one id (an empty one, `call_0` each turn, or on purpose). A call's id is what its
    result, its checkpoint and a person's decision on it are bound to, so one that `seen` (the ids
    the agent's conversation has held) holds already becomes `<id>_<n>`; the ids given are added to
    `seen`, and each renamed call's given id to `renamed`. Applied to a recorded answer too: it was
    recorded with its own ids, and comes out the same (a recorded `<id>_<n>` whose `<id>` the
    conversation held is taken for a renamed call of `<id>`)."""
    calls = response.tool_calls
    if not calls:
        return response
    ids = [c.id for c in calls]
    if all(ids) and len(set(ids)) == len(ids) and seen.isdisjoint(ids):
        for own in ids:
            base = _RENAMED.fullmatch(own)
            if base is not None and base[1] in seen:
                renamed[own] = base[1]
            seen.add(own)
        return response
    parts = list(response.parts)
    for i, part in enumerate(parts):
        if isinstance(part, ToolCallPart):
            given = part.id or "call"
            own, n = given, 2
            while own in seen:
                own, n = f"{given}_{n}", n + 1
            seen.add(own)
            if own != part.id:
                parts[i] = replace(part, id=own)
                renamed[own] = part.id
    return replace(response, parts=parts)


async def _next_step(
    response: ModelResponse, tools: dict[str, Tool], ctx: ToolContext, state: _State, spec: AgentSpec
) -> Step:
    state.messages.append(Message(role="assistant", parts=list(response.parts)))
    calls = response.tool_calls
    if not calls:
        return Final(response.text)
    ctx.conversation = state.messages
    journal, given = spec.journal, state.given_ids
    if len(calls) == 1:
        outcomes = [await _call_tool(calls[0], tools, ctx, journal, given, state.dog)]
    else:  # each call in a task of its own: each its own watchdog (`Watchdog.apart`)
        dog = state.dog
        outcomes = await asyncio.gather(
            *(_call_tool(call, tools, ctx, journal, given, dog, apart=True) for call in calls)
        )
    state.messages.append(Message(role="tool", parts=[part for part, _ in outcomes]))
    state.progressed = {part.tool_call_id for part, returned in outcomes if returned is not None and returned.progress}
    for part, returned in outcomes:
        if returned is not None and not part.is_error and tools[part.name].stop:
            return Stop(returned)
    return RunAgain()


async def _call_tool(
    call: ToolCallPart,
    tools: dict[str, Tool],
    ctx: ToolContext,
    journal: Journal | None = None,
    given_ids: dict[str, str] | None = None,
    watch: Watchdog | None = None,
    *,
    apart: bool = False,
) -> tuple[ToolResultPart, ToolReturn | None]:
    recorded = journal.tool_result(call) if journal is not None else None
    if recorded is not None:  # it ran before the run was interrupted: not run again
        return safe_part(recorded), None
    if ctx.heard:
        ctx.event("tool.started", {"name": call.name, "arguments": capped(call.arguments)}, tool_call_id=call.id)
    returned: ToolReturn | None = None
    try:
        returned = await _invoke(call, tools, ctx, given_ids.get(call.id) if given_ids else None, watch, apart=apart)
        part = ToolResultPart(tool_call_id=call.id, name=call.name, content=returned.content, keep=returned.keep)
    except ToolError as exc:
        message = f"Error: {ctx.workspace.shown(str(exc))}"
        part = ToolResultPart(tool_call_id=call.id, name=call.name, content=message, is_error=True)
    except Exception as exc:  # a tool's crash is the model's to handle, never the loop's
        message = f"Error: tool {call.name} failed: {type(exc).__name__}: {ctx.workspace.shown(str(exc))}"
        part = ToolResultPart(tool_call_id=call.id, name=call.name, content=message, is_error=True)
    # Whatever the tool (built-in, `@tool`, MCP) or its error put in it, the result is valid UTF-8:
    # a file name's byte 0xff reads `\xff`, never a lone surrogate no provider can send.
    part = safe_part(part)
    if journal is not None:
        journal.record_tool(call, part)
    if ctx.heard:
        ctx.event(
            "tool.completed",
            {
                "name": call.name,
                "is_error": part.is_error,
                "content": part.content[:RESULT_EXCERPT_CHARS],
                "size": len(part.content),
            },
            tool_call_id=call.id,
            detail=part,
        )
    return part, returned


RESULT_EXCERPT_CHARS = 1_000
"""How much of a tool's result its `tool.completed` event keeps (the web page's excerpt of it)."""
EVENT_VALUE_LIMIT = 64 * 1024
"""The most characters of one tool argument an event keeps; a longer one is cut, its size noted."""


def capped(arguments: dict[str, Any], limit: int = EVENT_VALUE_LIMIT) -> dict[str, Any]:
    """`arguments` for an event: each string argument longer than `limit` (a 20 MB `write_file`
    content, say) is cut to `limit` characters, and its full size noted as `<name>_size`."""
    for value in arguments.values():  # a loop, not `any` over a generator: 0.5 µs of each call's event
        if isinstance(value, str) and len(value) > limit:
            break
    else:
        return arguments
    out: dict[str, Any] = {"truncated": True}
    for key, value in arguments.items():
        if isinstance(value, str) and len(value) > limit:
            out[key], out[f"{key}_size"] = value[:limit], len(value)
        else:
            out[key] = value
    return out


async def _invoke(
    call: ToolCallPart,
    tools: dict[str, Tool],
    ctx: ToolContext,
    given: str | None,
    watch: Watchdog | None = None,
    *,
    apart: bool = False,
) -> ToolReturn:
    """Run `call`. A call of a watched tool that makes no progress for the stall timeout is ended
    (a `ToolError` that names the call and how long it hung): `watch` is the agent's watchdog
    (None: not watched); `apart`: the call runs in a task of its own, under a watchdog of its own
    made by the agent's (`Watchdog.apart`)."""
    found = tools.get(call.name)
    if found is None:
        raise ToolError(f"there is no tool named {call.name!r}; available tools: {', '.join(sorted(tools))}")
    if call.raw_arguments is not None:
        raise ToolError(
            f"the arguments of {call.name} were not a valid JSON object ({call.raw_arguments[:200]!r}); "
            "call it again with a JSON object that matches its schema"
        )
    if watch is None or not found.watched:
        return await found.run(ctx.for_call(call.id, given), call.arguments)
    dog = watch.apart() if apart else watch
    try:
        with dog:
            return await found.run(ctx.for_call(call.id, given), call.arguments)
    except TimeoutError:
        if not dog.ended:
            raise
        shown = json.dumps(call.arguments, ensure_ascii=False)
        shown = shown if len(shown) <= 300 else shown[:300] + "..."
        raise ToolError(
            f"the idle watchdog ended this call, {call.name} {shown}: it made no progress for {dog.hung:.3g} s "
            f"(stall timeout {dog.idle:g} s), so it was stopped with whatever it started; what it did before may "
            "be partly done. Check, then try another way (a command that prints as it goes, smaller steps)"
        ) from None
    finally:
        if apart:
            dog.drop()


async def compact(spec: AgentSpec, ctx: ToolContext, state: _State) -> bool:
    """Replace the older turns by a summary written by the compaction model; whether it did.

    Kept: the first message, and the recent messages from an assistant turn on (so no tool result
    loses its call). Tool results' `keep` texts are carried into the summary word for word. The
    transcript the summariser reads is cut to fit the window.
    """
    compaction = spec.loop.compaction or Compaction(max_context_tokens=int(state.window * COMPACT_AT))
    messages = state.messages
    cut = max(1, len(messages) - compaction.keep_recent)
    while cut < len(messages) and messages[cut].role != "assistant":
        cut += 1
    old = messages[1:cut]
    if cut >= len(messages) or not any(m.metadata.get("summary") is None for m in old):
        return False
    if spec.budget is not None and spec.budget.begin() is not None:
        return False  # the run's budget is spent: the next turn ends the agent
    model = spec.compaction_model or compaction.model or spec.model
    room = context_window(model) if model is not spec.model else state.window
    transcript = cut_text(render_transcript(old), int((room - reply_reserve(room, None) - 200) * 2.5))
    request = ModelRequest(
        system=(
            "You compact a conversation for an agent that will go on with it. Write a faithful summary: "
            "the task, what was done and found, decisions and their reasons, file paths, open questions."
        ),
        messages=[Message.user(transcript)],
    )
    response = _safe(await _complete(model, request, state.usage, dog=state.dog))
    state.usage.add(response.usage)
    if spec.budget is not None:
        spec.budget.spend(response.usage, model.name)
    kept: list[str] = []
    for message in old:
        kept += message.metadata.get("kept", [])
        kept += [p.keep for p in message.tool_results if p.keep]
    summary = response.text.strip()
    text = summary
    if kept:
        text += "\n\nPreserved tool results:\n" + "\n".join(f"- {k}" for k in kept)
    note = Message(
        role="user",
        parts=[TextPart(text=f"Historical conversation summary:\n{text}")],
        name="conversation_summary",
        metadata={"summary": text, "kept": kept},
    )
    state.messages = [messages[0], note, *messages[cut:]]
    state.context_tokens = 0
    ctx.event("compaction", {"messages_before": len(messages), "messages_after": len(state.messages)})
    return True


def render_transcript(messages: list[Message]) -> str:
    """Plain text of a conversation, for a summariser to read."""
    lines: list[str] = []
    for message in messages:
        summary = message.metadata.get("summary")
        if summary is not None:
            lines.append(f"[earlier summary]\n{summary}")
            continue
        for part in message.parts:
            match part.kind:
                case "text":
                    lines.append(f"[{message.role}] {part.text}")
                case "tool_call":
                    lines.append(f"[tool call {part.name}] {json.dumps(part.arguments, ensure_ascii=False)}")
                case "tool_result":
                    lines.append(f"[tool result {part.name}] {part.keep or part.content[:2000]}")
                case "media":
                    lines.append(f"[{message.role} attached {part.media_type}]")
                case "reasoning":
                    pass
    return "\n".join(lines)


def _summary(result: AgentResult) -> dict[str, object]:
    return {
        "status": result.status,
        "stop_reason": result.stop_reason,
        "steps": result.steps,
        "usage": result.usage.to_dict(),
        "error": result.error,
    }
