"""A real `delegate serve` app on a loopback port, in a thread of the test process, for API and UI tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI

from delegate.server import uvicorn_config


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, whose loop wakes as soon as it is told to stop (`stop`), not at its next
    look, every 0.1 s (`main_loop` is uvicorn's own otherwise: `on_tick` every 0.1 s)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._woken: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    async def main_loop(self) -> None:
        stop = asyncio.Event()
        self._woken = (asyncio.get_running_loop(), stop)
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    def stop(self) -> None:
        self.should_exit = True
        if self._woken is not None:
            loop, stop = self._woken
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                loop.call_soon_threadsafe(stop.set)


class LiveServer:
    """Runs `app` under uvicorn on 127.0.0.1 (a free port) until the `with` block ends."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(app)  # the server's own: its header and idle timeouts too
        self.server = _Uvicorn(config)
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
        self.server.stop()
        self._thread.join(30)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError("the server did not stop within 30 s")
