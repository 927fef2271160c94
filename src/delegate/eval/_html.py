"""The report as one standalone HTML page: inline CSS and SVG charts, no script, nothing fetched.

Two charts: success rate (with its 95% interval) against what an attempt spends, one point per
arm (the cost in US dollars when every attempt has a price, else the tokens); and per-task
outcomes, a cell per task and arm shaded by its success count. Then the arms' table and every
attempt with its verdicts. Every text from the suite or a run is escaped.
"""

from __future__ import annotations

import statistics
from html import escape
from typing import Any

from ._report import ArmSummary, EvalReport

__all__ = ["render_html"]

_W, _H, _PAD = 560, 320, 48
_COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4b5563")

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:980px;color:#111;padding:0 1rem}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5}.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#047857}.no{color:#b91c1c}.muted{color:#666}svg{background:#fafafa;border:1px solid #eee}
code{font-size:12px}details{margin:2px 0}
"""


def render_html(report: EvalReport) -> str:
    """The whole page (see the module's docstring)."""
    data = report.to_dict()
    budget = report.budget
    head = (
        f"<h1>Eval {escape(report.eval_id)}: {escape(report.name)}</h1>"
        f"<p class=muted>{escape(report.status)}; {report.repeat} repeat(s); started {escape(report.created_at)}"
        + (f"; equal budget {budget['value']} {escape(str(budget['kind']))} per task" if budget else "")
        + ". Success is decided in code (the task's criteria and answer checks); intervals are 95% Wilson.</p>"
    )
    parts = [
        head,
        "<h2>Success against spend, per arm</h2>",
        _scatter(report.arms),
        "<h2>Arms</h2>",
        _arms_table(data["arms"]),
        "<h2>Per-task outcomes</h2>",
        _grid(report),
        "<h2>Attempts</h2>",
        _attempts(data["attempts"]),
    ]
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>Eval {escape(report.eval_id)}</title><style>{_STYLE}</style></head><body>"
        + "".join(parts)
        + "</body></html>\n"
    )


def _spend(arm: ArmSummary, by_cost: bool) -> float:
    if by_cost:
        known = [c for c in arm.costs if c is not None]
        return statistics.median(known) if known else 0.0
    return float(statistics.median(arm.tokens)) if arm.tokens else 0.0


