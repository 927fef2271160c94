"""What the server's security tests share: a live server with fake models, clients, raw sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from delegate import RunLimits, RuntimeSettings, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.server import Limits, ServerSettings, create_app
from delegate.testing import FunctionModel, reply
from tests.loopback_server import LiveServer


class Gate:
    """A lead model that answers only once `release()` is called: runs that stay live."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    async def answer(self, request: ModelRequest) -> ModelResponse:
        del request
        while not self.opened.is_set():
            await asyncio.sleep(0.01)
        return reply("done")

    def release(self) -> None:
        self.opened.set()


@contextmanager
def live_server(
    workspace: Path,
    store: Store,
    *,
    limits: Limits | None = None,
    gate: Gate | None = None,
    run_limits: RunLimits | None = None,
    **settings: Any,
) -> Iterator[LiveServer]:
    """`delegate serve`'s app under uvicorn on loopback; runs answer at once (or when `gate` opens).
    `limits` are the server's, `run_limits` the operator's `RunLimits` of every run; `settings` are
    other `RuntimeSettings` fields (a `model` string: runs on that model instead)."""
    if run_limits is not None:
        settings["limits"] = run_limits
    answer = gate.answer if gate is not None else (lambda _: reply("done"))
    factory = None if "model" in settings else (lambda _: FunctionModel(answer))
    runtime = RuntimeSettings(workspace=workspace, **settings)
    app = create_app(
        ServerSettings(runtime=runtime, model=factory, limits=limits or Limits(), run_batches=False), store=store
    )
    try:
        with LiveServer(app) as server:
            yield server
    finally:
        if gate is not None:
            gate.release()


@contextmanager
def api(server: LiveServer, token: str | None) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


def raw_request(server: LiveServer, data: bytes, *, timeout: float = 30) -> tuple[int, dict[str, str], Any]:
    """Send bytes as they are on a fresh connection; return the answer's status, headers and JSON."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """Read one HTTP/1.1 answer (with a Content-Length) from `sock`."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"the server closed the connection; got {received!r}")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, json.loads(body) if body else None


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed the connection (recv gives end of file)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
