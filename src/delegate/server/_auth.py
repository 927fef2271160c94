"""Bearer tokens, and the JSON error every failure of the API answers with.

Every `/api/v1` call names its user with `Authorization: Bearer <token>` (a token printed once by
`delegate users add NAME`; the store keeps only its hash). No token, or one the store does not know,
answers 401; everything else is then scoped to that user, so another user's run or batch is simply
not found (404), never forbidden (403), which would confirm that it exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from .._errors import DelegateError
from .._store import Store
from .._text import safe_json
from ._state import app_state


class SafeJSONResponse(JSONResponse):
    """The API's JSON: valid UTF-8 whatever it holds. A lone surrogate (an error naming a file
    whose name is not UTF-8) is escaped as `_text.py` documents, where `JSONResponse` would fail
    to encode it and answer 500. Nothing is walked unless the first encoding fails."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return super().render(safe_json(content))


_log = logging.getLogger("delegate.server")

REVOKE_POLL = 1.0
"""How often a server checks the tokens of its open event streams (a revoked one ends its streams)."""


class ApiError(DelegateError):
    """An error the API answers with: an HTTP status, a short code, and a message that says what to do.

    `retry_after` (seconds) becomes a `Retry-After` header, for errors that pass with time.
    """

    def __init__(self, status: int, code: str, message: str, *, retry_after: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.extra = extra


def error_response(
    status: int, code: str, message: str, *, retry_after: int | None = None, **extra: Any
) -> JSONResponse:
    """`{"error": {"code": ..., "message": ...}}`, the body of every failed call."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = {"error": {"code": code, "message": message, **extra}}
    return SafeJSONResponse(body, status, headers=headers or None)


async def app_store(request: Request) -> Store:
    """The store of the app serving `request` (set by `create_app`)."""
    return app_state(request.app).store


async def bearer_token(request: Request) -> str:
    """The token of `Authorization: Bearer <token>`, not yet checked; a 401 `ApiError` without one."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if not header:
        raise ApiError(
            401,
            "unauthorized",
            "missing token: send 'Authorization: Bearer <token>' "
            "(ask the server's operator for one: `delegate users add NAME` makes it)",
        )
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "malformed Authorization header: use 'Bearer <token>'")
    return token


def unknown_token() -> ApiError:
    """The 401 for a token the store does not know (or that was revoked)."""
    return ApiError(
        401,
        "unauthorized",
        "unknown token: check it, or ask the server's operator for one (`delegate users add NAME` makes it)",
    )


Token = Annotated[str, Depends(bearer_token)]
"""A route parameter with the caller's token, for a route that checks it in the same store call as
its own read (`Store.run_summaries`); it answers 401 without a token, and the route must answer
`unknown_token()` when the store does not know it."""


async def current_user(request: Request, token: Token) -> str:
    """The caller's user id, from `Authorization: Bearer <token>`; a 401 `ApiError` otherwise."""
    user_id = await asyncio.to_thread(app_state(request.app).store.user_for_token, token)
    if user_id is None:
        raise unknown_token()
    return user_id


UserId = Annotated[str, Depends(current_user)]
"""A route parameter that names the caller (and makes the route answer 401 without a good token)."""


async def token_watch(request: Request) -> TokenWatch:
    """The app's `TokenWatch` (set by `create_app`)."""
    return app_state(request.app).tokens


Tokens = Annotated["TokenWatch", Depends(token_watch)]
"""A route parameter with the app's `TokenWatch`, for a route that holds a stream open."""


class TokenWatch:
    """The tokens that hold event streams open, checked against the store every `interval`
    seconds (one read for all of them, only while a stream is open): when `delegate users revoke`
    or `delegate users token` (in any process on the same database) takes a token away, every
    stream it holds ends within `interval`."""

    def __init__(self, store: Store, interval: float = REVOKE_POLL) -> None:
        self.store = store
        self.interval = interval
        self._open: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def hold(self, token: str) -> Generator[asyncio.Event]:
        """An event set once `token` is no longer good, for as long as the `with` block lasts."""
        taken = asyncio.Event()
        self._open.setdefault(token, set()).add(taken)
        try:
            yield taken
        finally:
            held = self._open.get(token, set())
            held.discard(taken)
            if not held:
                self._open.pop(token, None)

    async def check(self) -> None:
        """Set the event of every open stream whose token the store no longer knows."""
        tokens = list(self._open)
        if not tokens:
            return
        held = await asyncio.to_thread(self.store.held_tokens, tokens)
        for token in tokens:
            if token not in held:
                for taken in self._open.get(token, set()):
                    taken.set()

    async def watch(self) -> None:
        """`check` every `interval` seconds, for as long as the server runs."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception:  # the store away for a moment must not end the watch
                _log.exception("checking the tokens of open streams failed")
