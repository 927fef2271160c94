"""A real `delegate serve` app on a loopback port, in a thread of the test process, for API and UI tests."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI

from delegate.server import uvicorn_config


class LiveServer:
    """Runs `app` under uvicorn on 127.0.0.1 (a free port) until the `with` block ends."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(app)  # the server's own: its header and idle timeouts too
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="test-uvicorn", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self._sock])
        except BaseException as exc:  # surfaced by __enter__ / __exit__
            self.error = exc

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start within 60 s")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.server.should_exit = True
        self._thread.join(30)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError("the server did not stop within 30 s")
