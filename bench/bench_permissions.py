"""What permission rules cost a fan-out when none of them matches: at most 1.05x (issue 22).

    python bench/bench_permissions.py                 # 1,000 subagents, 5 rounds, storeless
    python bench/bench_permissions.py --store         # the same with the SQLite store
    python bench/bench_permissions.py -n 2000 --rounds 7

A lead fans out `n` subagents (`task` calls of 100 prompts each); each subagent reads a file and
completes (a model that answers at once: what is measured is the framework). Two runtimes in one
process, the same in all but their rules: one has none, the other has rules of every kind that
name the tools the subagents call and match none of their calls (`Read(secrets/**)`, `Edit(docs/**)`,
`Bash(rm:*)`, `mcp__github`, ...). Rounds alternate between them (ABBA: each goes first in turn),
so the machine's load falls on both alike. What is timed is the CPU time of this process (all its
threads) for the whole run, which other processes on a shared machine do not inflate; the wall
time is printed beside. Printed: the median of each, and the ratio (with rules / without).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _fanout import task_calls

from delegate import Extensions, Permissions, RunLimits, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, call, reply, respond

RULES = Permissions(
    allow=["Bash(npm run test:*)", "Read(src/**)"],
    ask=["Edit(docs/**)", "mcp__github", "Bash(git push:*)"],
    deny=["Read(secrets/**)", "Read(*.env)", "Bash(rm:*)", "mcp__db__drop_table"],
    settings_files=False,
)
"""Rules that name the subagents' tool (`read_file`) and match none of their calls."""


def model(n: int) -> FunctionModel:
    calls = task_calls(n, "b")

    def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith(LEAD_INSTRUCTIONS):
            return respond(calls) if len(request.messages) == 1 else reply("all done")
        if request.messages[-1].role == "user":
            return call("read_file", path="notes/readme.md")
        return call("complete", summary="ok")

    return FunctionModel(answer)


async def once(root: Path, n: int, rules: Permissions | None, store: bool) -> tuple[float, float]:
    rt = Runtime(
        model=model(n),
        workspace=root,
        store=None if store else False,
        limits=RunLimits(max_subagents=n, max_parallel=None, timeout=None),
        extensions=Extensions(permissions=rules or Permissions(settings_files=False)),
    )
    cpu, wall = time.process_time(), time.perf_counter()
    result = await rt.run("fan out")
    took = (time.process_time() - cpu, time.perf_counter() - wall)
    await rt.aclose()
    assert result.status == "completed" and len(result.subagents) == n, result.status
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=1000, help="subagents of the fan-out (default 1,000)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of each (default 9)")
    parser.add_argument("--store", action="store_true", help="record into the SQLite store (default: storeless)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes").mkdir()
        (root / "notes" / "readme.md").write_text("notes\n")
        asyncio.run(once(root, 200, None, args.store))  # warm-up: imports, caches
        asyncio.run(once(root, 200, RULES, args.store))
        without: list[tuple[float, float]] = []
        with_rules: list[tuple[float, float]] = []
        for i in range(args.rounds):
            order = [(without, None), (with_rules, RULES)]
            for times, rules in order if i % 2 == 0 else reversed(order):
                times.append(asyncio.run(once(root, args.n, rules, args.store)))
    where = "SQLite store" if args.store else "storeless"
    print(f"fan-out of {args.n:,} subagents, {where}, median of {args.rounds} rounds each:")
    for i, what in ((0, "CPU"), (1, "wall")):
        a = statistics.median(t[i] for t in without)
        b = statistics.median(t[i] for t in with_rules)
        print(
            f"  {what:>4}: without rules {a:.3f} s ({a / args.n * 1e6:.0f} µs a subagent), "
            f"with rules, none matching {b:.3f} s ({b / args.n * 1e6:.0f} µs): ratio {b / a:.3f}x"
        )


if __name__ == "__main__":
    main()
