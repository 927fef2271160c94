"""The timing harness of the A/B benchmarks that run two variants of one runtime in one process
(`bench_permissions.py`, `bench_watchdog.py`): a fan-out whose subagents each read a file, one
run timed in this process's CPU time and wall time, and rounds that alternate (ABBA) so the
machine's load falls on both alike, printed as medians and a ratio."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from _fanout import task_calls

from delegate import RunResult, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, call, reply, respond

Took = tuple[float, float]
"""CPU seconds (all this process's threads, which other processes do not inflate) and wall seconds."""


def reading_fanout(n: int) -> FunctionModel:
    """A lead that starts `n` subagents (`task` calls of 100 prompts each); each reads
    `notes/readme.md` (see `workspace`) and completes. It answers at once: what is timed is the
    framework."""
    calls = task_calls(n, "b")

    def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith(LEAD_INSTRUCTIONS):
            return respond(calls) if len(request.messages) == 1 else reply("all done")
        if request.messages[-1].role == "user":
            return call("read_file", path="notes/readme.md")
        return call("complete", summary="ok")

    return FunctionModel(answer)


def workspace(root: Path) -> Path:
    """`root` with the file the subagents of `reading_fanout` read."""
    (root / "notes").mkdir(exist_ok=True)
    (root / "notes" / "readme.md").write_text("notes\n")
    return root


async def timed(rt: Runtime, prompt: str) -> tuple[RunResult, Took]:
    """One run of `rt` on `prompt`, timed; the runtime closed after it."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = await rt.run(prompt)
    took = (time.process_time() - cpu, time.perf_counter() - wall)
    await rt.aclose()
    return result, took


def abba(rounds: int, a: Callable[[], Took], b: Callable[[], Took]) -> tuple[list[Took], list[Took]]:
    """`a` and `b`, `rounds` times each, alternating which goes first (after one warm-up of each:
    imports, caches)."""
    a(), b()
    times_a: list[Took] = []
    times_b: list[Took] = []
    for i in range(rounds):
        order = [(times_a, a), (times_b, b)]
        for times, case in order if i % 2 == 0 else reversed(order):
            times.append(case())
    return times_a, times_b


def report(title: str, names: tuple[str, str], per: tuple[int, str], times: tuple[list[Took], list[Took]]) -> None:
    """Medians of CPU and wall time of each, per `per` (how many of what), and the ratio b / a."""
    (name_a, name_b), (count, unit), (times_a, times_b) = names, per, times
    print(f"{title}, median of {len(times_a)} rounds each:")
    for i, what in ((0, "CPU"), (1, "wall")):
        a = statistics.median(t[i] for t in times_a)
        b = statistics.median(t[i] for t in times_b)
        print(
            f"  {what:>4}: {name_a} {a:.3f} s ({a / count * 1e6:.1f} µs a {unit}), "
            f"{name_b} {b:.3f} s ({b / count * 1e6:.1f} µs): ratio {b / a:.3f}x"
        )
