"""A real HTTP server on 127.0.0.1 that speaks the Anthropic Messages API, for adapter tests.

```python
with AnthropicServer(scripted([Fault(529, "Overloaded"), Reply("hi")])) as server:
    model = AnthropicModel("claude-test", base_url=server.base_url, api_key="k")
    ...
    assert server.requests[-1]["messages"][0]["role"] == "user"
```

A responder gets the parsed JSON body of each `POST /v1/messages` and says what to answer: a
`Reply` (sent as one JSON message, or as server-sent events when the request asked to `stream`,
the way the real API does it, with text and tool input split over several deltas) or a `Fault`
(an error in Anthropic's error shape, with an optional `Retry-After`) or an `Html` page (a broken
proxy); a `Reply` can also misbehave (`cut`, `no_finish`, `dribble`: see
`loopback_misbehaviour.py`). The server records every
request, how many were in flight at once, and the usage it reported, so tests can compare.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from .loopback_misbehaviour import Html, dribble, send_html

__all__ = ["AnthropicServer", "Fault", "Html", "Reply", "Responder", "Script", "scripted"]


@dataclass(kw_only=False)
class Reply:
    """One assistant message. `tool_uses` are (name, input): a dict, or raw JSON text sent verbatim
    when streaming (so a test can send input that does not parse)."""

    content: str = ""
    tool_uses: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list[tuple[str, dict[str, Any] | str]])
    thinking: str | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    signature: str | None = None
    """The thinking block's signature; by default one derived from the thinking text."""
    stop_reason: str | None = None
    """By default `tool_use` when there are tool uses, else `end_turn`."""
    delay: float = 0.0
    """Seconds to wait before answering (to hold requests in flight)."""
    cut: bool = False
    """Stop half-way: a stream after its first delta (no `message_delta`, no `message_stop`), a
    plain body after half its bytes."""
    no_finish: bool = False
    """Send `stop_reason: null` where the stop reason belongs."""
    done: bool = True
    """Streaming: end with `message_stop` (False: the stream ends after `message_delta`)."""
    dribble: float | None = None
    """Seconds between deltas of an answer that never ends (a plain body: between its bytes)."""


@dataclass
class Fault:
    """An error answer: `status` with Anthropic's error JSON. `in_stream` sends it as an `error`
    event after the stream has begun (status 200), the way the real API reports overload mid-stream."""

    status: int
    message: str
    retry_after: float | None = None
    error_type: str | None = None
    in_stream: bool = False


Answer = Reply | Fault | Html
Responder = Callable[[dict[str, Any]], Answer]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class Script:
    """A responder that gives its answers in order; a callable answer is called with the body.

    When the answers run out it answers 400, so an unexpected extra request fails a test at once.
    """

    def __init__(self, answers: Iterable[Answer | Responder]) -> None:
        self._answers = list(answers)
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            if self._next >= len(self._answers):
                return Fault(400, f"loopback script exhausted after {len(self._answers)} answers")
            answer = self._answers[self._next]
            self._next += 1
        return answer if isinstance(answer, Reply | Fault | Html) else answer(body)

    @property
    def left(self) -> int:
        return len(self._answers) - self._next


def scripted(answers: Iterable[Answer | Responder]) -> Script:
    """A responder that replays `answers`, one per request."""
    return Script(answers)


