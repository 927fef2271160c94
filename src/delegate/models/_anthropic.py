"""The `anthropic:<model>` provider: the Messages API through the official `anthropic` SDK.

The SDK is imported here and nowhere else, so `import delegate` never pays for it. Retries and
the call's deadline are `_retry.py`'s (the SDK's own retries are switched off): 429, 529, 5xx,
timeouts, dropped connections, overload reported in the middle of a stream, and answers that are
not whole (a stream that ends before `message_stop`, a message with no `stop_reason`, a body that
is not a Messages API message) are tried again. Bad requests and bad credentials fail at once
with a `ModelError` naming the status.

Translation, in short: the system prompt goes in `system`; tool results of a `role="tool"`
message become `tool_result` blocks of a user message; reasoning parts go back as `thinking`
blocks, only when they carry a signature (the API refuses unsigned ones); consecutive messages of
one role are merged, because the API wants user and assistant to alternate.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import os
import ssl
import weakref
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import anthropic
import httpx2  # the SDK's own HTTP library
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageParam, RawMessageStreamEvent, ThinkingConfigParam, ToolParam

from .._empty import empty_dict, empty_list
from .._errors import UserError
from .._messages import (
    MediaPart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .._text import safe_json
from .._usage import Usage
from ._base import FinishReason, ModelProfile, ModelRequest, ModelResponse, ToolSpec, warm_up
from ._prices import Pricing, table_at
from ._progress import progress
from ._retry import (
    DEFAULT_DEADLINE,
    BadAnswer,
    Failure,
    RetryPolicy,
    call_with_retries,
    check_deadline,
    excerpt,
    redact_urls,
    status_failure,
    transport_failure,
)
from ._tls import tls_context
from ._window import known_context_window

__all__ = ["AnthropicModel", "to_anthropic_messages", "to_anthropic_tools"]

REDACTED_PREFIX = "redacted_thinking:"
"""A `redacted_thinking` block travels as a `ReasoningPart` with no text and this signature prefix."""

_RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
}


class AnthropicModel:
    """A Claude model behind the `Model` seam.

    `api_key` and `base_url` default to `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL`; a `client`
    (an `anthropic.AsyncAnthropic`) replaces both. `max_tokens` is used when the request sets
    none. `stream=False` asks for whole messages instead of server-sent events. `thinking` is
    passed to the API as it is (for example `{"type": "adaptive"}`). `prompt_cache=True` asks the
    API to cache the prompt prefix, which an agent sends again on every turn. A request's
    `temperature` is not sent: the Messages API of anthropic 2.x has no such parameter.

    `timeout` bounds each connect and each read; `deadline` bounds the whole call (every attempt,
    every read of a stream, every wait between attempts). A failed call, or an answer that is not
    whole, is tried again as `retry` says (see `RetryPolicy`). `context_window` overrides the
    table of known models' windows (see `delegate.models`).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        max_tokens: int = 4096,
        stream: bool = True,
        thinking: ThinkingConfigParam | None = None,
        prompt_cache: bool = False,
        retry: RetryPolicy | None = None,
        timeout: float = 600.0,
        deadline: float = DEFAULT_DEADLINE,
        context_window: int | None = None,
        pricing: Pricing | bool = True,
    ) -> None:
        if not model:
            raise UserError("an Anthropic model needs a name, for example 'anthropic:claude-sonnet-4-5'")
        self.model = model
        self.max_tokens = max_tokens
        self.stream = stream
        self.thinking = thinking
        self.prompt_cache = prompt_cache
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.deadline = check_deadline(deadline)
        self._given_client = client
        self._api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        self._base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        if pricing is True:  # the table of whoever answers at the base URL, else Anthropic's
            pricing = Pricing(provider=table_at(self._base_url, "anthropic"))
        self.profile = ModelProfile(
            context_window=context_window or known_context_window(model),
            # Anthropic's `input_tokens` leave the cached ones out
            pricing=None if pricing is False else replace(pricing, cache_apart=True),
        )
        """Tokens the model reads at once (default: the table of known models), and how it is
        priced (default: `genai-prices`' table; False: no price)."""
        if client is None and self._api_key is None:
            raise UserError(
                f"model 'anthropic:{model}' needs an API key: set ANTHROPIC_API_KEY "
                "(and ANTHROPIC_BASE_URL for a server other than api.anthropic.com)"
            )
        self._tls = _load_sdk() if client is None else None
        """The certificates its clients verify servers with, loaded now, never in a request's time (see `_tls.py`)."""
        # One client per event loop: pooled connections belong to the loop that opened them.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = weakref.WeakKeyDictionary()

    @property
    def name(self) -> str:
        return f"anthropic:{self.model}"

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r})"

    async def aclose(self) -> None:
        """Close the HTTP connections this model opened in the running event loop.

        Not needed under `asyncio.run`: there the connections close when the loop shuts down.
        """
        owned = self._clients.pop(asyncio.get_running_loop(), None)
        if owned is not None:
            await owned.guard.aclose()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        params = safe_json(self._params(request))  # the SDK cannot encode a lone surrogate: see `_text.py`
        client = await self._client()
        where = redact_urls(self._base_url or "api.anthropic.com")

        async def attempt() -> ModelResponse:
            if self.stream:
                return await _streamed(client, params, self.model)
            try:
                message = await client.messages.create(**params, stream=False)
            except ValueError as exc:  # a JSON body cut short
                raise BadAnswer(f"the reply is not whole JSON: {exc}") from exc
            return _from_message(message, self.model)

        def classify(exc: Exception) -> Failure | None:
            return _classify(exc, where)

        return await call_with_retries(self.name, attempt, classify, self.retry, self.deadline, url=self._base_url)

    async def _client(self) -> anthropic.AsyncAnthropic:
        if self._given_client is not None:
            return self._given_client
        loop = asyncio.get_running_loop()
        owned = self._clients.get(loop)
        if owned is None:
            http = anthropic.DefaultAsyncHttpxClient(verify=self._tls or True, timeout=self.timeout)
            client = anthropic.AsyncAnthropic(
                api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self.timeout, http_client=http
            )
            owned = self._clients[loop] = _LoopClient(client, _close_at_loop_shutdown(client))
            await anext(owned.guard)  # from here on, the loop's shutdown closes the client
        return owned.client

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens or self.max_tokens,
            "messages": to_anthropic_messages(request.messages),
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools)
            if request.tool_choice == "required":
                params["tool_choice"] = {"type": "any"}
            elif request.tool_choice == "none":
                params["tool_choice"] = {"type": "none"}
            elif request.tool_choice != "auto":
                params["tool_choice"] = {"type": "tool", "name": request.tool_choice}
        if self.thinking is not None:
            params["thinking"] = self.thinking
        if self.prompt_cache:
            params["cache_control"] = {"type": "ephemeral"}
        return params


