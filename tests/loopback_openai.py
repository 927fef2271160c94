"""A real HTTP server on 127.0.0.1 that speaks OpenAI Chat Completions, for adapter and batch tests.

```python
with OpenAIServer(scripted([Reply(content="hi"), Fault(429, retry_after=0.01)])) as server:
    model = OpenAIModel("gpt-test", base_url=server.base_url, api_key="test")
    ...
    assert server.requests[0]["messages"][0]["role"] == "system"
```

A responder turns each parsed request body into a `Reply` (text and tool calls, with usage), a
`Fault` (an HTTP error) or an `Html` page (a broken proxy); a `Reply` can also misbehave (`cut`,
`no_finish`, `done=False`, `dribble`: see `loopback_misbehaviour.py`). The server answers
non-streaming or streaming (server-sent events) as the request's `stream` flag asks, splitting text
and tool-call arguments across several chunks the way real servers do. It counts concurrent
requests, so batch tests can check their caps.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .loopback_misbehaviour import Html, dribble, send_html

__all__ = ["Fault", "Html", "OpenAIServer", "Reply", "Responder", "Scripted", "ServerUsage", "scripted"]


@dataclass(kw_only=True)
class Reply:
    """One assistant turn. A tool call's arguments given as a `str` are sent verbatim (may be bad JSON)."""

    content: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list[tuple[str, dict[str, Any] | str]])
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int = 0
    finish_reason: str | None = None  # None: "tool_calls" when there are tool calls, else "stop"
    cut: bool = False
    """Stop half-way: a stream after its first delta (no finish reason, no `[DONE]`), a plain
    body after half its bytes."""
    no_finish: bool = False
    """Send `finish_reason: null` where the finish reason belongs."""
    done: bool = True
    """Streaming: end with `data: [DONE]` (False: the body ends after the last chunk without it)."""
    dribble: float | None = None
    """Seconds between chunks of an answer that never ends (a plain body: between its bytes)."""


@dataclass
class Fault:
    """An HTTP error answer, with an optional Retry-After header (seconds)."""

    status: int
    message: str = "simulated failure"
    retry_after: float | None = None
    error: dict[str, Any] | None = None
    """The whole error object to send, as a server of its own would (llama.cpp's has `n_ctx`)."""


Answer = Reply | Fault | Html
Responder = Callable[[dict[str, Any]], Answer]


