"""The answer a person reads: per arm, the success rate with its 95% Wilson interval, tokens, cost
and time (medians and totals); per task, which arms succeeded how often.

The Wilson score interval is used because it stays inside [0, 1] and keeps a sensible width at
the small counts an eval has (3 of 4 successes: 0.30-0.95), where the normal approximation's
interval leaves [0, 1] or shrinks to nothing at 0 or N successes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._time import iso
from ._arms import Arm
from ._store import AttemptRow, EvalRow

__all__ = ["Z95", "ArmSummary", "EvalReport", "build_report", "render_table", "wilson"]

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(kw_only=True)
class ArmSummary:
    name: str
    options: str
    attempts: int
    judged: int
    succeeded: int
    failed_runs: int
    unverified: int
    interval: tuple[float, float]
    tokens: list[int]
    costs: list[float | None]
    seconds: list[float]

    @property
    def rate(self) -> float | None:
        return self.succeeded / self.judged if self.judged else None

    def to_dict(self) -> dict[str, Any]:
        known = [c for c in self.costs if c is not None]
        return {
            "arm": self.name,
            "options": self.options,
            "attempts": self.attempts,
            "judged": self.judged,
            "succeeded": self.succeeded,
            "success_rate": self.rate,
            "ci95": [round(self.interval[0], 4), round(self.interval[1], 4)],
            "failed_runs": self.failed_runs,
            "unverified": self.unverified,
            "tokens": {"median": _median(self.tokens), "total": sum(self.tokens)},
            "cost_usd": {
                "median": _median(known) if len(known) == len(self.costs) else None,
                "total": round(sum(known), 6) if len(known) == len(self.costs) else None,
            },
            "seconds": {"median": _median(self.seconds), "total": round(sum(self.seconds), 3)},
        }


@dataclass(kw_only=True)
class EvalReport:
    """An eval's results: `to_dict` is `delegate eval show --json`."""

    eval_id: str
    name: str
    status: str
    created_at: str
    finished_at: str | None
    repeat: int
    budget: dict[str, Any] | None
    arms: list[ArmSummary]
    tasks: list[dict[str, Any]]
    attempts: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "eval_id": self.eval_id,
            "suite": self.name,
            "status": self.status,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "repeat": self.repeat,
            "budget": self.budget,
            "arms": [a.to_dict() for a in self.arms],
            "tasks": self.tasks,
            "attempts": self.attempts,
        }


def build_report(row: EvalRow, attempts: Sequence[AttemptRow]) -> EvalReport:
    """The report of an eval from its stored attempts (those not judged yet count as not judged)."""
    arms = [_arm(a, [t for t in attempts if t.key.arm == a["name"]]) for a in row.spec["arms"]]
    tasks: list[dict[str, Any]] = []
    for task in row.spec["tasks"]:
        per_arm: dict[str, dict[str, int]] = {}
        for arm in row.spec["arms"]:
            mine = [t for t in attempts if t.key.task == task["id"] and t.key.arm == arm["name"]]
            judged = [t.outcome for t in mine if t.outcome is not None]
            per_arm[arm["name"]] = {
                "succeeded": sum(1 for o in judged if o["succeeded"]),
                "judged": len(judged),
                "attempts": len(mine),
            }
        tasks.append({"task": task["id"], "arms": per_arm})
    done = all(a.outcome is not None for a in attempts)
    return EvalReport(
        eval_id=row.id,
        name=row.name,
        status="completed" if done else "unfinished",
        created_at=iso(row.created_at),
        finished_at=iso(row.finished_at),
        repeat=int(row.spec["repeat"]),
        budget=row.spec.get("budget"),
        arms=arms,
        tasks=tasks,
        attempts=[_line(a) for a in attempts],
    )


def _arm(arm: dict[str, Any], attempts: Sequence[AttemptRow]) -> ArmSummary:
    judged = [a.outcome for a in attempts if a.outcome is not None]
    succeeded = sum(1 for o in judged if o["succeeded"])
    return ArmSummary(
        name=arm["name"],
        options=Arm.from_dict(arm).describe(),
        attempts=len(attempts),
        judged=len(judged),
        succeeded=succeeded,
        failed_runs=sum(1 for o in judged if o["status"] != "completed"),
        unverified=sum(1 for o in judged if o.get("unverified")),
        interval=wilson(succeeded, len(judged)),
        tokens=[int(o["usage"]["input_tokens"]) + int(o["usage"]["output_tokens"]) for o in judged],
        costs=[o["usage"]["cost_usd"] for o in judged],
        seconds=[float(o["seconds"]) for o in judged if o.get("seconds") is not None],
    )


def _line(attempt: AttemptRow) -> dict[str, Any]:
    found: dict[str, Any] = {
        "arm": attempt.key.arm,
        "task": attempt.key.task,
        "attempt": attempt.key.attempt,
        "run_id": attempt.run_id,
    }
    if attempt.outcome is None:
        return found | {"judged": False}
    return found | {"judged": True} | attempt.outcome


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 6) if values else None


def render_table(report: EvalReport) -> str:
    """The report as text: one line per arm, then one per task."""
    lines = [f"eval {report.eval_id} ({report.name}): {report.status}, {report.repeat} repeat(s)"]
    if report.budget:
        lines.append(f"equal budget: {report.budget['value']} {report.budget['kind']} per task")
    head = (
        f"{'arm':<14} {'success':>9} {'95% CI':>13} {'tokens med':>11} {'tokens tot':>11} {'cost tot':>9} "
        f"{'time med':>9}"
    )
    lines += ["", head]
    for arm in report.arms:
        data = arm.to_dict()
        rate = f"{arm.succeeded}/{arm.judged}"
        ci = f"{arm.interval[0]:.2f}-{arm.interval[1]:.2f}"
        cost = data["cost_usd"]["total"]
        median_s = data["seconds"]["median"]
        lines.append(
            f"{arm.name:<14} {rate:>9} {ci:>13} {_num(data['tokens']['median']):>11} {data['tokens']['total']:>11} "
            f"{'-' if cost is None else f'${cost:.4f}':>9} {'-' if median_s is None else f'{median_s:.1f}s':>9}"
        )
    names = [a.name for a in report.arms]
    lines += ["", f"{'task':<24} " + " ".join(f"{n:>12}" for n in names)]
    for task in report.tasks:
        cells = [f"{task['arms'][n]['succeeded']}/{task['arms'][n]['judged']}" for n in names]
        lines.append(f"{task['task']:<24} " + " ".join(f"{c:>12}" for c in cells))
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
