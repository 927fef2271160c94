"""`delegate workflow ...` and `delegate run --workflow FILE`: what the command line shares for
workflows (the script read from a file, stdin or the shipped ones; `--arg KEY=VALUE`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .._text import plural
from ._common import fail

workflow_app = typer.Typer(
    help="Workflows: plans written as Python scripts whose agents are subagents (see docs/workflows.md).",
    no_args_is_help=True,
)

WorkflowFile = Annotated[
    str | None,
    typer.Option(
        "--workflow",
        metavar="FILE",
        help="Run this workflow script (or `-` for stdin, or a shipped one's name) instead of the lead.",
        rich_help_panel="Workflow",
    ),
]
WorkflowArgs = Annotated[
    list[str] | None,
    typer.Option(
        "--arg",
        metavar="KEY=VALUE",
        help="A value the script reads as args[KEY] (JSON, else text); repeat for more.",
        rich_help_panel="Workflow",
    ),
]


def read_script(where: str) -> str:
    """The script `where` names: `-` (stdin), a file, or a shipped workflow's name."""
    from ..workflows import shipped_workflows

    shipped = shipped_workflows()
    if where == "-":
        text = sys.stdin.read()
    elif Path(where).is_file():
        try:
            text = Path(where).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read the workflow {where}: {exc}")
    elif where in shipped:
        text = shipped[where].read_text(encoding="utf-8")
    else:
        fail(f"no workflow file {where!r}; give a file, `-` for stdin, or one of: {', '.join(shipped)}")
    if not text.strip():
        fail("the workflow script is empty: write the plan as Python (see docs/workflows.md)")
    return text


def parse_args(given: list[str]) -> dict[str, Any]:
    """`--arg KEY=VALUE` options as the script's `args`: each value JSON if it reads as JSON, else text."""
    found: dict[str, Any] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--arg {item!r}: write KEY=VALUE")
        try:
            found[key.strip()] = json.loads(value)
        except ValueError:
            found[key.strip()] = value
    return found


@workflow_app.command("list")
def workflow_list() -> None:
    """List the workflows delegate ships (run one with `delegate workflow run NAME`)."""
    from ..workflows import shipped_workflows

    for name, path in shipped_workflows().items():
        first = path.read_text(encoding="utf-8").split('"""')[1].strip().splitlines()[0]
        typer.echo(f"{name}\t{first}")


def workflow_lines(record: dict[str, Any], script: str | None) -> list[str]:
    """A workflow's record as `delegate runs show` prints it: how it ended with its count line,
    each phase with its counts, then the script, each line that started agents marked with them."""
    from ..workflows import count_line

    lines = [f"workflow {record.get('status')}: {record.get('line')}"]
    if record.get("diverged_at_line"):
        changed = record["diverged_at_line"]
        lines.append(f"  the script changed before a resume: from line {changed} on, calls ran again")
    phases: list[dict[str, Any]] = record.get("phases") or []
    agents: list[dict[str, Any]] = record.get("agents") or []
    for phase in phases:
        lines.append(f"  phase {phase.get('name') or '(none)'}: {count_line(phase)}")
    if not script:
        return lines
    by_line: dict[int, list[dict[str, Any]]] = {}
    for agent in agents:
        if isinstance(agent.get("line"), int):
            by_line.setdefault(agent["line"], []).append(agent)
    source = script.splitlines()
    width = len(str(len(source)))
    lines.append("script (each line that started agents, with what they did):")
    for number, text in enumerate(source, 1):
        started = by_line.get(number)
        lines.append(f"  {number:>{width}} | {text}" + (f"    <- {_agents_said(started)}" if started else ""))
    return lines


def _agents_said(agents: list[dict[str, Any]]) -> str:
    """ "3 agents: 2 completed, 1 cancelled; 1 with every criterion holding"."""
    statuses: dict[str, int] = {}
    for agent in agents:
        statuses[str(agent.get("status"))] = statuses.get(str(agent.get("status")), 0) + 1
    said = f"{plural(len(agents), 'agent')}: " + ", ".join(f"{n} {s}" for s, n in statuses.items())
    holding = sum(a.get("verdict") == "holds" for a in agents)
    failing = sum(a.get("verdict") == "does not hold" for a in agents)
    if holding or failing:
        said += f"; {holding} with every criterion holding, {failing} with a criterion not holding"
    return said
