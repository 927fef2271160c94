"""A Temporal worker in a process of its own, for the kill tests.

    python temporal_worker_process.py ENGINE_URL STORE_URL LOG DELAY [CONCURRENCY]

Serves the engine's task queue against the store until SIGTERM, its items run by the logging
runner of `batch_worker_process.py` (a line when an item starts and one when it ends, each with
the process id and a monotonic time, so a test can tell how many ran at once and where).
"""

from __future__ import annotations

import asyncio
import signal
import sys

from delegate import Store
from delegate.batch import Batches
from delegate.engine import EngineSettings
from delegate.engine.temporal import TemporalEngine, TemporalWorker
from tests.batch_worker_process import LoggingRunner


async def main() -> None:
    engine_url, store_url, log, delay = sys.argv[1:5]
    concurrency = int(sys.argv[5]) if len(sys.argv) > 5 else 100
    batches = Batches(Store.open(store_url), engine="temporal")
    engine = await TemporalEngine.connect(EngineSettings.parse(engine_url))
    runner = LoggingRunner(log, float(delay), 0)
    async with TemporalWorker(engine, batches, runner, concurrency=concurrency, poll_interval=0.2) as worker:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        await stop.wait()
        await worker.stop()


if __name__ == "__main__":
    asyncio.run(main())
