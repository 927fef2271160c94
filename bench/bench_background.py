"""Background subagents against foreground ones: the framework's cost of 1,000 subagents started in
the background in one turn and waited for (`task_wait`), against the same 1,000 in the foreground.

    python bench/bench_background.py                 # storeless and with the SQLite store, 7 rounds
    python bench/bench_background.py --rounds 3 --n 500

The lead's first turn makes `n / 100` `task` calls of 100 prompts each (with `run_in_background`
for the background runs; then a `task_wait` turn), and its last turn answers; every subagent's model
answers `complete` at once, so all the time is the framework's. The two kinds run in turn in this
one process (a warm-up of each first), so the machine's load falls on both alike. Printed: the
median µs a subagent of each, and background over foreground (the target: at most 1.1x).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _fanout import task_calls

from delegate import LoopSettings, RunLimits, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply, respond


def fan_out(n: int, background: bool) -> FunctionModel:
    """The lead starts `n` subagents in one turn (waits for them, when in the background), then answers."""
    extra: dict[str, Any] = {"run_in_background": True} if background else {}
    calls = task_calls(n, **extra)

    turns = [0]

    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            return call("complete", summary="ok")
        turns[0] += 1
        if turns[0] == 1:
            return respond(calls)
        if turns[0] == 2 and background:
            return call("task_wait", timeout_s=3600)
        return reply("all done")

    return FunctionModel(answer)


async def one(root: Path, n: int, background: bool, store: bool) -> float:
    """µs of framework time a subagent of one run."""
    rt = Runtime(
        model=fan_out(n, background),
        workspace=root,
        store=None if store else False,
        limits=RunLimits(max_parallel=None, max_subagents=None),
        loop=LoopSettings(heartbeat_interval=3600),
    )
    start = time.perf_counter()
    result = await rt.run("fan out")
    elapsed = time.perf_counter() - start
    await rt.aclose()
    assert len(result.subagents) == n and all(s.status == "completed" for s in result.subagents)
    assert all(s.background is background for s in result.subagents)
    return elapsed / n * 1e6


def measure(n: int, rounds: int, store: bool) -> tuple[float, float]:
    """Median µs a subagent, foreground and background, run in turn."""
    fore: list[float] = []
    back: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(one(root, min(n, 200), False, store))
        asyncio.run(one(root, min(n, 200), True, store))
        for _ in range(rounds):
            fore.append(asyncio.run(one(root, n, False, store)))
            back.append(asyncio.run(one(root, n, True, store)))
    return statistics.median(fore), statistics.median(back)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="subagents a run (default 1,000)")
    parser.add_argument("--rounds", type=int, default=7, help="runs of each kind (default 7)")
    args = parser.parse_args()
    print(f"{args.n:,} subagents started in one turn, median of {args.rounds} runs each, µs a subagent")
    for label, store in (("storeless", False), ("SQLite store", True)):
        fore, back = measure(args.n, args.rounds, store)
        print(f"{label:<13} foreground {fore:8.1f}   background {back:8.1f}   background/foreground {back / fore:.2f}x")


if __name__ == "__main__":
    main()
