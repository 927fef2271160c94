"""The fan-out the benchmarks share: a lead's `task` calls of 100 prompts each, N prompts in all.
Plain data, nothing of delegate's imported (`bench_fanout_ab.py` runs it against another checkout),
and how the A/B benchmarks run a checkout against another (`in_turn`)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PER_CALL = 100


def task_calls(n: int, description: str = "bench", **extra: Any) -> list[tuple[str, dict[str, Any]]]:
    """The lead's `task` calls starting `n` `explore` subagents (`extra`: more arguments of each call)."""
    return [
        (
            "task",
            {
                "subagent_type": "explore",
                "description": description,
                "prompts": [f"q{j}" for j in range(i, min(n, i + PER_CALL))],
                **extra,
            },
        )
        for i in range(0, n, PER_CALL)
    ]


def in_turn(script: str, sources: dict[str, Path], rounds: int, *args: str) -> dict[str, dict[str, float]]:
    """Run `script --child ARGS` in a fresh process for each of `sources` (a checkout's src folder
    by name), in turn, `rounds` times; the median over rounds of each figure its last line (a JSON
    object) gives, by source."""
    found: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    for _ in range(rounds):
        for name, src in sources.items():
            env = os.environ | {"PYTHONPATH": str(src)}
            command = [sys.executable, script, "--child", *args]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:  # say why: an older checkout may lack what the child imports
                raise SystemExit(f"the child on {name} ({src}) failed:\n{done.stderr[-3000:]}")
            found[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in found.items()}


HERE = Path(__file__).resolve().parent.parent / "src"
"""This checkout's src folder."""


def ab(
    doc: str,
    script: str,
    child: Callable[[argparse.Namespace], None],
    rows: Sequence[tuple[str, str, str]],
    options: Sequence[tuple[str, int, str]] = (),
) -> dict[str, dict[str, float]] | None:
    """An A/B benchmark's command line: the other checkout's src folder, `--rounds`, `options`
    (`--name`, default, help: integers passed on to each child). In a process run with `--child`,
    runs `child` (None); else runs `script` for this checkout and the other in turn (`in_turn`),
    prints the medians of `rows` (label, key, unit) for both, and gives them back."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", nargs="?", type=Path, help="the other checkout's src folder")
    parser.add_argument("--rounds", type=int, default=3)
    for flag, default, help in options:
        parser.add_argument(flag, type=int, default=default, help=help)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return None
    if args.other is None:
        parser.error("name the other checkout's src folder")
    passed = [part for flag, _, _ in options for part in (flag, str(getattr(args, flag.lstrip("-"))))]
    med = in_turn(script, {"this": HERE, "other": args.other.resolve()}, args.rounds, *passed)
    print(f"medians of {args.rounds} rounds, in turn; this = {HERE}, other = {args.other}")
    for label, key, unit in rows:
        this, other = med["this"][key], med["other"][key]
        print(f"  {label:<52} this {this:8.1f} {unit:<12} other {other:8.1f}   this/other {this / other:.2f}x")
    return med
