"""Fake models for tests: a scripted model that replays turns, and a model driven by a function;
and `subagent_record`, what a stand-in for `Runtime.run_task` (a batch's `ItemRunner`) gives back.

```python
model = ScriptedModel([call("write_file", path="a.md", content="hi"), reply("done")])
rt = Runtime(model=model, workspace=tmp_path)
assert rt.run_sync("write a.md").final == "done"
model.assert_complete()
```
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from ._messages import Part, TextPart, ToolCallPart
from ._record import Status, TaskOutput
from ._time import utc_now
from ._usage import Usage
from .models import ModelProfile, ModelRequest, ModelResponse
from .subagents import LEAD_INSTRUCTIONS

__all__ = [
    "FunctionModel",
    "ScriptedModel",
    "call",
    "is_lead",
    "reply",
    "respond",
    "subagent_record",
    "system_prompt",
]

_ids = itertools.count(1)


def reply(text: str, *, input_tokens: int = 10, output_tokens: int = 5) -> ModelResponse:
    """A turn that answers with text and no tool calls."""
    return ModelResponse(
        parts=[TextPart(text=text)],
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1),
        finish_reason="end_turn",
        model="test",
    )


def subagent_record(
    summary: str = "",
    *,
    status: Status = "completed",
    error: str | None = None,
    usage: Usage | None = None,
    acceptance: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
) -> TaskOutput:
    """The record of a subagent that just ran one step, as `Runtime.run_task` gives it back: what
    an `ItemRunner` standing in for the runtime returns (a batch stores it whole)."""
    now = utc_now()
    return TaskOutput(
        id="sub1",
        type="general-purpose",
        description="",
        tool_call_id=tool_call_id,
        parent_agent_id="batch",
        status=status,
        stop_reason="stop_tool" if status == "completed" else "model_error",
        summary=summary,
        steps=1,
        usage=usage or Usage(input_tokens=10, output_tokens=5, requests=1),
        acceptance=acceptance,
        error=error,
        started_at=now,
        completed_at=now,
    )


def call(name: str, /, **arguments: Any) -> ModelResponse:
    """A turn with one tool call. (For text or token counts alongside, use `respond`.)"""
    return respond([(name, arguments)])


def respond(
    calls: Iterable[tuple[str, dict[str, Any]]],
    *,
    text: str = "",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> ModelResponse:
    """A turn with several tool calls (run concurrently by the loop)."""
    parts: list[Part] = [TextPart(text=text)] if text else []
    parts += [ToolCallPart(id=f"call_{next(_ids)}", name=n, arguments=a) for n, a in calls]
    return ModelResponse(
        parts=parts,
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1),
        finish_reason="tool_use",
        model="test",
    )


Turn = ModelResponse | str | Callable[[ModelRequest], ModelResponse | str | Awaitable[ModelResponse]]


class _FakeModel:
    """What both fakes share: a name, a `latency` (seconds) awaited before each answer, a
    `profile` (what the model declares it can do: a small window, path grounding, advice when
    stuck, as a provider would), and every request seen, in `requests`."""

    def __init__(self, *, name: str, latency: float, profile: ModelProfile | None) -> None:
        self._name = name
        self.latency = latency
        self.profile = profile or ModelProfile()
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def aclose(self) -> None:
        """Nothing to close: a fake holds no connections."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        turn = self._turn()
        if self.latency:
            await asyncio.sleep(self.latency)
        return await _answer(turn, request)

    def _turn(self) -> Turn:
        raise NotImplementedError


class ScriptedModel(_FakeModel):
    """Replays `turns` in order, one per request, and records every request it saw.

    A turn is a `ModelResponse`, a string (a text reply), or a function of the request.
    `latency` (seconds) is awaited before each answer; `profile` is what the model declares.
    """

    def __init__(
        self,
        turns: Iterable[Turn],
        *,
        name: str = "test:scripted",
        latency: float = 0.0,
        profile: ModelProfile | None = None,
    ) -> None:
        super().__init__(name=name, latency=latency, profile=profile)
        self._turns = list(turns)
        self._next = 0

    def _turn(self) -> Turn:
        if self._next >= len(self._turns):
            raise AssertionError(f"ScriptedModel ran out of turns after {len(self._turns)} requests")
        self._next += 1
        return self._turns[self._next - 1]

    def assert_complete(self) -> None:
        """Fail unless every scripted turn was used."""
        left = len(self._turns) - self._next
        if left:
            raise AssertionError(f"ScriptedModel has {left} unused turn(s) of {len(self._turns)}")


class FunctionModel(_FakeModel):
    """Answers each request by calling `fn(request)` (sync or async): for logic-driven tests.
    `latency` (seconds) is awaited before each answer; `profile` is what the model declares."""

    def __init__(
        self,
        fn: Callable[[ModelRequest], ModelResponse | str | Awaitable[ModelResponse]],
        *,
        name: str = "test:function",
        latency: float = 0.0,
        profile: ModelProfile | None = None,
    ) -> None:
        super().__init__(name=name, latency=latency, profile=profile)
        self._fn = fn

    def _turn(self) -> Turn:
        return self._fn


def is_lead(request: ModelRequest | Mapping[str, Any]) -> bool:
    """Whether `request` is the lead agent's, not a subagent's: a `ModelRequest` a fake model
    sees, or the JSON body a loopback provider server receives (see `system_prompt`). The lead's
    system prompt begins with `LEAD_INSTRUCTIONS`; a subagent's never does."""
    return system_prompt(request).startswith(LEAD_INSTRUCTIONS)


def system_prompt(request: ModelRequest | Mapping[str, Any]) -> str:
    """The system prompt of `request`: a `ModelRequest`, or the JSON body of an OpenAI chat
    completion (its first message, when that is the system's) or of an Anthropic message (its
    `system`, a string or text blocks). `""` when it has none."""
    if isinstance(request, ModelRequest):
        return request.system
    system: Any = request.get("system")
    if system is None:  # OpenAI: the system prompt is the first message
        messages: list[dict[str, Any]] = request.get("messages") or [{}]
        system = messages[0].get("content") if messages[0].get("role") == "system" else ""
    if isinstance(system, list):  # content blocks
        blocks: list[dict[str, Any]] = system  # pyright: ignore[reportUnknownVariableType]
        system = "".join(str(block.get("text", "")) for block in blocks)
    return str(system or "")


async def _answer(turn: Any, request: ModelRequest) -> ModelResponse:
    if callable(turn):
        turn = turn(request)
        if inspect.isawaitable(turn):
            turn = await turn
    if isinstance(turn, str):
        return reply(turn)
    if not isinstance(turn, ModelResponse):
        raise TypeError(f"a scripted turn must give a ModelResponse or a str, not {type(turn).__name__}")
    return turn
