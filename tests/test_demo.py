"""`delegate demo`: with a capable model (the loopback server plays one) every part runs, writes
and holds up; with a weak one (a function model) the verdict says what it got wrong, file by file,
and why the lead gave no answer; the demo works in delegate's cache folder, never where it is run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from delegate import Lead, Runtime
from delegate.cli._demo import SUMMARIZER_INSTRUCTIONS, judge_report, judge_results, judge_summary, run_demo
from delegate.cli._render import ending_line, run_live
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, ScriptedModel, call, is_lead, reply
from tests.cli_support import scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

NAMES = ["bikes", "bread", "coffee", "sleep"]
DOCS = {
    name: resources.files("delegate").joinpath("samples", "docs", f"{name}.txt").read_text(encoding="utf-8")
    for name in NAMES
}


def a_summary(name: str) -> str:
    """A fair summary of a sample document: its first two sentences after the title."""
    body = DOCS[name].split("\n\n", 1)[1].replace("\n", " ")
    return " ".join(re.split(r"(?<=\.) ", body)[:2]) + "\n"


def task_of(name: str) -> str:
    return f"Summarise docs/{name}.txt into summaries/{name}.md"


# -- the capable model, through the OpenAI protocol, as a user runs it ------------------------------


def capable(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    last = messages[-1]
    if is_lead(body):
        if last["role"] == "user":
            docs = re.findall(r"docs/([a-z]+)\.txt", last["content"])
            return Reply(
                tool_calls=[
                    (
                        "task",
                        {
                            "subagent_type": "summarizer",
                            "description": "summaries",
                            "prompts": [task_of(d) for d in docs],
                        },
                    )
                ]
            )
        if not any(m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "write_file" for m in messages):
            report = "".join(f"{d}: summaries/{d}.md\n" for d in NAMES)
            return Reply(tool_calls=[("write_file", {"path": "report.md", "content": report})])
        return Reply(content="Wrote report.md.")
    task = next(m["content"] for m in messages if m["role"] == "user")
    source, name, target = re.findall(r"(docs/(\S+)\.txt) into (summaries/\S+\.md)", task)[0]
    done = [m for m in messages if m["role"] == "tool"]
    if not done:
        return Reply(tool_calls=[("read_file", {"path": source})])
    if len(done) == 1:
        return Reply(tool_calls=[("write_file", {"path": target, "content": a_summary(name)})])
    return Reply(tool_calls=[("complete", {"summary": f"summarised {source}", "paths": [target]})])


def test_the_demo_delegates_writes_runs_a_batch_and_every_file_holds_up_outside_the_folder_it_runs_in(
    tmp_path: Path,
) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    env = scrubbed_env()
    env["DELEGATE_CACHE_DIR"] = str(tmp_path / "cache")
    with OpenAIServer(capable) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        done = subprocess.run(
            [sys.executable, "-m", "delegate", "demo", "--model", "openai:m"],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert list(checkout.iterdir()) == []  # nothing left where it was run
    ws = tmp_path / "cache" / "demo"
    assert f"The demo works in {ws}/" in done.stderr
    for name in NAMES:
        assert (ws / f"summaries/{name}.md").read_text() == a_summary(name)
        assert (ws / f"summaries/batch-{name}.md").read_text() == a_summary(name)
    rows = [json.loads(line) for line in (ws / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in rows) == NAMES
    assert all(r["status"] == "succeeded" and r["acceptance"][0]["result"] == "holds" for r in rows)
    assert f"holds: {ws}/report.md (" in done.stderr
    assert (
        "Part 1: the lead completed with an answer in 3 steps; it started 4 subagents for 4 documents " in done.stderr
    )
    assert "(4 completed); 5 of the 5 files it was asked for hold up." in done.stderr
    assert "Part 2: the batch ended completed: 4 succeeded of 4 items" in done.stderr
    assert (
        "its own check (the file is not empty) holds for 4; judged by what they hold, 4 of the 4 summaries hold up."
        in done.stderr
    )
    assert "results.jsonl: 4 rows, one per item." in done.stderr
    assert done.stderr.rstrip().endswith("Every file holds up.")  # no advice to use a real model: it is one


# -- a weak model, in process: what the verdict says of its work ------------------------------------

GARBLED = [task_of("bikes"), task_of("bread"), "Summarise docs/coffee.txt into summaries/sleep.md"]


def weak(request: ModelRequest) -> ModelResponse:
    """A lead that delegates 3 prompts for 4 documents (one garbled), writes its prompt as the report
    and then reads documents until its step limit; subagents that go wrong in a different way each."""
    if is_lead(request):
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn == 0:
            return call("task", subagent_type="summarizer", description="summaries", prompts=GARBLED)
        if turn == 1:
            return call("write_file", path="report.md", content=request.messages[0].text)
        return call("read_file", path=f"docs/{NAMES[turn % 4]}.txt")
    task = request.messages[0].text
    source, name, target = re.findall(r"(docs/(\S+)\.txt) into (summaries/\S+\.md)", task)[0]
    done = sum(1 for m in request.messages if m.tool_results)
    if done == 0:
        return call("read_file", path=source)
    if done == 1:
        content = {
            "summaries/bikes.md": a_summary("bikes"),  # holds up
            "summaries/bread.md": task,  # its task, copied
            "summaries/sleep.md": a_summary("coffee"),  # the garbled prompt's document, not sleep's
            "summaries/batch-bikes.md": DOCS["bikes"],  # the whole document
            "summaries/batch-bread.md": a_summary("bread"),  # holds up
            "summaries/batch-coffee.md": "Coffee\n",  # a title
            "summaries/batch-sleep.md": "",  # nothing: the item's own check fails
        }[target]
        return call("write_file", path=target, content=content)
    return call("complete", summary=f"summarised {name}", paths=[target])


def test_the_verdict_says_why_the_lead_gave_no_answer_and_what_each_file_got_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_demo(tmp_path / "demo", FunctionModel(weak))
    err = capsys.readouterr().err
    assert (result.status, result.stop_reason) == ("aborted", "max_steps")
    verdict = err[err.index("Verdict") :].splitlines()
    assert verdict[1:] == [
        "  Part 1: No final answer: the lead ended aborted (max_steps): reached the step limit (6); it started 3 "
        "subagents for 4 documents (3 completed); 1 of the 5 files it was asked for holds up.",
        "  Part 2: the batch ended completed: 4 succeeded of 4 items; its own check (the file is not empty) holds "
        "for 3; judged by what they hold, 1 of the 4 summaries holds up.",
        "  results.jsonl: 4 rows, one per item.",
        "  What the model got wrong (7 files):",
        "    report.md: copies 59 words in a row ('you will write report md one line per document once ...') of its "
        "prompt",
        "    summaries/bread.md: not about docs/bread.txt: shares 1 of its words (a summary of it shares at least 5); "
        "copies 8 words in a row ('summarise docs bread txt into summaries bread md') of its task; 8 words: too "
        "short for the two or three sentences asked for",
        "    summaries/coffee.md: not written",
        "    summaries/sleep.md: not about docs/sleep.txt: shares 2 of its words (a summary of it shares at least "
        "5); about the wrong document: shares 18 words with docs/coffee.txt, 2 with its own",
        "    summaries/batch-bikes.md: 160 words for a document of 160: a copy or a ramble, not a summary",
        "    summaries/batch-coffee.md: not about docs/coffee.txt: shares 1 of its words (a summary of it shares at "
        "least 5); 1 word: too short for the two or three sentences asked for",
        "    summaries/batch-sleep.md: empty",
    ]
    assert f"holds: {tmp_path / 'demo' / 'summaries/bikes.md'} (" in err
    assert f"wrong: {tmp_path / 'demo' / 'summaries/coffee.md'}: not written" in err


# -- the pieces ----------------------------------------------------------------------------------


def test_a_fair_summary_of_its_document_holds_up() -> None:
    verdict = judge_summary("summaries/bread.md", a_summary("bread"), "bread", DOCS, task_of("bread"))
    assert verdict.holds, verdict.problems


def test_a_summary_of_another_document_is_called_about_the_wrong_one() -> None:
    verdict = judge_summary("summaries/sleep.md", a_summary("bikes"), "sleep", DOCS, task_of("sleep"))
    assert not verdict.holds
    assert any(p.startswith("about the wrong document: shares") and "docs/bikes.txt" in p for p in verdict.problems)


def test_a_summary_that_repeats_its_instructions_is_called_a_copy() -> None:
    text = f"Here it is. {SUMMARIZER_INSTRUCTIONS} Bread needs flour, water, salt and yeast, kneaded and baked."
    verdict = judge_summary("summaries/bread.md", text, "bread", DOCS, task_of("bread"))
    assert any(
        p.startswith("copies 37 words in a row ('read the document your task names")
        and p.endswith("of its instructions")
        for p in verdict.problems
    )


def test_a_missing_or_blank_file_is_said_to_be_so() -> None:
    assert judge_summary("s.md", None, "bread", DOCS, task_of("bread")).problems == ["not written"]
    assert judge_summary("s.md", " \n", "bread", DOCS, task_of("bread")).problems == ["empty"]
    assert judge_report(None, NAMES, "p").problems == ["not written"]


def test_a_report_that_leaves_documents_out_names_them() -> None:
    verdict = judge_report("bikes: done\nBread: done\n", NAMES, "write report.md")
    assert verdict.problems == ["names 2 of the 4 documents (not coffee, sleep)"]
    assert judge_report("".join(f"{n}: summaries/{n}.md\n" for n in NAMES), NAMES, "p").holds


def test_an_export_without_a_row_per_item_is_said_to_be_short(tmp_path: Path) -> None:
    export = tmp_path / "results.jsonl"
    export.write_text('{"key": "bikes", "status": "succeeded"}\nnot json\n')
    verdict = judge_results(export, NAMES)
    assert verdict.rows == 1 and verdict.statuses == {"succeeded": 1}
    assert verdict.problems == [
        "line 2 is not JSON",
        "its rows are for bikes, not one for each of bikes, bread, coffee, sleep",
    ]
    assert judge_results(tmp_path / "absent.jsonl", NAMES).problems == ["absent.jsonl was not written"]


def test_a_run_that_ends_without_an_answer_prints_why_instead_of_an_empty_final_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedModel([call("read_file", path="a.md"), call("read_file", path="b.md")])
    runtime = Runtime(model=model, workspace=tmp_path, store=False, lead=Lead(max_steps=2))
    run_live(lambda sinks: runtime.run("go", sinks=sinks))
    out = capsys.readouterr().out
    assert "Final answer" not in out
    assert "No final answer: the lead ended aborted (max_steps): reached the step limit (2)." in out


def test_a_run_that_answers_has_no_ending_line(tmp_path: Path) -> None:
    result = Runtime(model=ScriptedModel([reply("done")]), workspace=tmp_path, store=False).run_sync("go")
    assert ending_line(result) is None