@dataclass
class ServerUsage:
    """Token sums the server reported to its clients (streams without include_usage report none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


class Scripted:
    """A responder that plays `steps` in order; a step is a Reply, a Fault, or a function of the body.

    When the script is exhausted it raises, which the server reports loudly (see `OpenAIServer`).
    """

    def __init__(self, steps: Iterable[Answer | Responder]) -> None:
        self._steps = list(steps)
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            index = self._next
            self._next += 1
        if index >= len(self._steps):
            raise AssertionError(
                f"scripted responder exhausted: request {index + 1} but only {len(self._steps)} replies"
            )
        step = self._steps[index]
        return step if isinstance(step, Reply | Fault | Html) else step(body)

    @property
    def used(self) -> int:
        return min(self._next, len(self._steps))

    def assert_complete(self) -> None:
        left = len(self._steps) - self._next
        if left > 0:
            raise AssertionError(f"scripted responder has {left} unused replies of {len(self._steps)}")


def scripted(steps: Iterable[Answer | Responder]) -> Scripted:
    """A responder from a list of replies, played in order; it fails loudly when exhausted."""
    return Scripted(steps)


class OpenAIServer:
    """Serve `POST /v1/chat/completions` on a free port of 127.0.0.1 while the `with` block runs.

    If the responder raises, the request answers 400 with the error's text (so the client stops at
    once instead of retrying), and leaving the `with` block raises an `AssertionError` about it.
    """

    def __init__(self, responder: Responder, *, model: str = "loopback-model") -> None:
        self.responder = responder
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # lower-cased names, one dict per request
        self.errors: list[BaseException] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.total_usage = ServerUsage()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.stopped = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running: use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> OpenAIServer:
        handler = type("Handler", (_Handler,), {"owner": self})
        httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd = httpd
        # Its loop looks for the stop every 10 ms: `__exit__` waits that long (it was 50 ms, a
        # server a test, hundreds of servers a suite run).
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self.stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
        if exc is None and self.errors:
            raise AssertionError(f"the loopback responder failed: {self.errors[0]}") from self.errors[0]

    # -- used by the handler threads --

    def _enter(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _count(self, reply: Reply) -> None:
        with self._lock:
            self.total_usage.prompt_tokens += reply.prompt_tokens
            self.total_usage.completion_tokens += reply.completion_tokens
            self.total_usage.cached_tokens += reply.cached_tokens

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # batch tests open hundreds of connections at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up (a timeout test) is not the server's failure
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: OpenAIServer
    protocol_version = "HTTP/1.1"  # keep-alive, so the client's connection pool is exercised
    disable_nagle_algorithm = True  # headers and body go in separate writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body: dict[str, Any] = json.loads(raw)
        except ValueError:
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
            return
        owner = self.owner
        owner._enter(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            try:
                answer = owner.responder(body)
            except Exception as exc:
                owner.errors.append(exc)
                answer = Fault(400, f"loopback responder failed: {exc}")
            if isinstance(answer, Fault):
                self._send_fault(answer)
            elif isinstance(answer, Html):
                send_html(self, answer)
            elif body.get("stream"):
                self._send_stream(body, answer)
            else:
                self._send_completion(body, answer)
        finally:
            owner._leave()

    # -- answers --

    def _send_fault(self, fault: Fault) -> None:
        kind = "rate_limit_exceeded" if fault.status == 429 else "server_error" if fault.status >= 500 else "error"
        headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
        payload = {"error": fault.error or {"message": fault.message, "type": kind, "code": kind, "param": None}}
        self._send_json(fault.status, payload, headers)

    def _send_completion(self, body: dict[str, Any], reply: Reply) -> None:
        number = self.owner._next_id()
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{number}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": _text(args)},
                }
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        self.owner._count(reply)
        payload = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.owner.model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply), "logprobs": None}],
            "usage": _usage(reply),
        }
        if not (reply.cut or reply.dribble):
            self._send_json(200, payload)
            return
        data = json.dumps(payload).encode()
        sent = data[: len(data) // 2] if reply.cut else data
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(sent)))
        self.end_headers()
        if reply.dribble is None:
            self.wfile.write(sent)
            self.wfile.flush()
            return

        def one_byte(n: int) -> None:
            if n < len(sent):
                self.wfile.write(sent[n : n + 1])
                self.wfile.flush()

        dribble(one_byte, reply.dribble, self.owner.stopped)

    def _send_stream(self, body: dict[str, Any], reply: Reply) -> None:
        number = self.owner._next_id()
        base = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.owner.model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                **base,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            }

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in _pieces(reply.content, 3)]
        for index, (name, args) in enumerate(reply.tool_calls):
            head = {"index": index, "id": f"call_{number}_{index}", "type": "function"}
            events.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(_text(args), 3)
            ]
        if reply.cut or reply.dribble is not None:
            events = events[:2]  # the role, and the first piece of the answer
        else:
            events.append(chunk({}, _finish(reply)))
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append({**base, "choices": [], "usage": _usage(reply)})
                self.owner._count(reply)

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self._write_chunk(f"data: {json.dumps(event)}\n\n".encode())
        if reply.dribble is not None:
            more = f"data: {json.dumps(chunk({'content': '.'}))}\n\n".encode()
            dribble(lambda n: self._write_chunk(more), reply.dribble, self.owner.stopped)
            return
        if reply.done and not reply.cut:
            self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def _text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _finish(reply: Reply) -> str | None:
    if reply.no_finish:
        return None
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _pieces(text: str, count: int) -> Iterator[str]:
    """`text` cut into up to `count` non-empty pieces (a stream sends a long text in several deltas)."""
    if not text:
        return
    size = max(1, -(-len(text) // count))
    for start in range(0, len(text), size):
        yield text[start : start + size]
