"""How every provider call is tried: one retry policy, one deadline, one idea of a bad answer.

A call is a loop of attempts. Each attempt's failure is classified by the provider (`Failure`):
retryable (429, 408, 409, 5xx and 529, timeouts, dropped connections, overload reported inside a
stream, and a `BadAnswer`) or not (bad credentials, a bad request). A retryable failure waits
`RetryPolicy.delay` (exponential backoff with jitter, or exactly what `Retry-After` asks) and tries
again, up to `RetryPolicy.attempts` tries in all. The whole call, every attempt, every read of a
stream and every wait between, runs under one deadline: a server that dribbles a chunk every few
seconds, or asks to be retried after an hour, ends the call with a `ModelError` when the deadline
is reached, not never. The SDKs' own retries are switched off, so this module is the only one.

A `BadAnswer` is a reply that is not a whole answer in the provider's protocol: a stream that ends
before its end marker (`[DONE]` for Chat Completions, `message_stop` for Messages), an answer with
no finish reason, a body that is not the protocol's JSON (the `200 OK` HTML page of a broken
proxy). It is retried like an overload, and when the attempts run out it is a `ModelOutputError`
(a `ModelError`): cut text never becomes an answer.

This module imports no SDK: providers import it, and `import delegate` must stay light.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .._errors import ContextOverflowError, ModelError, ModelOutputError, UserError
from ._window import overflow_limit

__all__ = [
    "DEFAULT_DEADLINE",
    "BadAnswer",
    "Failure",
    "RetryPolicy",
    "call_with_retries",
    "check_deadline",
    "excerpt",
    "redact_urls",
    "retry_after",
    "status_failure",
    "transport_failure",
]

DEFAULT_DEADLINE = 900.0
"""Seconds one model call may take in all (attempts, stream reads and waits), unless set."""

_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often and how long a failed model call is tried again.

    `attempts` counts every try, the first included (1: never retry). Between tries the call
    waits `base_delay * 2**(n-1)` seconds for the n-th failure, at most `max_delay`, times a
    random factor between 0.5 and 1 (so many clients that failed together do not come back
    together); a `Retry-After` (or `retry-after-ms`) header replaces that wait by what it says.
    """

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise UserError(f"RetryPolicy(attempts={self.attempts}): give at least 1 (1 means no retry)")
        if not (0 <= self.base_delay <= self.max_delay) or not math.isfinite(self.max_delay):
            raise UserError(
                f"RetryPolicy(base_delay={self.base_delay}, max_delay={self.max_delay}): "
                "give finite delays with 0 <= base_delay <= max_delay"
            )

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the `failures`-th failed try."""
        if retry_after is not None:
            return max(0.0, retry_after)
        backoff = min(self.max_delay, self.base_delay * 2 ** (failures - 1))
        return backoff * random.uniform(0.5, 1.0)


class BadAnswer(Exception):
    """The server answered, but not with a whole answer of its protocol (see the module doc)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """What one failed try means: its description, whether to try again, and how long to wait."""

    message: str
    retryable: bool
    retry_after: float | None = None
    overflow: bool = False
    """The request was longer than the model's context window (never retried as it is)."""
    limit: int | None = None
    """That window, when the server said it."""


