"""`delegate workflow ...` and `delegate run --workflow FILE`: what the command line shares for
workflows (the script read from a file, stdin or the shipped ones; `--arg KEY=VALUE`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

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


def shipped() -> dict[str, Path]:
    """The workflows delegate ships, by name (`map-review-merge`, `deep-research`)."""
    folder = Path(__file__).resolve().parent.parent / "workflows" / "shipped"
    return {p.stem.replace("_", "-"): p for p in sorted(folder.glob("*.py"))}


def read_script(where: str) -> str:
    """The script `where` names: `-` (stdin), a file, or a shipped workflow's name."""
    if where == "-":
        text = sys.stdin.read()
    elif Path(where).is_file():
        try:
            text = Path(where).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read the workflow {where}: {exc}")
    elif where in shipped():
        text = shipped()[where].read_text(encoding="utf-8")
    else:
        fail(f"no workflow file {where!r}; give a file, `-` for stdin, or one of: {', '.join(shipped())}")
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
    for name, path in shipped().items():
        first = path.read_text(encoding="utf-8").split('"""')[1].strip().splitlines()[0]
        typer.echo(f"{name}\t{first}")