@dataclass(frozen=True, slots=True)
class _LoopClient:
    client: anthropic.AsyncAnthropic
    guard: AsyncGenerator[None, None]


async def _close_at_loop_shutdown(client: anthropic.AsyncAnthropic) -> AsyncGenerator[None, None]:
    """Closes `client` when it is closed itself, or when its event loop shuts down.

    `asyncio.run` (and every `asyncio.Runner`) finalises the async generators still open before
    closing the loop, so the pooled connections are closed in the loop that opened them, instead
    of leaking sockets when a model outlives one `asyncio.run`.
    """
    try:
        yield
    finally:
        await client.close()


# requests


def to_anthropic_messages(messages: list[Message]) -> list[MessageParam]:
    """The conversation as Messages API `messages`: tool results in user turns, roles alternating."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _assistant_blocks(message.parts) if role == "assistant" else _user_blocks(message.parts)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":  # the API wants tool results first in their user turn
            content: list[dict[str, Any]] = turn["content"]
            content.sort(key=lambda block: block["type"] != "tool_result")
    return cast(list[MessageParam], turns)


def to_anthropic_tools(tools: list[ToolSpec]) -> list[ToolParam]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters or {"type": "object"}}
        for t in tools
    ]


def _user_blocks(parts: list[Part]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        match part:
            case ToolResultPart():
                result = {"type": "tool_result", "tool_use_id": part.tool_call_id, "is_error": part.is_error}
                if part.content:  # an empty result is sent without content, which the API accepts
                    result["content"] = part.content
                blocks.append(result)
            case TextPart(text=text) if text:
                blocks.append({"type": "text", "text": text})
            case MediaPart():
                blocks.append(_media_block(part))
            case _:  # reasoning and tool calls belong to assistant turns
                pass
    return blocks


def _assistant_blocks(parts: list[Part]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        match part:
            case ReasoningPart(signature=str(signature)) if signature.startswith(REDACTED_PREFIX):
                blocks.append({"type": "redacted_thinking", "data": signature.removeprefix(REDACTED_PREFIX)})
            case ReasoningPart(text=text, signature=str(signature)):
                blocks.append({"type": "thinking", "thinking": text, "signature": signature})
            case TextPart(text=text) if text:
                blocks.append({"type": "text", "text": text})
            case ToolCallPart():
                blocks.append({"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments})
            case _:  # unsigned reasoning would be refused; media and results are not the model's
                pass
    return blocks


def _media_block(part: MediaPart) -> dict[str, Any]:
    """An image or document block; a kind the API cannot read becomes a note saying so."""
    kind = part.media_type.split("/")[0]
    if kind == "image" or part.media_type == "application/pdf":
        block_type = "image" if kind == "image" else "document"
        if part.data is not None:
            source = {"type": "base64", "media_type": part.media_type, "data": part.data}
            return _titled({"type": block_type, "source": source}, part)
        if part.url is not None:
            return _titled({"type": block_type, "source": {"type": "url", "url": part.url}}, part)
    if kind == "text" and part.data is not None:
        text = _decode_text(part.data)
        if text is not None:
            source = {"type": "text", "media_type": "text/plain", "data": text}
            return _titled({"type": "document", "source": source}, part)
    where = part.name or part.url or "inline data"
    return {"type": "text", "text": f"[attachment {where} ({part.media_type}) cannot be shown to this model]"}


def _titled(block: dict[str, Any], part: MediaPart) -> dict[str, Any]:
    if part.name and block["type"] == "document":
        block["title"] = part.name
    return block


def _decode_text(data: str) -> str | None:
    try:
        return base64.b64decode(data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


# responses


@dataclass(slots=True)
class _Block:
    type: str
    text: list[str] = field(default_factory=empty_list)
    signature: str | None = None
    id: str = ""
    name: str = ""
    input: dict[str, Any] | None = None


@dataclass(slots=True)
class _Accumulator:
    """Builds the answer from stream events, keeping tool input as the raw JSON text it came as."""

    model: str
    blocks: dict[int, _Block] = field(default_factory=empty_dict)
    usage: dict[str, int | None] = field(default_factory=empty_dict)
    stop_reason: str | None = None
    done: bool = False

    def add(self, event: RawMessageStreamEvent) -> None:
        match event.type:
            case "message_start":
                self.model = event.message.model or self.model
                self.usage = event.message.usage.model_dump()
            case "content_block_start":
                self.blocks[event.index] = _start_block(event.content_block.model_dump())
            case "content_block_delta":
                self._delta(self.blocks.get(event.index), event.delta.model_dump())
            case "message_delta":
                self.stop_reason = event.delta.stop_reason
                # the counts here are running totals: they replace, and a missing one keeps its value
                self.usage.update({k: v for k, v in event.usage.model_dump().items() if v is not None})
            case "message_stop":
                self.done = True
            case "content_block_stop":
                pass

    def _delta(self, block: _Block | None, delta: dict[str, Any]) -> None:
        if block is None:
            return
        match delta["type"]:
            case "text_delta":
                block.text.append(delta["text"])
            case "thinking_delta":
                block.text.append(delta["thinking"])
            case "input_json_delta":
                block.text.append(delta["partial_json"])
            case "signature_delta":
                block.signature = delta["signature"]
            case _:  # citations: not carried
                pass

    def response(self) -> ModelResponse:
        parts = [p for _, block in sorted(self.blocks.items()) if (p := _part(block)) is not None]
        usage = _usage(self.usage)
        return ModelResponse(
            parts=parts,
            usage=usage,
            finish_reason=_finish_reason(self.stop_reason),
            model=self.model,
            context_tokens=_context_tokens(usage),
        )


async def _streamed(client: anthropic.AsyncAnthropic, params: dict[str, Any], model: str) -> ModelResponse:
    accumulator = _Accumulator(model=model)
    stream = await client.messages.create(**params, stream=True)
    async with stream:
        kind = stream.response.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            body = await stream.response.aread()
            raise BadAnswer(f"the reply is {kind or 'untyped'}, not an event stream: {excerpt(body)}")
        try:
            async for event in stream:
                progress()  # each event is progress, for the request's idle watchdog
                accumulator.add(event)
        except (ValueError, KeyError, AttributeError, TypeError) as exc:  # data that is not JSON, or not an event
            raise BadAnswer(f"an event of the stream is not a Messages API event: {exc!r}") from exc
    if not accumulator.done:
        raise BadAnswer("the event stream ended before message_stop: the answer is incomplete")
    if accumulator.stop_reason is None:
        raise BadAnswer("the event stream ended without a stop_reason")
    return accumulator.response()


def _start_block(data: dict[str, Any]) -> _Block:
    block = _Block(type=data["type"])
    match block.type:
        case "text":
            block.text.append(data.get("text") or "")
        case "thinking":
            block.text.append(data.get("thinking") or "")
            block.signature = data.get("signature") or None
        case "redacted_thinking":
            block.signature = REDACTED_PREFIX + str(data.get("data") or "")
        case "tool_use":
            block.id, block.name = data["id"], data["name"]
            block.input = data.get("input") or {}
        case _:  # server tools and their results run on Anthropic's side: nothing for us
            pass
    return block


def _part(block: _Block) -> Part | None:
    text = "".join(block.text)
    match block.type:
        case "text":
            return TextPart(text=text) if text else None
        case "thinking" | "redacted_thinking":
            return ReasoningPart(text=text, signature=block.signature)
        case "tool_use":
            return _tool_call(block.id, block.name, text, block.input or {})
        case _:
            return None


def _tool_call(id: str, name: str, raw: str, started: dict[str, Any]) -> ToolCallPart:
    """A tool call from its streamed JSON; JSON that does not parse to an object is kept as text."""
    if not raw.strip():
        return ToolCallPart(id=id, name=name, arguments=started)
    try:
        arguments = json.loads(raw)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return ToolCallPart(id=id, name=name, raw_arguments=raw)
    return ToolCallPart(id=id, name=name, arguments=cast(dict[str, Any], arguments))


def _from_message(message: object, model: str) -> ModelResponse:
    if not isinstance(message, AnthropicMessage):  # the SDK hands back a body that is not JSON as text
        raise BadAnswer(f"the reply is not a Messages API message: {excerpt(message)}")
    if not message.stop_reason or not isinstance(cast(object, message.content), list):
        raise BadAnswer("the reply has no stop_reason or no content: it is not a whole message")
    parts: list[Part] = []
    for block in message.content:
        match block.type:
            case "text" if block.text:
                parts.append(TextPart(text=block.text))
            case "thinking":
                parts.append(ReasoningPart(text=block.thinking, signature=block.signature or None))
            case "redacted_thinking":
                parts.append(ReasoningPart(text="", signature=REDACTED_PREFIX + block.data))
            case "tool_use":
                parts.append(ToolCallPart(id=block.id, name=block.name, arguments=dict(block.input)))
            case _:
                pass
    usage = _usage(message.usage.model_dump())
    return ModelResponse(
        parts=parts,
        usage=usage,
        finish_reason=_finish_reason(message.stop_reason),
        model=message.model or model,
        context_tokens=_context_tokens(usage),
    )


def _usage(data: Mapping[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(data.get("input_tokens") or 0),
        output_tokens=int(data.get("output_tokens") or 0),
        cache_read_tokens=int(data.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(data.get("cache_creation_input_tokens") or 0),
        requests=1,
    )


def _context_tokens(usage: Usage) -> int:
    """Anthropic's input_tokens leave out the cached part of the prompt; the context holds it all."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens + usage.output_tokens


