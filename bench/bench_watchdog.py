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
import tempfile
from pathlib import Path

from _timing import Took, abba, reading_fanout, report, timed, workspace

from delegate import Lead, LoopSettings, RunLimits, Runtime, tool
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, reply, respond

STALL = 300.0


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


async def fanout(root: Path, n: int, stall: float | None, timeout: float | None) -> Took:
    rt = Runtime(
        model=reading_fanout(n),
        workspace=root,
        store=False,
        limits=RunLimits(max_subagents=n, max_parallel=None, timeout=timeout, stall_timeout=stall),
    )
    result, took = await timed(rt, "fan out")
    assert result.status == "completed" and len(result.subagents) == n, result.status
    return took


async def tool_calls(root: Path, calls: int, per_turn: int, stall: float | None) -> Took:
    rt = Runtime(
        model=calls_model(calls, per_turn),
        workspace=root,
        store=False,
        lead=Lead(tools=[tick], max_steps=calls + 5),
        limits=RunLimits(stall_timeout=stall),
        loop=LoopSettings(guard=None),  # the same call, again and again, is the point here
    )
    result, took = await timed(rt, "tick")
    assert result.status == "completed" and result.final == "done", (result.status, result.error)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=1000, help="subagents of the fan-out (default 1,000)")
    parser.add_argument("--calls", type=int, default=1000, help="tool calls of the lead (default 1,000)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of each (default 9)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = workspace(Path(tmp))
        n, calls, rounds, names = args.n, args.calls, args.rounds, ("watchdog off", "on")
        times = abba(
            rounds, lambda: asyncio.run(fanout(root, n, None, 3600)), lambda: asyncio.run(fanout(root, n, STALL, 3600))
        )
        title = f"fan-out of {n:,} subagents (each reads a file, then completes), run timeout 3600 s"
        report(title, names, (n, "subagent"), times)
        for per_turn, how in ((1, "one a turn"), (10, "ten a turn (at once)")):
            times = abba(
                rounds,
                lambda p=per_turn: asyncio.run(tool_calls(root, calls, p, None)),
                lambda p=per_turn: asyncio.run(tool_calls(root, calls, p, STALL)),
            )
            report(f"one lead, {calls:,} tool calls, {how}", names, (calls, "tool call"), times)


if __name__ == "__main__":
    main()
