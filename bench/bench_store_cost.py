"""What the SQLite store costs a subagent of a fan-out, this code against another checkout's, in turn.

    python bench/bench_store_cost.py /path/to/other/src             # 3 rounds each, in turn
    python bench/bench_store_cost.py /path/to/other/src --rounds 5 --runs 7

The fan-out of `bench_subagents.py` (N = 1,000, a model that answers at once), store on and
storeless in turn in one process, `--runs` times each (a fresh process a checkout and round, as
`bench_fanout_ab.py` does), each run in a workspace of its own whose store exists (as
`bench_runs.py` runs it: what a run opens, creates and compiles in a new database counts). Figures
that the neighbours' load cannot add to:

- CPU µs a subagent of the whole process (the recorder's writer thread included), the least of
  the runs, store on and storeless, and their ratio (the issue's target: 1.3x);
- the writer thread's own CPU µs a subagent (its `Recorder._write`, thread time), the least;
- calls a subagent on the event loop's thread (cProfile; they do not move with the load);
- the garbage collector's young (generation 0) and generation 1 collections of a run.

The other checkout must take `RunLimits` (this file's `bench_subagents.one_run` builds the runtime).
Printed: the median over rounds of each figure for both checkouts (N = 1,000).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from _fanout import ab

N = 1000


def child(runs: int) -> None:
    """One process's figures, as a JSON line (runs with PYTHONPATH set to one checkout's src)."""
    import asyncio
    import cProfile
    import gc
    import pstats
    import tempfile
    import time

    from bench_runs import make_store
    from bench_subagents import one_run

    from delegate.run import _recorder  # pyright: ignore[reportPrivateUsage]

    writer = [0.0]
    collections = [0, 0, 0]
    write = _recorder.Recorder._write  # pyright: ignore[reportPrivateUsage]

    def timed(self: Any, *args: Any) -> None:
        start = time.thread_time()
        try:
            write(self, *args)
        finally:
            writer[0] += time.thread_time() - start

    _recorder.Recorder._write = timed  # pyright: ignore[reportPrivateUsage]

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collections[info["generation"]] += 1

    gc.callbacks.append(counted)

    def one(root: Path, store: bool) -> tuple[float, float, int, int]:
        root = Path(tempfile.mkdtemp(dir=root))  # a workspace of its own, its store made before the clock starts
        if store:
            make_store(root)  # every table a run makes, as `bench_runs.py` times it
        gc.collect()
        writer[0], collections[:] = 0.0, [0, 0, 0]
        cpu = time.process_time()
        asyncio.run(one_run(root, N, 0.0, store))
        return (time.process_time() - cpu) / N * 1e6, writer[0] / N * 1e6, collections[0], collections[1]

    def calls(root: Path, store: bool) -> float:
        profile = cProfile.Profile()
        profile.enable()
        asyncio.run(one_run(root, N, 0.0, store))
        profile.disable()
        return pstats.Stats(profile).total_calls / N  # pyright: ignore[reportAttributeAccessIssue]

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        on: list[tuple[float, float, int, int]] = []
        off: list[tuple[float, float, int, int]] = []
        for _ in range(runs + 1):  # in turn; the first of each is a warm-up
            on.append(one(root, True))
            off.append(one(root, False))
        on, off = on[1:], off[1:]
        figures = {
            "on_cpu": min(r[0] for r in on),
            "off_cpu": min(r[0] for r in off),
            "writer": min(r[1] for r in on),
            "calls_on": calls(root, True),
            "calls_off": calls(root, False),
            "young_on": statistics.median(r[2] for r in on),
            "young_off": statistics.median(r[2] for r in off),
            "gen1_on": statistics.median(r[3] for r in on),
            "gen1_off": statistics.median(r[3] for r in off),
        }
    figures["ratio"] = figures["on_cpu"] / figures["off_cpu"]
    print(json.dumps(figures))


ROWS = [
    ("CPU a subagent, store on (least of the runs)", "on_cpu", "µs"),
    ("CPU a subagent, storeless (least of the runs)", "off_cpu", "µs"),
    ("store on / storeless", "ratio", "x"),
    ("the writer thread's CPU a subagent (least)", "writer", "µs"),
    ("calls a subagent on the loop's thread, store on", "calls_on", ""),
    ("calls a subagent on the loop's thread, storeless", "calls_off", ""),
    ("young collections a run, store on", "young_on", ""),
    ("young collections a run, storeless", "young_off", ""),
    ("generation 1 collections a run, store on", "gen1_on", ""),
]


def main() -> None:
    runs = ("--runs", 7, "runs of each kind in a process (the least counts)")
    ab(__doc__ or "", __file__, lambda args: child(args.runs), ROWS, [runs])


if __name__ == "__main__":
    main()
