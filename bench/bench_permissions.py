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
import tempfile
from pathlib import Path

from _timing import Took, abba, reading_fanout, report, timed, workspace

from delegate import Extensions, Permissions, RunLimits, Runtime

RULES = Permissions(
    allow=["Bash(npm run test:*)", "Read(src/**)"],
    ask=["Edit(docs/**)", "mcp__github", "Bash(git push:*)"],
    deny=["Read(secrets/**)", "Read(*.env)", "Bash(rm:*)", "mcp__db__drop_table"],
    settings_files=False,
)
"""Rules that name the subagents' tool (`read_file`) and match none of their calls."""


async def once(root: Path, n: int, rules: Permissions | None, store: bool) -> Took:
    rt = Runtime(
        model=reading_fanout(n),
        workspace=root,
        store=None if store else False,
        limits=RunLimits(max_subagents=n, max_parallel=None, timeout=None),
        extensions=Extensions(permissions=rules or Permissions(settings_files=False)),
    )
    result, took = await timed(rt, "fan out")
    assert result.status == "completed" and len(result.subagents) == n, result.status
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=1000, help="subagents of the fan-out (default 1,000)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of each (default 9)")
    parser.add_argument("--store", action="store_true", help="record into the SQLite store (default: storeless)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = workspace(Path(tmp))
        times = abba(
            args.rounds,
            lambda: asyncio.run(once(root, args.n, None, args.store)),
            lambda: asyncio.run(once(root, args.n, RULES, args.store)),
        )
    where = "SQLite store" if args.store else "storeless"
    report(
        f"fan-out of {args.n:,} subagents, {where}",
        ("without rules", "with rules, none matching"),
        (args.n, "subagent"),
        times,
    )


if __name__ == "__main__":
    main()
