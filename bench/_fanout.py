"""The fan-out the benchmarks share: a lead's `task` calls of 100 prompts each, N prompts in all.
Plain data, nothing of delegate's imported (`bench_fanout_ab.py` runs it against another checkout)."""

from __future__ import annotations

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
