"""The `openai:` provider: any server that speaks OpenAI Chat Completions.

That is OpenAI itself and the local servers that copy its API (vLLM, llama.cpp, Ollama, LM Studio).
The official SDK does the HTTP; this module translates our messages to Chat Completions and back,
assembles streamed deltas, and owns the retry policy (the SDK's own retries are switched off, so
how often and how long we retry is decided and tested here).

The SDK is imported when the first client is built, not when this module is imported, so code
that only needs the translation (the local model) does not pay for it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email.utils
import json
import os
import random
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from .._errors import ModelError, UserError
from .._messages import MediaPart, Message, Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .._usage import Usage
from ._base import ModelRequest, ModelResponse, StopReason, ToolSpec
from ._constrained import constrained_format, constrained_instructions, lean_specs, parse_constrained, render_call

if TYPE_CHECKING:
    from openai import AsyncOpenAI, AsyncStream
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["OpenAIModel", "chat_messages"]

LOCAL_API_KEY = "not-needed"
"""Sent when a base URL is set but no key: local servers need none, but the SDK wants one."""

MAX_RETRY_AFTER = 120.0
"""The longest Retry-After we wait for; a server asking for more is waited on this long."""

_STOP_REASONS: dict[str, StopReason] = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}

_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


class OpenAIModel:
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    `base_url` and `api_key` default to `OPENAI_BASE_URL` and `OPENAI_API_KEY`. A failed call is
    retried `max_retries` times on 429, 5xx, timeouts and connection errors, waiting
    `retry_delay * 2**n` seconds (with jitter, at most `max_retry_delay`) or what Retry-After says.
    `constrained_tools` replaces native tool calling by a JSON schema the server must follow (see
    `_constrained.py`), for small local models; `lean_tools` then also leaves out the optional
    arguments that name no path, so the tools' defaults apply (the local model does this).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        max_retries: int = 4,
        timeout: float = 300.0,
        stream: bool = True,
        constrained_tools: bool = False,
        lean_tools: bool = False,
        retry_delay: float = 0.5,
        max_retry_delay: float = 30.0,
    ) -> None:
        self.model = model
        self.max_retries = max_retries
        self.timeout = timeout
        self.stream = stream
        self.constrained_tools = constrained_tools
        self.lean_tools = lean_tools
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._clients: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._given_client = client.with_options(max_retries=0) if client is not None else None
        if client is not None:
            self.base_url: str | None = str(client.base_url)
            self._api_key = ""  # unused: the client has its own
        else:
            self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if key is None and self.base_url is None:
                raise UserError(
                    f"model 'openai:{model}' needs an API key: set OPENAI_API_KEY, "
                    "or set OPENAI_BASE_URL to use a local OpenAI-compatible server (vLLM, llama.cpp, Ollama)"
                )
            self._api_key = key or LOCAL_API_KEY
        # OpenAI's reasoning models refuse `max_tokens`; the servers that copy the API know only it.
        official = self.base_url is None or "api.openai.com" in self.base_url
        self._max_tokens_field = "max_completion_tokens" if official else "max_tokens"

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, base_url={self.base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        constrained = self.constrained_tools and bool(request.tools)
        params = self._params(request)
        attempt = 1
        while True:
            try:
                reply = await self._send(params)
                break
            except Exception as exc:
                failure = _classify(exc, self.base_url or "api.openai.com")
                if failure is None:
                    raise
                if not failure.retryable:
                    raise ModelError(f"{self.name}: {failure.message}") from exc
                if attempt > self.max_retries:
                    raise ModelError(f"{self.name} failed after {attempt} attempts: {failure.message}") from exc
                await asyncio.sleep(self._backoff(attempt, failure.retry_after))
                attempt += 1
        return reply.response(constrained=constrained)

    async def aclose(self) -> None:
        """Close the HTTP client of this event loop now, rather than when the loop shuts down.

        A client passed in is the caller's to close.
        """
        held = self._clients.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held.closer.aclose()

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        if self.constrained_tools and self.lean_tools and request.tools:
            request = replace(request, tools=lean_specs(request.tools))
        params: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request, constrained=self.constrained_tools),
        }
        if request.tools and self.constrained_tools:
            params["response_format"] = constrained_format(
                request.tools, request.messages, request.tool_choice, request.workspace
            )
        elif request.tools:
            params["tools"] = [_tool(spec) for spec in request.tools]
            if request.tool_choice == "required":
                params["tool_choice"] = "required"
            elif request.tool_choice != "auto":
                params["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        if request.max_tokens is not None:
            params[self._max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    async def _send(self, params: dict[str, Any]) -> _Reply:
        completions = (await self._client()).chat.completions
        if not self.stream:
            return _Reply.of_completion(await completions.create(**params, stream=False))
        stream = await completions.create(**params, stream=True, stream_options={"include_usage": True})
        async with stream:
            return await _Reply.of_stream(stream)

    async def _client(self) -> AsyncOpenAI:
        """The client of the running event loop: a connection pool cannot be shared across loops.

        Each `asyncio.run` (as `run_sync` does) gets its own client, which is closed as that loop
        shuts down, so no socket outlives its loop.
        """
        if self._given_client is not None:
            return self._given_client
        loop = asyncio.get_running_loop()
        for other in list(self._clients):  # a snapshot: worker threads may run loops of their own
            if other.is_closed():
                self._clients.pop(other, None)
        held = self._clients.get(loop)
        if held is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout)
            held = self._clients[loop] = _LoopClient(client, _close_at_shutdown(client))
            await held.closer.asend(None)
        return held.client

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_AFTER)
        delay = min(self.max_retry_delay, self.retry_delay * 2 ** (attempt - 1))
        return delay * (0.5 + random.random() / 2)


@dataclass(slots=True)
class _LoopClient:
    client: AsyncOpenAI
    closer: AsyncGenerator[None]


async def _close_at_shutdown(client: AsyncOpenAI) -> AsyncGenerator[None]:
    """Started once and left suspended: the loop's shutdown (`asyncio.run`, `asyncio.Runner`, and
    pytest-asyncio, which uses it) closes its async generators, and so this one closes the client."""
    try:
        yield
    finally:
        await client.close()


# -- errors and retries --


@dataclass(slots=True)
class _Failure:
    retryable: bool
    message: str
    retry_after: float | None = None


def _classify(exc: Exception, where: str) -> _Failure | None:
    """What a failed call means for the retry policy; `None` for errors that are not the server's."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return _Failure(True, f"the request to {where} timed out")
    if isinstance(exc, openai.APIConnectionError):
        return _Failure(True, f"could not connect to {where}: {exc.__cause__ or exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = _detail(exc.body, exc.message)
        if status in (401, 403):
            return _Failure(
                False,
                f"{where} refused the credentials (HTTP {status}): {detail}. "
                "Check OPENAI_API_KEY (and OPENAI_BASE_URL, if you use another server).",
            )
        if status in (408, 409, 429) or status >= 500:
            return _Failure(True, f"{where} answered HTTP {status}: {detail}", _retry_after(exc.response.headers))
        return _Failure(False, f"{where} rejected the request (HTTP {status}): {detail}")
    if isinstance(exc, openai.APIError):  # an error event inside a stream
        return _Failure(False, f"{where} reported an error: {exc.message}")
    if isinstance(exc, ValueError):  # JSON that does not decode, a chunk that does not validate
        return _Failure(False, f"{where} answered something that is not a Chat Completions reply: {exc}")
    return None


def _detail(body: object, fallback: str) -> str:
    if isinstance(body, Mapping):
        message = cast(Mapping[str, Any], body).get("message")
        if isinstance(message, str) and message:
            return message
    return fallback


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) * scale
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        moment = email.utils.parsedate_tz(value)
        if moment is not None:
            return max(0.0, email.utils.mktime_tz(moment) - time.time())
    return None


