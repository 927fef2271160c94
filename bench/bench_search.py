"""Search that cannot hang: `grep` with the catastrophic pattern `(a+)+$` over lines of `a`s.

Runs the real `grep` tool (RE2 in a search process) over a line of 40 `a`s and a `b` (no match:
the case that makes a backtracking engine try every split), and, as the baseline, the same pattern
in Python's `re` over 16 to 22 `a`s in this process, whose time doubles per character. Reports
medians of several runs and what the baseline's growth predicts for 40 characters.

    .venv/bin/python bench/bench_search.py
"""

from __future__ import annotations

import asyncio
import re
import statistics
import tempfile
import time
from pathlib import Path

from delegate import ToolContext, Workspace
from delegate.tools import builtin_tools

PATTERN = "(a+)+$"
RUNS = 7


async def grep_once(ctx: ToolContext) -> float:
    grep = next(t for t in builtin_tools(allow_commands=False) if t.name == "grep")
    started = time.perf_counter()
    result = await grep.run(ctx, {"pattern": PATTERN, "path": "line.txt"})
    elapsed = time.perf_counter() - started
    assert result.content == "no lines match '(a+)+$' in line.txt", result.content
    return elapsed


def backtracking(length: int) -> float:
    text = "a" * length + "b"
    compiled = re.compile(PATTERN)
    started = time.perf_counter()
    assert compiled.search(text) is None
    return time.perf_counter() - started


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "line.txt").write_text("a" * 40 + "b\n")
        ctx = ToolContext(run_id="bench", agent_id="lead", workspace=Workspace.open(folder), emit=lambda e: None)
        await grep_once(ctx)  # start a search process, as any first search does
        ours = statistics.median([await grep_once(ctx) for _ in range(RUNS)])
    print(f"grep {PATTERN!r} over 40 a's + b (RE2, search process): median {ours * 1000:.1f} ms")
    times = {n: statistics.median(backtracking(n) for _ in range(3)) for n in (16, 18, 20, 22)}
    for n, seconds in times.items():
        print(f"  baseline Python re over {n} a's + b: median {seconds * 1000:.1f} ms")
    growth = (times[22] / times[16]) ** (1 / 6)
    predicted = times[22] * growth ** (40 - 22)
    print(f"  baseline growth per character: {growth:.2f}x; predicted for 40: {predicted:,.0f} s")
    print(f"ratio, baseline at 22 a's / ours at 40: {times[22] / ours:.1f}x")
    print(f"ratio, predicted baseline at 40 / ours at 40: {predicted / ours:,.0f}x")


if __name__ == "__main__":
    asyncio.run(main())
