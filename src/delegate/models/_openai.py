"""The `openai:` provider: any server that speaks OpenAI Chat Completions.

That is OpenAI itself and the local servers that copy its API (vLLM, llama.cpp, Ollama, LM Studio).
The official SDK does the HTTP; this module translates our messages to Chat Completions and back,
assembles streamed deltas, and checks that an answer is whole before it counts: a stream must end
with `[DONE]` after a finish reason, a plain reply must be a Chat Completions object with one.
Retries and the call's deadline are `_retry.py`'s (the SDK's own retries are switched off).

The SDK is imported when the first client is built, not when this module is imported, so code
that only needs the translation (the local model) does not pay for it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import json
import os
import re
import ssl
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from .._empty import empty_list
from .._errors import UserError
from .._messages import MediaPart, Message, Part, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .._text import safe_json
from .._usage import Usage
from ._base import FinishReason, ModelProfile, ModelRequest, ModelResponse, ToolSpec, warm_up
from ._constrained import (
    constrained_format,
    constrained_instructions,
    free_text_call,
    lean_specs,
    parse_constrained,
    render_call,
    unnumbered,
)
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

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDelta

__all__ = ["OpenAIModel", "chat_messages"]

LOCAL_API_KEY = "not-needed"
"""Sent when a base URL is set but no key: local servers need none, but the SDK wants one."""

FREE_TEXT_SYSTEM = "You write the text a task asks for, from what you are given, in your own words."

_FINISH_REASONS: dict[str, FinishReason] = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}

_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


class OpenAIModel:
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    `base_url` and `api_key` default to `OPENAI_BASE_URL` and `OPENAI_API_KEY`. `timeout` bounds
    each connect and each read; `deadline` bounds the whole call (every attempt, every read of a
    stream, every wait between attempts). A failed call, or an answer that is not whole, is tried
    again as `retry` says (see `RetryPolicy`). `constrained_tools` replaces native tool calling
    by a JSON schema the server must follow (see `_constrained.py`), for small local models;
    `lean_tools` then also leaves out the optional arguments that name no path, so the tools'
    defaults apply (the local model does this).

    `context_window` is how many tokens the model reads at once (default: the table of known
    models in `delegate.models`, else what the loop assumes); the loop compacts and cuts the
    conversation to fit it. `when_stuck` is what to tell a user whose agent went round in circles
    on this model (the local model says: use a real one). `pricing` is how its requests are priced
    (default: the table of the provider `genai-prices` knows at `base_url`, else OpenAI's, for a
    gateway, a proxy or a server of one's own; False: no price). All four are its `profile`.
    `provider` is the first word of its `name` (`local` for the embedded model).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 300.0,
        deadline: float = DEFAULT_DEADLINE,
        stream: bool = True,
        constrained_tools: bool = False,
        lean_tools: bool = False,
        context_window: int | None = None,
        when_stuck: str = "",
        pricing: Pricing | bool = True,
        provider: str = "openai",
    ) -> None:
        self.model = model
        self.provider = provider
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.deadline = check_deadline(deadline)
        self.stream = stream
        self.constrained_tools = constrained_tools
        self.lean_tools = lean_tools
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
        self._tls = _load_sdk() if client is None else None
        """The SDK imported and the certificates loaded now, so that neither counts in the first
        request's time (each event loop's client is built with them in milliseconds)."""
        # OpenAI's reasoning models refuse `max_tokens`; the servers that copy the API know only it.
        official = self.base_url is None or "api.openai.com" in self.base_url
        self._max_tokens_field = "max_completion_tokens" if official else "max_tokens"
        self.profile = ModelProfile(
            context_window=context_window or known_context_window(model),
            grounds_paths=constrained_tools,  # a constrained model narrows path arguments by `path_states`
            when_stuck=when_stuck,
            pricing=_pricing(pricing, self.base_url),
        )

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:
        shown = None if self.base_url is None else redact_urls(self.base_url)
        return f"OpenAIModel({self.model!r}, base_url={shown!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        constrained = self.constrained_tools and bool(request.tools)
        free = None
        if constrained:
            free = free_text_call(request.tools, request.messages, request.tool_choice, request.path_states)
        # The last guard before the SDK, which cannot encode a lone surrogate (see `_text.py`):
        # a walk of the request, no copy unless a string needs an escape.
        params = safe_json(self._params(request) if free is None else self._free_text_params(request))
        where = redact_urls(self.base_url or "api.openai.com")
        reply = await call_with_retries(
            self.name,
            lambda: self._send(params),
            lambda exc: _classify(exc, where),
            self.retry,
            self.deadline,
            url=self.base_url,
        )
        if free is not None:
            return reply.as_call(*free)
        return reply.response(constrained=constrained)

    def _free_text_params(self, request: ModelRequest) -> dict[str, Any]:
        """A plain request for the one free argument of a call whose other arguments are fixed
        (see `free_text_call`): one message of what its tools found, then what it was asked, then
        what to write (without its own JSON calls, which a small model would copy), under a short
        system prompt of its own (a small model copies the steps it was told instead)."""
        found: list[str] = []
        asked: list[str] = []
        for message in request.messages:
            for part in message.parts:
                if isinstance(part, ToolResultPart) and not part.is_error:
                    found.append(unnumbered(part.content))
                elif isinstance(part, TextPart) and message.role == "user":
                    asked.append(part.text)
        # What was read comes first and bare, then the task (which names the file): a small model
        # copies any label ("Result of read_file:", "docs/a.md:", "path summary.txt") into its text.
        ask = "Answer with that text alone: no JSON, no comments."
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": FREE_TEXT_SYSTEM},
            {"role": "user", "content": "\n\n".join([*found, *asked, ask])},
        ]
        params: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.max_tokens is not None:
            params[self._max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

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
                request.tools, request.messages, request.tool_choice, request.path_states
            )
        elif request.tools:
            params["tools"] = [_tool(spec) for spec in request.tools]
            if request.tool_choice in ("required", "none"):
                params["tool_choice"] = request.tool_choice
            elif request.tool_choice != "auto":
                params["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        if request.max_tokens is not None:
            params[self._max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    async def _send(self, params: dict[str, Any]) -> _Reply:
        from openai.types.chat import ChatCompletion

        completions = (await self._client()).chat.completions
        if not self.stream:
            try:
                completion = cast(object, await completions.create(**params, stream=False))
            except ValueError as exc:  # a JSON body cut short
                raise BadAnswer(f"the reply is not whole JSON: {exc}") from exc
            if not isinstance(completion, ChatCompletion):  # the SDK hands back a body that is not JSON as text
                raise BadAnswer(f"the reply is not Chat Completions JSON: {excerpt(completion)}")
            return _Reply.of_completion(completion)
        # The SDK's stream ends quietly at the end of the body, `[DONE]` or not: read the events
        # here, to tell a whole answer from a cut one.
        streaming = completions.with_streaming_response.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        async with streaming as response:
            kind = response.headers.get("content-type", "")
            if not kind.startswith("text/event-stream"):
                body = await response.http_response.aread()
                raise BadAnswer(f"the reply is {kind or 'untyped'}, not an event stream: {excerpt(body)}")
            async with contextlib.aclosing(_sse_data(response.iter_lines())) as events:
                return await _Reply.of_stream(events)

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
            from openai import AsyncOpenAI, DefaultAsyncHttpxClient

            http = DefaultAsyncHttpxClient(verify=self._tls or True, timeout=self.timeout)
            client = AsyncOpenAI(
                api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout, http_client=http
            )
            held = self._clients[loop] = _LoopClient(client, _close_at_shutdown(client))
            await held.closer.asend(None)
        return held.client


def _load_sdk() -> ssl.SSLContext:
    """The SDK made ready for a first request that costs what later ones do, when a model is built:
    imported (a second or more, once a process), and taken once through a whole streamed call
    that never leaves the process (`_warm_up`), since it imports its Chat Completions resources
    and builds the types of requests and answers on first use (over half a second more). Returns
    the certificates its clients verify servers with (see `_tls.py`)."""
    _warm_up()
    return tls_context()


_CANNED_CHUNKS: list[dict[str, Any]] = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "type": "function"}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
]
_CANNED_STREAM = (
    b"".join(
        b"data: "
        + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", **chunk}).encode()
        + b"\n\n"
        for chunk in _CANNED_CHUNKS
    )
    + b"data: [DONE]\n\n"
)


@functools.cache
def _warm_up() -> None:
    """One streamed call with a tool, through this adapter and the SDK, answered in the process by
    a canned stream (`httpx2.MockTransport`: no socket is opened), on an event loop of its own in
    a thread of its own (a model may be built inside a running loop). Once a process."""

    async def call() -> None:
        import httpx2
        from openai import AsyncOpenAI

        def answer(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_CANNED_STREAM)

        http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
        client = AsyncOpenAI(api_key="warm-up", base_url="http://127.0.0.1:9/v1", max_retries=0, http_client=http)
        tool = ToolSpec(name="f", description="f", parameters={"type": "object", "properties": {}})
        request = ModelRequest(system="s", messages=[Message.user("hi")], tools=[tool])
        try:
            await OpenAIModel("m", client=client, retry=RetryPolicy(attempts=1), pricing=False).complete(request)
        finally:
            await client.close()

    warm_up(call, "delegate-openai-warm-up")


def _pricing(given: Pricing | bool, base_url: str | None) -> Pricing | None:
    """`OpenAIModel`'s pricing: `given`, the table of whoever answers at `base_url` (True), or none
    (False). OpenAI's `prompt_tokens` include the cached ones, as the table counts them."""
    if given is True:
        return Pricing(provider=table_at(base_url, "openai"))
    return None if given is False else replace(given, cache_apart=False)


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


