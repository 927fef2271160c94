"""`delegate eval compare A B`: which differences between two arms are larger than the noise.

- Success rate: the difference with Newcombe's 95% interval (the "hybrid score" interval built
  from each arm's Wilson interval, his method 10); larger than the noise when it excludes 0.
- Tokens, cost and time per attempt: the ratio of medians, and a two-sided Mann-Whitney U test
  (normal approximation with a tie correction); larger than the noise when p < 0.05. With a few
  attempts an arm no test can tell a difference: that is said, not hidden.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from ._report import ArmSummary

__all__ = ["compare", "mann_whitney", "newcombe", "render_comparison"]


def newcombe(a: ArmSummary, b: ArmSummary) -> tuple[float, float, float] | None:
    """The difference of success rates A - B and its 95% interval (None: an arm has no attempt judged)."""
    if not a.judged or not b.judged:
        return None
    p1, p2 = a.succeeded / a.judged, b.succeeded / b.judged
    (l1, u1), (l2, u2) = a.interval, b.interval
    d = p1 - p2
    return d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> float | None:
    """The two-sided p-value of the Mann-Whitney U test (None: a side is empty, or all values tie)."""
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        return None
    ranked = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    ranks = [0.0] * len(ranked)
    ties = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, ranked, strict=True) if side == 0)
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return None
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def compare(a: ArmSummary, b: ArmSummary) -> dict[str, Any]:
    """A and B side by side: see the module's docstring."""
    found: dict[str, Any] = {"a": a.name, "b": b.name}
    success = newcombe(a, b)
    if success is None:
        found["success"] = {"difference": None, "ci95": None, "beyond_noise": False}
    else:
        d, low, high = success
        found["success"] = {
            "a": f"{a.succeeded}/{a.judged}",
            "b": f"{b.succeeded}/{b.judged}",
            "difference": round(d, 4),
            "ci95": [round(low, 4), round(high, 4)],
            "beyond_noise": low > 0 or high < 0,
        }
    costs_a = [c for c in a.costs if c is not None]
    costs_b = [c for c in b.costs if c is not None]
    found["tokens"] = _measure([float(t) for t in a.tokens], [float(t) for t in b.tokens])
    found["cost_usd"] = _measure(costs_a, costs_b)
    found["seconds"] = _measure(a.seconds, b.seconds)
    return found


def _measure(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    ma = statistics.median(x) if x else None
    mb = statistics.median(y) if y else None
    p = mann_whitney(x, y)
    return {
        "median_a": ma,
        "median_b": mb,
        "ratio": round(ma / mb, 4) if ma is not None and mb else None,
        "p_value": None if p is None else round(p, 4),
        "beyond_noise": p is not None and p < 0.05,
    }


def render_comparison(found: dict[str, Any]) -> str:
    a, b = found["a"], found["b"]
    lines = [f"{a} vs {b}"]
    s = found["success"]
    if s["difference"] is None:
        lines.append("success: an arm has no judged attempt")
    else:
        verdict = "larger than the noise" if s["beyond_noise"] else "within the noise"
        low, high = s["ci95"]
        lines.append(
            f"success: {s['a']} vs {s['b']}, difference {s['difference']:+.2f} "
            f"(95% CI {low:+.2f} to {high:+.2f}): {verdict}"
        )
    for name in ("tokens", "cost_usd", "seconds"):
        m = found[name]
        if m["ratio"] is None:
            lines.append(f"{name}: not known for both arms")
            continue
        verdict = "larger than the noise" if m["beyond_noise"] else "within the noise"
        lines.append(
            f"{name}: median {m['median_a']:.4g} vs {m['median_b']:.4g} "
            f"({m['ratio']:.2f}x, p={m['p_value']}): {verdict}"
        )
    return "\n".join(lines)
