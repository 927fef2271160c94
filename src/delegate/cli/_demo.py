"""`delegate demo`: the product's main job on a small sample, end to end, with any model.

A lead agent delegates one summary per document to `summarizer` subagents (live tree), writes a
report, and then the same documents run as a durable batch (progress bar, JSON Lines export). What
was really written is checked in code and printed: with the embedded 135M model, expect the
machinery to work and the writing to be weak.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._text import plural
from ._main import fail

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..batch import Batch

SUMMARIZER_INSTRUCTIONS = (
    "Read the document your task names with read_file. Write a summary of two or three sentences to the "
    "file your task names with write_file. Then call complete with the summary and the path you wrote."
)


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="Where the demo works.")] = Path("delegate-demo"),
    model: Annotated[str | None, typer.Option("--model", "-m", help="provider:name (default: local).")] = None,
) -> None:
    """Watch a lead delegate one summary per sample document, then run the same work as a batch."""
    from .._agents import Subagent
    from .._errors import UserError
    from .._runtime import Runtime
    from ._render import run_live

    docs = _copy_samples(workspace)
    summarizer = Subagent(
        name="summarizer",
        description="Summarises one document into the file its task names.",
        instructions=SUMMARIZER_INSTRUCTIONS,
        tools=["read_file", "write_file"],
        first_tool_choice=["read_file", "write_file"],
        max_steps=6,
        timeout=300,
    )
    try:
        runtime = Runtime(
            model=model or "local",
            workspace=workspace,
            subagents=[summarizer],
            builtin=["write_file"],
            builtin_subagents=False,
            batch_tools=False,
            max_steps=4,
            max_subagents=2 * len(docs),
            first_tool_choice=["task", "write_file"],
        )
        runtime.model  # noqa: B018 - fetch the weights and start the local server before the live view
    except UserError as exc:
        fail(str(exc))
    stems = [Path(d).stem for d in docs]
    prompts = [f"Summarise docs/{stem}.txt into summaries/{stem}.md" for stem in stems]
    call = {"subagent_type": "summarizer", "description": "summaries", "prompts": prompts}
    prompt = (  # a small model copies a call it is shown better than it follows a description of one
        "You will write report.md, one line per document, once you have called task with:\n"
        f"{json.dumps(call)}\nThen answer with a short report."
    )
    typer.echo(f"Part 1: a lead agent delegates, in {workspace}/\n", err=True)
    result = run_live(lambda sinks: runtime.run(prompt, sinks=sinks))
    lead_files = _show_files(workspace, ["report.md", *(f"summaries/{stem}.md" for stem in stems)])

    typer.echo("\nPart 2: the same documents as a durable batch\n", err=True)
    batch = _run_batch(workspace, docs, runtime)
    typer.echo(batch.render(), err=True)
    batch_files = _show_files(workspace, [f"summaries/batch-{stem}.md" for stem in stems])
    _show_files(workspace, ["results.jsonl"])
    typer.echo(
        f"\nDone: the lead ran {plural(len(result.subagents), 'subagent')} "
        f"({result.status}) and {lead_files} of "
        f"{plural(len(stems) + 1, 'file')} it was asked for were written; the batch ran {plural(batch.total, 'item')} "
        f"({batch.status}) and wrote {batch_files} of {plural(len(stems), 'summary', 'summaries')}; results are in "
        f"{workspace / 'results.jsonl'}."
        + (
            " The embedded 135M model drives the machinery and is held to the right file names, but its "
            "writing is weak: try --model openai:<name> or anthropic:<name> for real work."
            if model in (None, "local")
            else ""
        ),
        err=True,
    )
    if result.status == "error":  # the model failed for good; a weak model's poor work is not a failure
        raise typer.Exit(1)


def _copy_samples(workspace: Path) -> list[str]:
    target = workspace / "docs"
    target.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for entry in sorted(resources.files("delegate").joinpath("samples", "docs").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".txt"):
            (target / entry.name).write_text(entry.read_text(encoding="utf-8"), encoding="utf-8")
            names.append(entry.name)
    shutil.rmtree(workspace / "summaries", ignore_errors=True)
    (workspace / "report.md").unlink(missing_ok=True)
    return names


def _run_batch(workspace: Path, docs: list[str], runtime: Runtime) -> Batch:
    from .._store import Store
    from ..batch import Batches
    from ._batch import LOCAL_USER, run_to_end

    items = [
        {
            "key": Path(d).stem,
            "prompt": f"Summarise docs/{d} into summaries/batch-{Path(d).stem}.md",
            "acceptance_criteria": [f"file:summaries/batch-{Path(d).stem}.md non-empty"],
        }
        for d in docs
    ]
    batches = Batches(Store.for_workspace(workspace.resolve()))
    batch = batches.submit(
        LOCAL_USER, subagent_type="summarizer", items=items, title="summaries", max_running_items=2, max_attempts=1
    )
    final = asyncio.run(run_to_end(batches, batch.batch, lambda info: runtime))
    with (workspace / "results.jsonl").open("w", encoding="utf-8") as out:
        for row in batches.export_rows(LOCAL_USER, final.id):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return final


def _show_files(workspace: Path, names: list[str]) -> int:
    """Say which of the files `names` were written (and are not empty), with how they begin, so the
    quality of the work is there to see; answer how many."""
    written = 0
    for name in names:
        path = workspace / name
        if path.is_file() and path.stat().st_size:
            start = (path.read_text(encoding="utf-8", errors="replace").strip().splitlines() or [""])[0][:70]
            typer.echo(f"  written: {path} ({path.stat().st_size} bytes): {start!r}", err=True)
            written += 1
        else:
            typer.echo(f"  not written: {path}", err=True)
    return written
