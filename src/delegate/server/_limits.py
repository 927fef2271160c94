"""What one client may cost the server: body size, slow clients, prompt length, live runs.

Each limit is a setting of `delegate serve` (`Limits`, flags of the same names) and each answers
the API's JSON error:

- a request body is read only after the token is checked (a request without a good token is
  answered 401 without reading its body), and parsed in a worker thread (see `_body.py`).
- a request body past `max_body_bytes` answers 413 `body_too_large`: a `Content-Length` past the
  cap at once, before the token is checked; a streamed (chunked) body as soon as it passes the
  cap. The server never holds more than the cap of one body.
- headers must arrive within `header_timeout` of the connection opening (or of the previous
  response): a client that trickles them is disconnected. A body may fall silent for at most
  `idle_timeout` (408 `request_timeout`), and an idle keep-alive connection is closed after it.
- a body that is not UTF-8, not JSON, nested too deep, or whose JSON names an unpaired surrogate
  (`"\\ud800"`, which no database can store) answers 400 / 422 (`_body.py`), never a 500.
- `max_prompt_chars` caps a run's prompt and each batch item's prompt (422 `invalid_request`).
- `max_live_runs_per_user` caps the runs one user has going at once (429 `too_many_runs`, with
  `Retry-After`).

```python
app = create_app(ServerSettings(runtime=RuntimeSettings(workspace=ws), limits=Limits(max_body_bytes=1 << 20)))
uvicorn.Server(uvicorn_config(app)).run()      # the header and idle timeouts are uvicorn's side
```
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._auth import ApiError, error_response

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Limits", "uvicorn_config"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """The server's limits; the defaults are those of `delegate serve`."""

    max_body_bytes: int = 8 * 1024 * 1024
    """The largest request body, in bytes (8 MB)."""
    header_timeout: float = 10.0
    """Seconds a client has to send a request's headers."""
    idle_timeout: float = 15.0
    """Seconds a request body may stall, and an idle keep-alive connection stays open."""
    max_prompt_chars: int = 200_000
    """The longest prompt of a run or batch item, in characters."""
    max_live_runs_per_user: int = 8
    """Runs one user may have going at once."""

    def __post_init__(self) -> None:
        from .._errors import UserError

        for name in ("max_body_bytes", "max_prompt_chars", "max_live_runs_per_user"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1")
        for name in ("header_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise UserError(f"{name} must be a positive number of seconds")


class BodyLimit:
    """ASGI middleware: a request body is read only when the app asks for it, and then within
    `max_body_bytes` and `idle_timeout` (a `Content-Length` past the cap is refused at once).

    Nothing is read or parsed before the token is checked: a route reads its body through
    `json_body` (`_body.py`), after authentication. An answer given before the body was read
    whole (a 401, say) closes the connection, so the rest of the body is never taken in.
    """

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)  # no body to read (a GET): nothing to cap
            return
        cap, idle = self.limits.max_body_bytes, self.limits.idle_timeout
        length = _content_length(scope)
        if length == -1:
            await _refuse(scope, receive, send, 400, "bad_request", "the Content-Length header is not a number")
            return
        if length is not None and length > cap:
            await _refuse(scope, receive, send, 413, "body_too_large", _too_large(cap))
            return
        size = 0
        whole = False  # the body's last part has been read

        async def capped() -> Message:
            nonlocal size, whole
            if whole:
                return await receive()  # after the body: the client's disconnect
            try:
                message = await asyncio.wait_for(receive(), idle)
            except TimeoutError:
                message = f"the request body stalled for {idle:g} s: send it at once"
                raise BodyRefused(408, "request_timeout", message) from None
            if message["type"] != "http.request":
                whole = True  # the client left
                return message
            size += len(cast(bytes, message.get("body", b"")))
            if size > cap:
                raise BodyRefused(413, "body_too_large", _too_large(cap))
            whole = not message.get("more_body", False)
            return message

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start" and not whole:
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, capped, answer)


class BodyRefused(ApiError):
    """A body past the cap, or one that stalled, found while the app reads it (a JSON 413 or 408)."""


def _content_length(scope: Scope) -> int | None:
    """The declared length; None if absent, -1 if it is not a number."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else -1
    return None


def _has_body(scope: Scope) -> bool:
    """Whether a request has a body: only `Content-Length` or `Transfer-Encoding` gives it one
    (RFC 9112, 6.3)."""
    return any(name in (b"content-length", b"transfer-encoding") for name, _ in scope["headers"])


def _too_large(cap: int) -> str:
    return (
        f"the request body is larger than the server's limit of {_size(cap)}: send less (put large "
        "inputs in files of the workspace), or ask the operator to raise --max-body-mb"
    )


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):g} MB" if n >= 1024 * 1024 else f"{n} bytes"


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str) -> None:
    response = error_response(status, code, message)
    response.headers["Connection"] = "close"  # the rest of the body is never read
    await response(scope, receive, send)


MAX_HEAD_BYTES = 16 * 1024
"""The most a request line and its headers may take (16 KB, as much as h11 allows)."""


def uvicorn_config(app: FastAPI, **options: Any) -> uvicorn.Config:
    """A uvicorn configuration for `app` that enforces its header and idle timeouts.

    uvicorn has no header timeout of its own (a connection that never finishes its headers is
    kept forever), and its httptools protocol no cap on the headers' size, so the HTTP protocol is
    uvicorn's httptools one (its parser is C, where h11's is Python) with both. uvicorn runs on
    uvloop, installed with delegate, which makes the event loop's own work cheaper too.
    """
    import uvicorn

    from ._state import app_state

    limits = app_state(app).limits
    options.setdefault("log_level", "warning")
    options.setdefault("lifespan", "on")
    return uvicorn.Config(
        app,
        http=type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"header_timeout": limits.header_timeout}),
        ws="none",
        timeout_keep_alive=max(1, round(limits.idle_timeout)),
        **options,
    )


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request headers are not all in
    within `header_timeout` of its opening or of the previous response, and answering 400 to
    headers past `MAX_HEAD_BYTES` (httptools would gather them without end)."""

    header_timeout = 10.0
    _header_deadline: asyncio.TimerHandle | None = None
    _in_head = True
    """While a request's headers are awaited or coming in."""
    _head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _no_delay(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        in_head = self._in_head
        super().data_received(data)
        if in_head and self._in_head:  # all of `data` was headers, and more are coming
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.send_400_response("")

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        self._head_bytes = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError("headers too large")  # the parser stops; uvicorn answers 400 and closes
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if self._head_bytes > MAX_HEAD_BYTES:
            msg = f"Request headers larger than {MAX_HEAD_BYTES // 1024} KB."
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        waiting = not self.pipeline  # no next request already in: its headers must come in time
        super().on_response_complete()
        if waiting and not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        """Wait for the next request's headers: within the deadline, and counted."""
        self._disarm()
        self._in_head, self._head_bytes = True, 0
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def _no_delay(transport: asyncio.Transport) -> None:
    """Send each write at once. asyncio sets TCP_NODELAY only on sockets whose `proto` says TCP, and
    a listening socket made with `socket.create_server` says 0: without it, the second request on a
    kept-alive connection waited ~40 ms for the client's delayed ACK (a response is two writes)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