# -- requests --


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
    }


def chat_messages(request: ModelRequest, *, constrained: bool = False) -> list[dict[str, Any]]:
    """`request` as Chat Completions messages: the system prompt first, then the conversation.

    With `constrained`, tool calls and results travel as plain assistant and user text (see
    `_constrained_messages`), and the system prompt describes the tools.
    """
    system = request.system
    if constrained and request.tools:
        note = constrained_instructions(request.tools, request.tool_choice)
        system = f"{system}\n\n{note}" if system else note
    head: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    if constrained:
        return head + _constrained_messages(request.messages)
    out = head
    for message in request.messages:
        if message.role == "assistant":
            out.append(_assistant(message))
        else:
            out += _user_or_tool(message)
    return out


def _assistant(message: Message) -> dict[str, Any]:
    text = "".join(_as_text(part) for part in message.parts if part.kind in ("text", "media"))
    calls = message.tool_calls
    result: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        # `arguments` is re-encoded, never the raw text of a malformed call: servers that render
        # a chat template (vLLM, llama.cpp) parse it and would refuse the whole conversation.
        result["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in calls
        ]
    return result


def _user_or_tool(message: Message) -> list[dict[str, Any]]:
    """One `role: tool` message per tool result (they must follow the call), then any other parts."""
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.content} for part in message.tool_results
    ]
    rest = [part for part in message.parts if part.kind in ("text", "media")]
    if rest:
        if message.role == "tool":  # a tool's image or file: only user messages can carry media
            rest = [TextPart(text="Attached by the tools above:"), *rest]
        out.append({"role": "user", "content": _content(rest)})
    return out