def _scatter(arms: list[ArmSummary]) -> str:
    by_cost = all(a.costs and all(c is not None for c in a.costs) for a in arms) and any(
        any(c for c in a.costs) for a in arms
    )
    unit = "median cost per attempt (USD)" if by_cost else "median tokens per attempt"
    spends = [_spend(a, by_cost) for a in arms]
    top = max(spends, default=0.0) or 1.0
    plot_w, plot_h = _W - 2 * _PAD, _H - 2 * _PAD

    def x(v: float) -> float:
        return _PAD + v / (top * 1.1) * plot_w

    def y(v: float) -> float:
        return _PAD + (1 - v) * plot_h

    out = [f'<svg width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img" aria-label="success against {unit}">']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{_PAD}" x2="{_W - _PAD}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{_PAD - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end">{tick:.0%}</text>')
    out.append(f'<text x="{_W / 2}" y="{_H - 10}" font-size="12" text-anchor="middle">{unit}</text>')
    out.append(f'<text x="{_PAD - 6}" y="{_PAD - 16}" font-size="11" text-anchor="end">success</text>')
    out.append(f'<text x="{x(top):.1f}" y="{_H - _PAD + 16}" font-size="11" text-anchor="middle">{top:.4g}</text>')
    for i, (arm, spend) in enumerate(zip(arms, spends, strict=True)):
        colour = _COLOURS[i % len(_COLOURS)]
        if arm.rate is None:
            continue
        cx, low, high = x(spend), y(arm.interval[0]), y(arm.interval[1])
        out.append(
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{low:.1f}" y2="{high:.1f}" stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<circle cx="{cx:.1f}" cy="{y(arm.rate):.1f}" r="6" fill="{colour}"><title>')
        out.append(f"{escape(arm.name)}: {arm.succeeded}/{arm.judged}, {spend:.4g}</title></circle>")
        out.append(
            f'<text x="{cx + 9:.1f}" y="{y(arm.rate) - 8:.1f}" font-size="12" fill="{colour}">{escape(arm.name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _arms_table(arms: list[dict[str, Any]]) -> str:
    rows = [
        "<table><tr><th>arm</th><th>options</th><th class=num>success</th><th class=num>95% CI</th>"
        "<th class=num>tokens (median / total)</th><th class=num>cost USD (total)</th>"
        "<th class=num>time s (median)</th><th class=num>failed runs</th></tr>"
    ]
    for a in arms:
        cost = a["cost_usd"]["total"]
        median_s = a["seconds"]["median"]
        rows.append(
            f"<tr><td>{escape(a['arm'])}</td><td><code>{escape(a['options'])}</code></td>"
            f"<td class=num>{a['succeeded']}/{a['judged']}</td>"
            f"<td class=num>{a['ci95'][0]:.2f}-{a['ci95'][1]:.2f}</td>"
            f"<td class=num>{_n(a['tokens']['median'])} / {a['tokens']['total']:,}</td>"
            f"<td class=num>{'-' if cost is None else f'{cost:.4f}'}</td>"
            f"<td class=num>{'-' if median_s is None else f'{median_s:.1f}'}</td>"
            f"<td class=num>{a['failed_runs']}</td></tr>"
        )
    return "".join(rows) + "</table>"


def _grid(report: EvalReport) -> str:
    names = [a.name for a in report.arms]
    cell_w, cell_h, left = 90, 26, 200
    width, height = left + cell_w * len(names) + 10, 30 + cell_h * len(report.tasks) + 10
    out = [f'<svg width="{width}" height="{height}" role="img" aria-label="per-task outcomes">']
    for j, name in enumerate(names):
        out.append(
            f'<text x="{left + j * cell_w + cell_w / 2}" y="20" font-size="12" text-anchor="middle">'
            f"{escape(name)}</text>"
        )
    for i, task in enumerate(report.tasks):
        top = 30 + i * cell_h
        out.append(
            f'<text x="{left - 8}" y="{top + 17}" font-size="12" text-anchor="end">{escape(task["task"])}</text>'
        )
        for j, name in enumerate(names):
            cell = task["arms"][name]
            share = cell["succeeded"] / cell["judged"] if cell["judged"] else None
            fill = "#e5e7eb" if share is None else f"hsl({int(share * 120)},70%,{85 - int(share * 25)}%)"
            x = left + j * cell_w
            out.append(f'<rect x="{x + 2}" y="{top + 2}" width="{cell_w - 4}" height="{cell_h - 4}" fill="{fill}"/>')
            label = f"{cell['succeeded']}/{cell['judged']}"
            out.append(f'<text x="{x + cell_w / 2}" y="{top + 17}" font-size="12" text-anchor="middle">{label}</text>')
    out.append("</svg>")
    return "".join(out)


def _attempts(attempts: list[dict[str, Any]]) -> str:
    rows = ["<table><tr><th>arm</th><th>task</th><th>#</th><th>run</th><th>outcome</th><th>verdicts</th></tr>"]
    for a in attempts:
        if not a["judged"]:
            outcome = "<span class=muted>not judged yet</span>"
            verdicts = ""
        else:
            ok = a["succeeded"]
            outcome = (
                f"<span class={'ok' if ok else 'no'}>{'succeeded' if ok else 'failed'}</span> ({escape(a['status'])})"
            )
            items = [_verdict(v["criterion"], v) for v in a["criteria"]] + [
                _verdict(v["check"], v) for v in a["answer"]
            ]
            verdicts = (
                f"<details><summary>{len(items)} check(s)</summary><ul>{''.join(items)}</ul></details>" if items else ""
            )
        rows.append(
            f"<tr><td>{escape(a['arm'])}</td><td>{escape(a['task'])}</td><td>{a['attempt']}</td>"
            f"<td><code>{escape(a['run_id'] or '-')}</code></td><td>{outcome}</td><td>{verdicts}</td></tr>"
        )
    return "".join(rows) + "</table>"


def _verdict(what: str, verdict: dict[str, Any]) -> str:
    evidence = escape(str(verdict["evidence"]))
    return f"<li>{escape(what)}: {escape(str(verdict['result']))} <span class=muted>{evidence}</span></li>"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
