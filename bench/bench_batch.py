"""Benchmarks of the durable batch engine on SQLite (issue 5's targets). One command:

    python bench/bench_batch.py              # everything, medians of --repeat runs (about 4 minutes)
    python bench/bench_batch.py --quick      # smaller and once each, for a smoke test (20 seconds)

Items are run by a runner that sleeps (2 s, or 20 ms): a scripted model that answers after the same
latency costs the engine the same. Every measurement runs in a fresh process (peak memory is a
per-process figure). It prints:

- makespan: 5,000 items of 2 s with max_running_items 200, against the ideal 50 s (target: the ideal
  is at least 85% of the makespan), and the engine's CPU per item;
- short items: 2,000 items of 20 ms with max_running_items 200: throughput, and how many ran at
  once on average (DBOS's 1 s queue polling, which batches once ran under, kept such a batch at 29);
- memory: peak resident memory growth while 1,000 and while 10,000 items run (it must not grow
  with the number of items).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


# -- in the child process ----------------------------------------------------------------------


class SleepingRunner:
    """Answers each item after `delay` seconds, like a model with that latency; counts the overlap."""

    def __init__(self, delay: float, expected: int) -> None:
        from delegate._usage import Usage

        self.delay = delay
        self.expected = expected
        self.started = self.completed = 0
        self.all_done = asyncio.Event()
        self.running = 0
        self.peak = 0
        self.busy = 0.0  # item-seconds spent running
        self.usage = Usage(input_tokens=100, output_tokens=20, requests=1)

    async def run_task(self, *, tool_call_id: str | None, **_: Any) -> Any:
        from delegate.testing import subagent_record

        self.started += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        started = time.perf_counter()
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.running -= 1
            self.busy += time.perf_counter() - started
        self.completed += 1
        if self.completed == self.expected:
            self.all_done.set()
        return subagent_record("done", usage=self.usage, tool_call_id=tool_call_id)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def run_batch(items: int, delay: float, max_running: int, trace: bool = False) -> dict[str, float]:
    import gc
    import tracemalloc

    from delegate import Store
    from delegate.batch import Batches, BatchWorker

    workspace = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    batches = Batches(Store.for_workspace(workspace))
    submit_started = time.perf_counter()
    batch_id = batches.submit(
        "bench",
        subagent_type="general-purpose",
        items=({"key": f"item-{i}", "prompt": f"Summarise document {i}."} for i in range(items)),
        max_running_items=max_running,
    ).batch.id
    submit_seconds = time.perf_counter() - submit_started
    runner = SleepingRunner(delay, items)
    worker = BatchWorker(batches, runner, concurrency=max(500, max_running))
    await worker.start()
    gc.collect()
    if trace:  # Python's own allocations (not SQLite's page cache); slows the run down
        tracemalloc.start()
    traced_baseline = tracemalloc.get_traced_memory()[0]
    baseline = peak = rss_bytes()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes())
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    cpu_started, started = time.process_time(), time.perf_counter()
    await runner.all_done.wait()  # rather than read the counts over and over (that costs CPU too)
    batch = await worker.wait("bench", batch_id, poll=0.005)
    makespan = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    traced_peak = tracemalloc.get_traced_memory()[1] - traced_baseline
    tracemalloc.stop()
    done.set()
    await sampler
    await worker.stop()
    assert batch.counts["succeeded"] == items, batch.counts
    return {
        "items": items,
        "makespan": makespan,
        "ideal": items * delay / max_running,
        "cpu_ms_per_item": cpu / items * 1000,
        "mean_running": runner.busy / makespan,
        "peak_running": runner.peak,
        "throughput": items / makespan,
        "rss_growth_mb": (peak - baseline) / 2**20,
        "python_peak_mb": traced_peak / 2**20,
        "submit_seconds": submit_seconds,
    }


def child(kind: str, args: list[str]) -> None:
    assert kind == "batch"
    items, delay, max_running = int(args[0]), float(args[1]), int(args[2])
    result = asyncio.run(run_batch(items, delay, max_running, trace=args[3:] == ["trace"]))
    print(json.dumps(result))


# -- in the parent -----------------------------------------------------------------------------


def measure(kind: str, *args: object, repeat: int) -> dict[str, float]:
    """Run one measurement `repeat` times, each in a fresh process; the median of every figure."""
    results: list[dict[str, float]] = []
    for _ in range(repeat):
        command = [sys.executable, __file__, "--child", kind, *map(str, args)]
        env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
        out = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches, once each")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median shown)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child[0], options.child[1:])
        return
    repeat = 1 if options.quick else options.repeat
    big = 400 if options.quick else 5_000
    big_repeat = 1 if options.quick else max(1, repeat // 2)
    print(f"batch engine on SQLite, median of {repeat} run(s) each (the 2 s batch: {big_repeat})\n")

    slow = measure("batch", big, 2.0, 200, repeat=big_repeat)
    efficiency = slow["ideal"] / slow["makespan"]
    print(f"{big} items x 2 s, max_running_items 200")
    print(f"  makespan          {slow['makespan']:7.2f} s   ideal {slow['ideal']:.0f} s")
    print(f"  ideal / makespan  {efficiency:7.1%}     target >= 85%  {'ok' if efficiency >= 0.85 else 'MISSED'}")
    print(f"  running at once   {slow['mean_running']:7.1f}     mean (peak {slow['peak_running']:.0f})")
    print(f"  engine CPU/item   {slow['cpu_ms_per_item']:7.3f} ms")
    print(f"  submit            {slow['submit_seconds']:7.2f} s   storing the {big} items\n")

    short_items = 500 if options.quick else 2_000
    short = measure("batch", short_items, 0.02, 200, repeat=repeat)
    print(f"{short_items} items x 20 ms, max_running_items 200")
    print(f"  throughput        {short['throughput']:7.0f} items/s   ideal {200 / 0.02:.0f}")
    mean, peak = short["mean_running"], short["peak_running"]
    print(f"  running at once   {mean:7.1f}     mean (peak {peak:.0f}); DBOS's queue polling once kept it at 29")
    print(f"  engine CPU/item   {short['cpu_ms_per_item']:7.3f} ms\n")

    small_n, large_n = (200, 2_000) if options.quick else (1_000, 10_000)
    small = measure("batch", small_n, 0.02, 200, "trace", repeat=repeat)
    large = measure("batch", large_n, 0.02, 200, "trace", repeat=repeat)
    times = large_n // small_n
    print("peak memory while a batch runs (20 ms items, max_running_items 200), above the idle worker")
    print("                  Python heap   resident (includes SQLite's page cache, at most 2 MB a connection)")
    for n, m in ((small_n, small), (large_n, large)):
        print(f"  {n:>6} items    {m['python_peak_mb']:7.2f} MB   {m['rss_growth_mb']:7.1f} MB")
    heap, rss = (large[k] / max(small[k], 0.01) for k in ("python_peak_mb", "rss_growth_mb"))
    print(f"  ratio           {heap:7.2f}      {rss:7.2f}      for {times}x the items")


if __name__ == "__main__":
    main()
