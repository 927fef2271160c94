"""Server-sent events: how the server writes them, and the one loop that polls the store for them.

A stream that follows something another process may change (a run of another process, a batch
that `delegate batch worker` processes run) reads it again at each poll, or sooner when this
process knows something changed (`wake`). Both `GET /runs/{id}/events` and
`GET /batches/{id}/events` follow the store through `poll`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Query
from fastapi.responses import StreamingResponse
from pydantic_core import PydanticSerializationError, to_json

from .._text import safe_json

KEEPALIVE_INTERVAL = 15.0
"""How long a stream may stay silent before a comment line keeps proxies from closing it."""
KEEPALIVE = b": keep-alive\n\n"

_T = TypeVar("_T")

MAX_NUMBER = 2**31 - 1
"""The largest offset or event number a query may name (a larger one answers 422, not a crash)."""
Offset = Annotated[int, Query(ge=0, le=MAX_NUMBER, description="How many to skip (newest first).")]
Page = Annotated[int, Query(ge=1, le=500, description="How many to list at the most.")]

Step = Callable[[], Awaitable[tuple[list[_T], bool]]]
"""Reads what is new: `(things to send, done)`."""


async def poll(step: Step[_T], *, interval: float, wake: asyncio.Event | None = None) -> AsyncIterator[_T | None]:
    """Yield what `step` finds, and call it again at once while it finds something, else after
    `interval` (or as soon as `wake` is set), until it says it is done. None marks
    `KEEPALIVE_INTERVAL` of silence (for a keep-alive comment)."""
    spoke = time.monotonic()
    while True:
        if wake is not None:
            wake.clear()
        found, done = await step()
        for item in found:
            yield item
        now = time.monotonic()
        if done:
            return
        if found:
            spoke = now
            continue
        if now - spoke >= KEEPALIVE_INTERVAL:
            spoke = now
            yield None
        if wake is None:
            await asyncio.sleep(interval)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), interval)


def sse(seq: int, type: str, data: Any) -> bytes:
    """One server-sent event: `id:` its number in the stream, `event:` its type, `data:` its JSON
    (valid UTF-8: a string that is not is escaped as `_text.py` documents)."""
    try:
        text = to_json(data, fallback=str).decode()
    except PydanticSerializationError:  # a lone surrogate, which UTF-8 cannot hold
        text = to_json(safe_json(data), fallback=str).decode()
    return f"id: {seq}\nevent: {type}\ndata: {text}\n\n".encode()


_TAKEN = (
    "this token was revoked or replaced (delegate users revoke|token), so its streams are closed: "
    "ask the operator for a new token"
)
REVOKED = b"event: token.revoked\ndata: " + to_json({"error": {"code": "unauthorized", "message": _TAKEN}}) + b"\n\n"
"""The last event of a stream whose token was taken away (no `id:`: it is not one of the run's)."""


async def until(ended: asyncio.Event, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`body`'s chunks until it ends, or until `ended` is set: then at once, however long `body`
    would have waited for its next chunk (it is closed), and `REVOKED` is the last chunk."""
    stop = asyncio.ensure_future(ended.wait())
    step: asyncio.Future[bytes] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(body))
            await asyncio.wait((step, stop), return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                yield REVOKED
                return
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        stop.cancel()
        if step is not None and not step.done():
            step.cancel()  # `body` ends where it waited
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await step
        close = getattr(body, "aclose", None)
        if close is not None:  # its own `finally` runs now, not when it is collected
            await close()


def event_stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    """A `text/event-stream` response that proxies pass through unbuffered."""
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