class AnthropicServer:
    """The loopback server. Use as a context manager; `base_url` is what the SDK is given."""

    def __init__(self, responder: Responder, *, api_key: str | None = None) -> None:
        self.responder = responder
        self.api_key = api_key
        """When set, requests without this key (`x-api-key` or `Authorization: Bearer`) get a 401."""
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.total_usage: dict[str, int] = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            args=(0.01,),
            name="loopback-anthropic",
            daemon=True,  # see OpenAIServer
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> AnthropicServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=30)

    def next_id(self) -> int:
        return next(self._ids)

    def _begin(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _end(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _count(self, reply: Reply) -> None:
        with self._lock:
            for name in self.total_usage:
                self.total_usage[name] += getattr(reply, name)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], handler: type[_Handler], owner: AnthropicServer) -> None:
        super().__init__(address, handler)
        self.owner = owner


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small writes go out at once, with no delayed-ACK stall
    timeout = 30  # an idle keep-alive connection is closed after this many seconds
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # the test output stays quiet
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path.split("?")[0].rstrip("/") != "/v1/messages":
            self._send_fault(Fault(404, f"no route {self.path}"), request_id="req_404")
            return
        try:
            body: dict[str, Any] = json.loads(raw or b"{}")
        except ValueError:
            self._send_fault(Fault(400, "the body is not JSON"), request_id="req_400")
            return
        owner._begin(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            self._answer(owner, body)
        finally:
            owner._end()

    def _answer(self, owner: AnthropicServer, body: dict[str, Any]) -> None:
        n = owner.next_id()
        request_id = f"req_{n:04d}"
        if owner.api_key is not None and owner.api_key not in _keys_sent(self.headers):
            self._send_fault(Fault(401, "invalid x-api-key"), request_id=request_id)
            return
        try:
            answer = owner.responder(body)
        except Exception as exc:  # a broken responder shows up as a server error in the test
            answer = Fault(500, f"responder failed: {type(exc).__name__}: {exc}", error_type="api_error")
        if isinstance(answer, Reply) and answer.delay:
            time.sleep(answer.delay)
        streaming = bool(body.get("stream"))
        if isinstance(answer, Html):
            send_html(self, answer)
            return
        if isinstance(answer, Fault):
            if answer.in_stream and streaming:
                self._stream_fault(answer, body, n, request_id)
            else:
                self._send_fault(answer, request_id=request_id)
            return
        if streaming:
            self._stream_reply(answer, body, n, request_id)
        elif answer.cut or answer.dribble is not None:
            self._send_broken(answer, _message(answer, body, n), request_id)
        else:
            self._send_json(200, _message(answer, body, n), {"request-id": request_id})
        owner._count(answer)

    # plain JSON answers

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_broken(self, reply: Reply, payload: dict[str, Any], request_id: str) -> None:
        """Half the body (`cut`), or the whole body a byte at a time (`dribble`)."""
        data = json.dumps(payload).encode()
        sent = data[: len(data) // 2] if reply.cut else data
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(sent)))
        self.send_header("request-id", request_id)
        self.end_headers()
        if reply.dribble is None:
            self.wfile.write(sent)
            self.wfile.flush()
            return

        def one_byte(n: int) -> None:
            if n < len(sent):
                self.wfile.write(sent[n : n + 1])
                self.wfile.flush()

        dribble(one_byte, reply.dribble, self.server.owner.stopped)

    def _send_fault(self, fault: Fault, *, request_id: str) -> None:
        headers = {"request-id": request_id}
        if fault.retry_after is not None:
            headers["retry-after"] = f"{fault.retry_after:g}"
        self._send_json(fault.status, _error_body(fault, request_id), headers)

    # server-sent events

    def _start_stream(self, request_id: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", request_id)
        self.end_headers()

    def _event(self, payload: dict[str, Any]) -> None:
        data = f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream_reply(self, reply: Reply, body: dict[str, Any], n: int, request_id: str) -> None:
        self._start_stream(request_id)
        for event in _events(reply, body, n):
            if event["type"] == "message_stop" and not reply.done:
                break
            self._event(event)
            if (reply.cut or reply.dribble is not None) and event["type"] == "content_block_delta":
                break
        if reply.dribble is not None:
            more = _delta(0, {"type": "text_delta", "text": "."})
            dribble(lambda count: self._event(more), reply.dribble, self.server.owner.stopped)
            return
        self._end_stream()

    def _stream_fault(self, fault: Fault, body: dict[str, Any], n: int, request_id: str) -> None:
        self._start_stream(request_id)
        start = _message(Reply(), body, n) | {"stop_reason": None}
        self._event({"type": "message_start", "message": start})
        self._event(_error_body(fault, request_id))
        self._end_stream()


def _keys_sent(headers: Any) -> set[str]:
    bearer = str(headers.get("authorization") or "")
    return {str(headers.get("x-api-key") or ""), bearer.removeprefix("Bearer ")}


def _error_body(fault: Fault, request_id: str) -> dict[str, Any]:
    error_type = fault.error_type or _ERROR_TYPES.get(fault.status, "api_error")
    return {
        "type": "error",
        "error": {"type": error_type, "message": fault.message},
        "request_id": request_id,
    }


def _stop_reason(reply: Reply) -> str | None:
    if reply.no_finish:
        return None
    return reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn")


def _signature(reply: Reply) -> str:
    if reply.signature is not None:
        return reply.signature
    return "sig_" + hashlib.sha256((reply.thinking or "").encode()).hexdigest()[:24]


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "cache_read_input_tokens": reply.cache_read_input_tokens,
        "cache_creation_input_tokens": reply.cache_creation_input_tokens,
    }


def _tool_id(n: int, index: int) -> str:
    return f"toolu_{n:04d}_{index}"


def _message(reply: Reply, body: dict[str, Any], n: int) -> dict[str, Any]:
    """The non-streaming answer: a whole message."""
    content: list[dict[str, Any]] = []
    if reply.thinking is not None:
        content.append({"type": "thinking", "thinking": reply.thinking, "signature": _signature(reply)})
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for index, (name, arguments) in enumerate(reply.tool_uses):
        data = json.loads(arguments) if isinstance(arguments, str) else arguments
        content.append({"type": "tool_use", "id": _tool_id(n, index), "name": name, "input": data})
    return {
        "id": f"msg_{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-test"),
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": _usage(reply),
    }


def _events(reply: Reply, body: dict[str, Any], n: int) -> Iterator[dict[str, Any]]:
    """The streaming answer, event by event, as the real API orders them."""
    start = _message(Reply(), body, n) | {"stop_reason": None, "usage": _usage(reply) | {"output_tokens": 1}}
    yield {"type": "message_start", "message": start}
    yield {"type": "ping"}
    index = 0
    if reply.thinking is not None:
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        }
        for piece in _pieces(reply.thinking, 3):
            yield _delta(index, {"type": "thinking_delta", "thinking": piece})
        yield _delta(index, {"type": "signature_delta", "signature": _signature(reply)})
        yield {"type": "content_block_stop", "index": index}
        index += 1
    if reply.content:
        yield {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        for piece in _pieces(reply.content, 3):
            yield _delta(index, {"type": "text_delta", "text": piece})
        yield {"type": "content_block_stop", "index": index}
        index += 1
    for number, (name, arguments) in enumerate(reply.tool_uses):
        block = {"type": "tool_use", "id": _tool_id(n, number), "name": name, "input": {}}
        yield {"type": "content_block_start", "index": index, "content_block": block}
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        yield _delta(index, {"type": "input_json_delta", "partial_json": ""})
        for piece in _chunks(text, 5):
            yield _delta(index, {"type": "input_json_delta", "partial_json": piece})
        yield {"type": "content_block_stop", "index": index}
        index += 1
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
        "usage": _usage(reply),
    }
    yield {"type": "message_stop"}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _pieces(text: str, count: int) -> list[str]:
    """`text` in about `count` pieces (at least one)."""
    size = max(1, -(-len(text) // count))
    return _chunks(text, size) or [""]


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