def excerpt(body: object) -> str:
    """The start of a body that is not what it should be, quoted on one line, for an error message."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    text = " ".join(text.split())
    return repr(text[:120] + ("..." if len(text) > 120 else ""))


_URL = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?:[^\s/?#@]*@)?(?P<place>[^\s?#]*)(?:[?#]\S*)?")


def redact_urls(text: str, *known: str | None) -> str:
    """`text` with every URL in it shown without credentials (`user:pass@`), query string or
    fragment (`?api-key=...`), and without the credentials and query of each `known` URL (the
    provider's, from `OPENAI_BASE_URL` say) wherever it quotes them: a server may echo the path
    it was asked for. How a provider URL may appear in an error, an event, an export or a log."""
    text = _URL.sub(lambda found: found["head"] + found["place"], text)
    for url in known:
        for secret in _secrets(url):
            text = text.replace(secret, "[redacted]")
    return text


def _secrets(url: str | None) -> list[str]:
    """The parts of a URL that are not for anyone's eyes: user, password, query and fragment,
    and each query value, as written and decoded; the longest first."""
    if not url:
        return []
    parts = urllib.parse.urlsplit(url)
    found = [parts.query, parts.fragment, parts.username or "", parts.password or ""]
    found += [value for _, value in urllib.parse.parse_qsl(parts.query)]
    found += [urllib.parse.unquote(part) for part in found]
    return sorted({part for part in found if len(part) >= 3}, key=len, reverse=True)


def check_deadline(deadline: float) -> float:
    """`deadline`, if it is a positive number of seconds; else a `UserError` saying what to give."""
    if not (deadline > 0 and math.isfinite(deadline)):
        raise UserError(f"deadline={deadline!r}: give the most seconds one model call may take, a number above 0")
    return deadline


async def call_with_retries(
    name: str,
    attempt: Callable[[], Awaitable[_T]],
    classify: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    deadline: float,
    url: str | None = None,
) -> _T:
    """`attempt()` until it answers, under `policy` and within `deadline` seconds in all.

    `classify` says what an exception means; `None` lets it through unchanged (a bug is not the
    server's failure). A `BadAnswer` is always retryable. Raises `ModelError`, saying what failed,
    after how many attempts, or that the deadline was reached; its message never shows the
    credentials or query of `url`, the provider's (see `redact_urls`).
    """
    loop = asyncio.get_running_loop()
    ends = loop.time() + deadline
    tries = 0
    while True:
        tries += 1
        scope = asyncio.timeout_at(ends)
        try:
            async with scope:
                return await attempt()
        except Exception as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                raise ModelError(
                    f"{name}: no whole answer within the {deadline:g} s deadline ({_tries(tries)}); "
                    "the server is too slow or keeps the stream open: raise the model's deadline= "
                    "if its answers really take longer"
                ) from exc
            failure = Failure(str(exc), retryable=True) if isinstance(exc, BadAnswer) else classify(exc)
            if failure is None:
                raise
            said = redact_urls(failure.message, url)  # the server's own words may quote its URL
            if failure.overflow:
                raise ContextOverflowError(f"{name}: {said}", limit=failure.limit) from exc
            if not failure.retryable:
                raise ModelError(f"{name}: {said}") from exc
            error = ModelOutputError if isinstance(exc, BadAnswer) else ModelError
            if tries >= policy.attempts:
                raise error(f"{name} failed after {_tries(tries)}: {said}") from exc
            wait = policy.delay(tries, failure.retry_after)
            if loop.time() + wait >= ends:
                raise error(
                    f"{name} failed after {_tries(tries)}: {said}; the next try, {wait:.3g} s "
                    f"from now, would pass the {deadline:g} s deadline"
                ) from exc
        await asyncio.sleep(wait)


def _tries(count: int) -> str:
    return "1 attempt" if count == 1 else f"{count} attempts"


_RETRYABLE_STATUS = frozenset({408, 409, 429})


def status_failure(
    where: str, status: int, detail: str, headers: Mapping[str, str], key_hint: str, body: object = None
) -> Failure:
    """What an HTTP error status means: credentials refused, worth another try, or a bad request.

    An `x-should-retry` header (both APIs send it) overrides the status's verdict. A refusal of a
    request longer than the context window (`body` is the error object) says so, with the window.
    """
    if status in (401, 403):
        return Failure(f"{where} refused the credentials (HTTP {status}): {detail}. {key_hint}", retryable=False)
    verdict = headers.get("x-should-retry")
    retryable = status in _RETRYABLE_STATUS or status >= 500
    if verdict in ("true", "false"):
        retryable = verdict == "true"
    if retryable:
        return Failure(f"{where} answered HTTP {status}: {detail}", retryable=True, retry_after=retry_after(headers))
    overflow, limit = overflow_limit(status, detail, body)
    return Failure(f"{where} rejected the request (HTTP {status}): {detail}", False, overflow=overflow, limit=limit)


def transport_failure(
    where: str, exc: Exception, *, timeout: type[Exception], connection: type[Exception]
) -> Failure | None:
    """A timeout or a failed connection, whether the SDK wrapped it (its `timeout` and
    `connection` error classes) or the bare `httpx2` error came through; else `None`."""
    import httpx2

    cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
    if isinstance(exc, timeout | httpx2.TimeoutException) or isinstance(cause, httpx2.TimeoutException):
        return Failure(f"the request to {where} timed out", retryable=True)
    if isinstance(exc, connection | httpx2.RequestError | OSError):
        return Failure(f"connection to {where} failed: {type(cause).__name__}: {cause}", retryable=True)
    return None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date), if given."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            import email.utils  # on first use: a process that never meets an HTTP date does without it

            moment = email.utils.parsedate_tz(value)
            if moment is None:
                continue
            seconds = email.utils.mktime_tz(moment) - time.time()
        if math.isfinite(seconds):
            return max(0.0, seconds)
    return None
