"""What the idle watchdog costs: at most 1.05x per subagent and per tool call (issue 34, item 10).

    python bench/bench_watchdog.py                  # 1,000 subagents and 1,000 tool calls, 9 rounds
    python bench/bench_watchdog.py -n 2000 --calls 5000 --rounds 11

Two runs, each with the watchdog on (`RunLimits.stall_timeout`, the default 300 s: a `Watchdog`
around every model request and every tool call) against the same with it off (`stall_timeout=None`),
storeless, a model that answers at once (what is measured is the framework):

- fan-out: a lead starts `n` subagents (`task` calls of 100 prompts each); each reads a file and
  completes (two model requests and two tool calls a subagent);
- tool calls: one lead makes `calls` calls of a tool that answers at once, one a turn (each a
  stretch of the lead's own watchdog), then answers; and the same ten calls a turn (calls run at
  once, in tasks of their own: each call a watchdog of its own).

Rounds alternate between on and off (ABBA: each goes first in turn), in one process, so the
machine's load falls on both alike. Timed: this process's CPU time (all its threads) for the
whole run, which other processes on a shared machine do not inflate; wall time beside. Printed:
medians, per subagent or per call, and the ratios (on / off).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _fanout import task_calls

from delegate import Lead, LoopSettings, RunLimits, Runtime, tool
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, call, reply, respond

STALL = 300.0


def fanout_model(n: int) -> FunctionModel:
    calls = task_calls(n, "b")

    def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith(LEAD_INSTRUCTIONS):
            return respond(calls) if len(request.messages) == 1 else reply("all done")
        if request.messages[-1].role == "user":
            return call("read_file", path="notes/readme.md")
        return call("complete", summary="ok")

    return FunctionModel(answer)


@tool
def tick(n: int) -> str:
    """Answer at once."""
    return str(n)


def calls_model(calls: int, per_turn: int) -> FunctionModel:
    made = 0

    def answer(request: ModelRequest) -> ModelResponse:
        nonlocal made
        if not request.tools:  # a compaction of the long conversation
            return reply("the lead called tick again and again")
        if made >= calls:
            return reply("done")
        made += per_turn
        return respond([("tick", {"n": made - i}) for i in range(per_turn)])

    return FunctionModel(answer)


async def fanout(root: Path, n: int, stall: float | None, timeout: float | None) -> tuple[float, float]:
    rt = Runtime(
        model=fanout_model(n),
        workspace=root,
        store=False,
        limits=RunLimits(max_subagents=n, max_parallel=None, timeout=timeout, stall_timeout=stall),
    )
    cpu, wall = time.process_time(), time.perf_counter()
    result = await rt.run("fan out")
    took = (time.process_time() - cpu, time.perf_counter() - wall)
    await rt.aclose()
    assert result.status == "completed" and len(result.subagents) == n, result.status
    return took


async def tool_calls(root: Path, calls: int, per_turn: int, stall: float | None) -> tuple[float, float]:
    rt = Runtime(
        model=calls_model(calls, per_turn),
        workspace=root,
        store=False,
        lead=Lead(tools=[tick], max_steps=calls + 5),
        limits=RunLimits(stall_timeout=stall),
        loop=LoopSettings(guard=None),  # the same call, again and again, is the point here
    )
    cpu, wall = time.process_time(), time.perf_counter()
    result = await rt.run("tick")
    took = (time.process_time() - cpu, time.perf_counter() - wall)
    await rt.aclose()
    assert result.status == "completed" and result.final == "done", (result.status, result.error)
    return took


Case = Callable[[float | None], tuple[float, float]]


def ab(name: str, unit: str, per: int, rounds: int, case: Case) -> None:
    """`case` with the watchdog off and on, ABBA, `rounds` times each; medians and ratios."""
    case(None), case(STALL)  # warm-up: imports, caches
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    for i in range(rounds):
        order: list[tuple[list[tuple[float, float]], float | None]] = [(off, None), (on, STALL)]
        for times, stall in order if i % 2 == 0 else reversed(order):
            times.append(case(stall))
    print(f"{name}, median of {rounds} rounds each:")
    for i, what in ((0, "CPU"), (1, "wall")):
        a = statistics.median(t[i] for t in off)
        b = statistics.median(t[i] for t in on)
        print(
            f"  {what:>4}: watchdog off {a:.3f} s ({a / per * 1e6:.1f} µs a {unit}), "
            f"on {b:.3f} s ({b / per * 1e6:.1f} µs): ratio {b / a:.3f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=1000, help="subagents of the fan-out (default 1,000)")
    parser.add_argument("--calls", type=int, default=1000, help="tool calls of the lead (default 1,000)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of each (default 9)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes").mkdir()
        (root / "notes" / "readme.md").write_text("notes\n")
        n, calls = args.n, args.calls
        ab(
            f"fan-out of {n:,} subagents (each reads a file, then completes), run timeout 3600 s",
            "subagent",
            n,
            args.rounds,
            lambda stall: asyncio.run(fanout(root, n, stall, 3600)),
        )
        ab(
            f"one lead, {calls:,} tool calls, one a turn",
            "tool call",
            calls,
            args.rounds,
            lambda stall: asyncio.run(tool_calls(root, calls, 1, stall)),
        )
        ab(
            f"one lead, {calls:,} tool calls, ten a turn (at once)",
            "tool call",
            calls,
            args.rounds,
            lambda stall: asyncio.run(tool_calls(root, calls, 10, stall)),
        )


if __name__ == "__main__":
    main()