def _content(parts: list[Part]) -> str | list[dict[str, Any]]:
    """A plain string when there is only text (what every server takes), else content parts."""
    if all(isinstance(part, TextPart) for part in parts):
        return "".join(cast(TextPart, part).text for part in parts)
    return [_content_part(part) for part in parts if isinstance(part, TextPart | MediaPart)]


def _content_part(part: TextPart | MediaPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    kind = part.media_type.lower()
    if kind.startswith("image/") and (part.url or part.data):
        return {"type": "image_url", "image_url": {"url": part.url or f"data:{kind};base64,{part.data}"}}
    if kind in _AUDIO_FORMATS and part.data:
        return {"type": "input_audio", "input_audio": {"data": part.data, "format": _AUDIO_FORMATS[kind]}}
    if kind == "application/pdf" and part.data:
        name = part.name or "document.pdf"
        return {"type": "file", "file": {"filename": name, "file_data": f"data:{kind};base64,{part.data}"}}
    return {"type": "text", "text": _as_text(part)}


def _as_text(part: Part) -> str:
    """Text, or what a model can be told of media that the message cannot carry."""
    if isinstance(part, TextPart):
        return part.text
    if not isinstance(part, MediaPart):
        return ""
    label = f"{part.name} ({part.media_type})" if part.name else part.media_type
    if part.media_type.startswith("text/") and part.data:
        try:
            return f"[{label}]\n" + base64.b64decode(part.data, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            pass
    if part.url:
        return f"[attachment {label}: {part.url}]"
    return f"[attachment {label} left out: this model API cannot take it]"


def _constrained_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation for a constrained model: tool calls as its own JSON, results as user text.

    Tool results go back as user messages, not `role: tool`: llama.cpp's server renders the
    model's own chat template, and the templates of small models without native tool support
    either drop `tool` messages or fail on a `tool` message that follows no `tool_calls`. Many of
    them (Gemma, Mistral) also insist that user and assistant alternate, so neighbours of one role
    are merged into one message.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            calls = message.tool_calls
            text = "\n".join(render_call(c) for c in calls) if calls else message.text
            entry: dict[str, Any] = {"role": "assistant", "content": text}
        else:
            parts: list[Part] = []
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    parts.append(TextPart(text=f"Result of {part.name}:\n{part.content}\n"))
                elif isinstance(part, TextPart | MediaPart):
                    parts.append(part)
            if not parts:
                continue
            entry = {"role": "user", "content": _content(parts)}
        if out and out[-1]["role"] == entry["role"]:
            out[-1]["content"] = _merge(out[-1]["content"], entry["content"])
        else:
            out.append(entry)
    return out


def _merge(first: str | list[dict[str, Any]], second: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    return [*_as_parts(first), *_as_parts(second)]


def _as_parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


# -- responses --


@dataclass(slots=True)
class _Call:
    """A tool call being assembled from stream deltas."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list[str])

    def part(self) -> ToolCallPart:
        text = "".join(self.arguments)
        call_id = self.id or f"call_{uuid.uuid4().hex[:24]}"
        if not text.strip():
            return ToolCallPart(id=call_id, name=self.name, arguments={})
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return ToolCallPart(id=call_id, name=self.name, arguments=cast(dict[str, Any], value))
        return ToolCallPart(id=call_id, name=self.name, arguments={}, raw_arguments=text)


@dataclass(slots=True)
class _Reply:
    """What the server answered, whether it came in one piece or in stream chunks."""

    text: list[str] = field(default_factory=list[str])
    reasoning: list[str] = field(default_factory=list[str])
    calls: list[_Call] = field(default_factory=list[_Call])
    finish: str | None = None
    usage: Usage = field(default_factory=lambda: Usage(requests=1))
    model: str = ""

    @classmethod
    def of_completion(cls, completion: ChatCompletion) -> _Reply:
        reply = cls(model=completion.model or "")
        if completion.usage is not None:
            reply.usage = _usage(completion.usage)
        if not completion.choices:
            return reply
        choice = completion.choices[0]
        message = choice.message
        reply.finish = choice.finish_reason
        reply.text.append(message.content or "")
        reply.reasoning.append(_reasoning_of(message))
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)  # custom (non-function) tools are not ours
            if function is not None:
                reply.calls.append(_Call(id=call.id, name=function.name, arguments=[function.arguments or ""]))
        return reply

    @classmethod
    async def of_stream(cls, stream: AsyncStream[ChatCompletionChunk]) -> _Reply:
        reply = cls()
        by_index: dict[int, _Call] = {}
        async for chunk in stream:
            reply.model = chunk.model or reply.model
            if chunk.usage is not None:
                reply.usage = _usage(chunk.usage)
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                reply.text.append(delta.content or "")
                reply.reasoning.append(_reasoning_of(delta))
                for piece in delta.tool_calls or []:
                    current = by_index.get(piece.index)
                    # A new id at a known index is a new call: some servers number every call 0.
                    if current is None or (piece.id and current.id and piece.id != current.id):
                        current = by_index[piece.index] = _Call()
                        reply.calls.append(current)
                    current.id = current.id or piece.id or ""
                    if piece.function is not None:
                        current.name = current.name or piece.function.name or ""
                        current.arguments.append(piece.function.arguments or "")
                if choice.finish_reason:
                    reply.finish = choice.finish_reason
        return reply

    def response(self, *, constrained: bool) -> ModelResponse:
        parts: list[Part] = []
        reasoning = "".join(self.reasoning)
        if reasoning:
            parts.append(ReasoningPart(text=reasoning))
        text = "".join(self.text)
        if constrained:
            parts += parse_constrained(text)
        else:
            if text:
                parts.append(TextPart(text=text))
            parts += [call.part() for call in self.calls]
        if any(isinstance(part, ToolCallPart) for part in parts):
            stop: StopReason = "tool_use"
        else:
            stop = _STOP_REASONS.get(self.finish or "", "other")
        return ModelResponse(parts=parts, usage=self.usage, stop_reason=stop, model=self.model)


def _reasoning_of(message: object) -> str:
    """Reasoning text that vLLM, llama.cpp and others add as a non-standard field."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if isinstance(value, str):
            return value
    return ""


def _usage(usage: CompletionUsage) -> Usage:
    """prompt_tokens (cached ones included, as OpenAI counts them) are the input tokens."""
    details = usage.prompt_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=(details.cached_tokens or 0) if details is not None else 0,
        cache_write_tokens=(details.cache_write_tokens or 0) if details is not None else 0,
        requests=1,
    )