# -- errors --


class _StreamError(Exception):
    """An `error` object sent inside the event stream, after the `200 OK`."""

    def __init__(self, error: object) -> None:
        whole = str(error)
        detail: Mapping[str, Any] = cast(Mapping[str, Any], error) if isinstance(error, Mapping) else {}
        self.kind = str(detail.get("type") or detail.get("code") or "")
        super().__init__(str(detail.get("message") or whole))


_STREAM_ERRORS_WORTH_RETRYING = ("server_error", "rate_limit", "overloaded", "timeout", "unavailable")


def _classify(exc: Exception, where: str) -> Failure | None:
    """What a failed try means for the retry policy; `None` for errors that are not the server's."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        detail = _detail(exc.body, exc.message)
        hint = "Check OPENAI_API_KEY (and OPENAI_BASE_URL, if you use another server)."
        return status_failure(where, exc.status_code, detail, exc.response.headers, hint, exc.body)
    if isinstance(exc, _StreamError):
        retryable = any(word in exc.kind for word in _STREAM_ERRORS_WORTH_RETRYING)
        return Failure(f"{where} reported an error in the stream ({exc.kind or 'no type'}): {exc}", retryable)
    if isinstance(exc, openai.APIResponseValidationError):
        return Failure(f"{where} answered something that is not a Chat Completions reply: {exc}", retryable=True)
    return transport_failure(where, exc, timeout=openai.APITimeoutError, connection=openai.APIConnectionError)


def _detail(body: object, fallback: str) -> str:
    if isinstance(body, Mapping):
        message = cast(Mapping[str, Any], body).get("message")
        if isinstance(message, str) and message:
            return message
    return fallback


async def _sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str]:
    """The `data` of each server-sent event (its `data:` lines joined), in order."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        field_name, _, value = line.partition(":")
        if field_name == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


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
        said: dict[str, Any] = {"role": "user", "content": _content(rest)}
        if message.role == "user" and message.name and _NAME.fullmatch(message.name):
            said["name"] = message.name  # `parent_context_snapshot`, `task_notification`: what the message is
        out.append(said)
    return out


