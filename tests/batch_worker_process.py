"""A batch worker in a process of its own, for the crash and scale-out tests.

    python batch_worker_process.py STORE_URL LOG DELAY [CONCURRENCY [FAIL]]

Serves every batch in the store until SIGTERM. Each item sleeps DELAY seconds; the log gets one
line when an item starts and one when it ends, or `stop` when it was cancelled first
(`start|end|stop <pid> <key> <attempt> <monotonic time>`),
appended with O_APPEND so lines from several processes never interleave. The summary names the
process and attempt that produced it, so a test can tell which run's result was stored. Attempts
up to FAIL (default 0) end in error. Attempt n spends 100**(n-1) input tokens and one request, so
an item's total says which attempts it counts, and how often.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

from delegate import Store, TaskOutput, Usage
from delegate.batch import Batches, BatchWorker
from delegate.testing import subagent_record


class LoggingRunner:
    def __init__(self, log: str, delay: float, fail: int) -> None:
        self.fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.delay = delay
        self.fail = fail

    def line(self, what: str, key: str, attempt: str) -> None:
        os.write(self.fd, f"{what} {os.getpid()} {key} {attempt} {time.monotonic():.6f}\n".encode())

    async def run_task(self, *, tool_call_id: str | None, **_: Any) -> TaskOutput:
        assert tool_call_id is not None
        _, _, key, attempt = tool_call_id.split(":")
        self.line("start", key, attempt)
        try:
            await asyncio.sleep(self.delay)
        except BaseException:
            self.line("stop", key, attempt)  # cancelled before its end: not run to completion
            raise
        self.line("end", key, attempt)
        summary = f"{key} by {os.getpid()} attempt {attempt}"
        spent = Usage(input_tokens=100 ** (int(attempt) - 1), requests=1, cost_usd=0.001)
        if int(attempt) <= self.fail:
            return subagent_record(summary, status="error", error="failed", usage=spent, tool_call_id=tool_call_id)
        return subagent_record(summary, usage=spent, tool_call_id=tool_call_id)


async def main() -> None:
    url, log, delay = sys.argv[1:4]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    fail = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    batches = Batches(Store.open(url))
    worker = BatchWorker(
        batches,
        LoggingRunner(log, float(delay), fail),
        retry_delay=0.01,
        max_retry_delay=0.05,
        concurrency=concurrency,
        poll_interval=0.05,
        heartbeat_ttl=3.0,
    )
    await worker.start()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(worker.stop()))
    print("ready", flush=True)
    await worker.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