def _finish_reason(reason: str | None) -> FinishReason:
    return _FINISH_REASONS.get(reason or "", "other")


# failures


def _classify(exc: Exception, where: str) -> Failure | None:
    """What a failed try means for the retry policy; `None` for errors that are not the server's.

    An error inside a stream arrives with status 200: its error type decides.
    """
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or exc.message
        detail = f"{exc.type}: {message}" if exc.type else message
        if exc.status_code == 200:
            retryable = exc.type in _RETRYABLE_TYPES
            return Failure(f"{where} reported an error in the event stream: {detail}", retryable)
        return status_failure(where, exc.status_code, detail, exc.response.headers, "Check ANTHROPIC_API_KEY.")
    return transport_failure(where, exc, timeout=anthropic.APITimeoutError, connection=anthropic.APIConnectionError)


def _load_sdk() -> ssl.SSLContext:
    """The SDK made ready for a first request that costs what later ones do, when a model is built:
    taken once through a whole streamed call that never leaves the process (`_warm_up`: it builds
    the types of requests and answers on first use). Returns the certificates its clients verify
    servers with (see `_tls.py`)."""
    _warm_up()
    return tls_context()


def _canned_stream() -> bytes:
    """A streamed answer of text and a tool call, as the Messages API sends one."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    message: dict[str, Any] = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "usage": usage,
    }
    tool: dict[str, Any] = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message | {"stop_reason": None, "stop_sequence": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": tool},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": usage},
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


@functools.cache
def _warm_up() -> None:
    """One streamed call with a tool, through this adapter and the SDK, answered in the process by
    a canned stream (`httpx2.MockTransport`: no socket is opened), on an event loop of its own in
    a thread of its own (a model may be built inside a running loop). Once a process."""

    async def call() -> None:
        def answer(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_canned_stream())

        http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
        client = anthropic.AsyncAnthropic(api_key="warm-up", base_url="http://127.0.0.1:9", http_client=http)
        tool = ToolSpec(name="f", description="f", parameters={"type": "object", "properties": {}})
        request = ModelRequest(system="s", messages=[Message.user("hi")], tools=[tool])
        model = AnthropicModel("m", client=client.with_options(max_retries=0), retry=RetryPolicy(attempts=1))
        try:
            await model.complete(request)
        finally:
            await client.close()

    warm_up(call, "delegate-anthropic-warm-up")