_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The names OpenAI's API takes on a message (others are left off, never sent to be refused)."""


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

    A numbered listing (`read_file`'s `cat -n` lines) goes without its numbers: a small model
    copies them into what it writes.

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
                    parts.append(TextPart(text=f"Result of {part.name}:\n{unnumbered(part.content)}\n"))
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
    arguments: list[str] = field(default_factory=empty_list)

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

    text: list[str] = field(default_factory=empty_list)
    reasoning: list[str] = field(default_factory=empty_list)
    calls: list[_Call] = field(default_factory=empty_list)
    finish: str | None = None
    usage: Usage = field(default_factory=lambda: Usage(requests=1))
    model: str = ""

    @classmethod
    def of_completion(cls, completion: ChatCompletion) -> _Reply:
        """The reply in a whole completion; a `BadAnswer` if it has no choice or no finish reason."""
        reply = cls()
        try:
            reply.model = completion.model or ""
            if completion.usage is not None:
                reply.usage = _usage(completion.usage)
            if not completion.choices:
                raise BadAnswer("the reply has no choices")
            choice = completion.choices[0]
            message = choice.message
            reply.finish = choice.finish_reason
            reply.text.append(message.content or "")
            reply.reasoning.append(_reasoning_of(message))
            for call in message.tool_calls or []:
                function = getattr(call, "function", None)  # custom (non-function) tools are not ours
                if function is not None:
                    reply.calls.append(_Call(id=call.id, name=function.name, arguments=[function.arguments or ""]))
        except (AttributeError, TypeError) as exc:  # fields of the wrong shape
            raise BadAnswer(f"the reply is not a Chat Completions object: {exc}") from exc
        if not reply.finish:
            raise BadAnswer("the reply has no finish_reason")
        return reply

    @classmethod
    async def of_stream(cls, events: AsyncIterator[str]) -> _Reply:
        """The reply in a stream's events; a `BadAnswer` unless it ends with `[DONE]` after a
        finish reason, the way every Chat Completions stream ends."""
        from openai.types.chat import ChatCompletionChunk

        reply = cls()
        by_index: dict[int, _Call] = {}
        async for data in events:
            progress()  # each event is progress, for the request's idle watchdog
            if data.strip() == "[DONE]":
                async for _ in events:  # read to the end, so the connection goes back to the pool
                    pass
                break
            try:
                payload = json.loads(data)
            except ValueError as exc:
                raise BadAnswer(f"a stream event is not JSON: {excerpt(data)}") from exc
            if not isinstance(payload, dict):
                raise BadAnswer(f"a stream event is not a Chat Completions chunk: {excerpt(data)}")
            chunk_data = cast(dict[str, Any], payload)
            if chunk_data.get("error"):
                raise _StreamError(chunk_data["error"])
            try:
                reply.add(ChatCompletionChunk.model_construct(**chunk_data), by_index)
            except (AttributeError, TypeError) as exc:  # fields of the wrong shape
                raise BadAnswer(f"a stream event is not a Chat Completions chunk: {excerpt(data)}") from exc
        else:
            cut = "before [DONE]" if reply.finish else "before a finish_reason"
            raise BadAnswer(f"the stream ended {cut}: the answer is incomplete")
        if not reply.finish:
            raise BadAnswer("the stream ended without a finish_reason")
        return reply

    def add(self, chunk: ChatCompletionChunk, by_index: dict[int, _Call]) -> None:
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            delta = cast("ChoiceDelta | None", choice.delta)  # some servers leave it out of the last chunk
            if delta is not None:
                self._add_delta(delta, by_index)
            if choice.finish_reason:
                self.finish = choice.finish_reason

    def _add_delta(self, delta: ChoiceDelta, by_index: dict[int, _Call]) -> None:
        self.text.append(delta.content or "")
        self.reasoning.append(_reasoning_of(delta))
        for piece in delta.tool_calls or []:
            current = by_index.get(piece.index)
            # A new id at a known index is a new call: some servers number every call 0.
            if current is None or (piece.id and current.id and piece.id != current.id):
                current = by_index[piece.index] = _Call()
                self.calls.append(current)
            current.id = current.id or piece.id or ""
            if piece.function is not None:
                current.name = current.name or piece.function.name or ""
                current.arguments.append(piece.function.arguments or "")

    def as_call(self, tool: str, fixed: dict[str, Any], free: str) -> ModelResponse:
        """The reply's text as the free argument of a call of `tool` (see `free_text_call`)."""
        arguments = {**fixed, free: "".join(self.text).strip() + "\n"}
        call = ToolCallPart(id=f"call_{uuid.uuid4().hex[:24]}", name=tool, arguments=arguments)
        return ModelResponse(parts=[call], usage=self.usage, finish_reason="tool_use", model=self.model)

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
            stop: FinishReason = "tool_use"
        else:
            stop = _FINISH_REASONS.get(self.finish or "", "other")
        return ModelResponse(parts=parts, usage=self.usage, finish_reason=stop, model=self.model)


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
