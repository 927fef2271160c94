"""What both loopback model servers can do wrong, the way broken servers and proxies do.

A `Reply` of either server takes `cut` (the answer stops half-way: a stream before its finish
reason and end marker, a plain body half-sent), `no_finish` (no finish or stop reason) and
`dribble` (seconds between chunks of an answer that never ends). `Html` is the `200 OK` page of a
proxy that answers in place of the API. A `Fault(429, retry_after=...)` is a rate limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

__all__ = ["DRIBBLE_LIMIT", "Html", "dribble", "send_html"]

DRIBBLE_LIMIT = 100_000
"""At most this many chunks are dribbled, so a test that forgets its deadline still ends."""


@dataclass
class Html:
    """A web page where the API's JSON or event stream should be."""

    status: int = 200
    body: str = "<html><head><title>Welcome</title></head><body><h1>It works!</h1></body></html>"


def send_html(handler: BaseHTTPRequestHandler, page: Html) -> None:
    data = page.body.encode()
    handler.send_response(page.status)
    handler.send_header("Content-Type", "text/html; charset=utf-8")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()


def dribble(write: Callable[[int], None], interval: float, stopped: threading.Event) -> None:
    """Call `write(n)` every `interval` seconds until the client hangs up or the server stops."""
    for n in range(DRIBBLE_LIMIT):
        if stopped.wait(interval):
            return
        try:
            write(n)
        except OSError:  # the client gave up: that is what a deadline does
            return
