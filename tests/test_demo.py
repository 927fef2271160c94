"""`delegate demo`: with a capable model (the loopback server plays one) every part runs, writes
and holds up; with a weak one (a function model) the plan tries again the summaries whose checks
do not hold, and the verdict says what it got wrong, summary by summary; the export says per row
whether its summary holds; the demo works in delegate's cache folder, never where it is run."""

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
from delegate.cli._demo import ASK, SUMMARIZER_INSTRUCTIONS, judge_results, judge_summary, run_demo
from delegate.cli._render import ending_line, run_live
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, ScriptedModel, call, reply
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
    return ASK.format(path=f"summaries/{name}.md")


def target_of(task: str) -> tuple[str, str]:
    """The file a summarizer's task names, and its document's name."""
    target, name = re.findall(r"into (summaries/(?:batch-)?([a-z]+)(?:-try\d)?\.md)", task)[0]
    return target, name


# -- the capable model, through the OpenAI protocol, as a user runs it ------------------------------


def capable(body: dict[str, Any]) -> Reply:
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    target, name = target_of(task)
    return Reply(tool_calls=[("write_file", {"path": target, "content": a_summary(name)})])


def test_the_demo_plans_in_code_runs_a_batch_and_every_summary_holds_up_outside_the_folder_it_runs_in(
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
    assert sorted(p.name for p in (ws / "summaries").iterdir()) == sorted(
        [f"{n}.md" for n in NAMES] + [f"batch-{n}.md" for n in NAMES]
    )  # no retry: each held at its first try
    rows = [json.loads(line) for line in (ws / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in rows) == NAMES
    assert all(r["status"] == "succeeded" for r in rows)
    assert all(r["content_check"] == {"holds": True, "problems": []} for r in rows)
    assert f"holds: {ws}/summaries/bikes.md (" in done.stderr
    assert (
        "Part 1: the plan ended completed: it started 4 agents for 4 documents (4 completed, 0 retries); judged by "
        "what they hold, 4 of the 4 summaries hold up" in done.stderr
    )
    assert (
        "Part 2: the batch ended completed: 4 succeeded of 4 items; judged by what they hold, 4 of the 4 summaries "
        "hold up" in done.stderr
    )
    assert "results.jsonl: 4 rows, one per item, each saying whether its summary holds (content_check: 4 hold)." in (
        done.stderr
    )
    assert done.stderr.rstrip().endswith("in both parts).")  # no advice to use a real model: it is one


# -- a weak model, in process: what the plan tries again and what the verdict says ----------------


def weak(request: ModelRequest) -> ModelResponse:
    """Summarizers that go wrong in a different way each: bread copies its task at its first try
    and holds at its second, coffee writes a title at every try, the batch's go wrong three ways."""
    task = request.messages[0].text
    target = target_of(task)[0]
    content = {
        "summaries/bikes.md": a_summary("bikes"),  # holds up
        "summaries/bread.md": task_of("bread"),  # its task, copied
        "summaries/bread-try2.md": a_summary("bread"),  # holds up at the second try
        "summaries/sleep.md": a_summary("coffee"),  # another document's summary, then its own
        "summaries/sleep-try2.md": a_summary("sleep"),
        "summaries/batch-bikes.md": DOCS["bikes"],  # the whole document
        "summaries/batch-bread.md": a_summary("bread"),  # holds up
        "summaries/batch-coffee.md": "Coffee\n",  # a title
        "summaries/batch-sleep.md": "",  # nothing
    }.get(target, "Coffee\n")  # coffee's every try: a title
    return call("write_file", path=target, content=content)


def test_the_plan_tries_again_the_summaries_that_do_not_hold_and_the_verdict_says_what_each_got_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_demo(tmp_path / "demo", FunctionModel(weak))
    err = capsys.readouterr().err
    assert result.status == "completed"
    assert result.workflow is not None
    assert result.workflow["value"]["coffee"] == {
        "file": "summaries/coffee-try4.md",
        "holds": False,
        "problems": ["it names 1 of the text's words; name at least 5", "it has 1 words: too short"],
    }
    assert [a["label"] for a in result.workflow["agents"]] == [
        "bikes", "bread", "coffee", "sleep",
        "bread (try 2)", "coffee (try 2)", "sleep (try 2)",
        "coffee (try 3)", "coffee (try 4)",
    ]  # fmt: skip
    verdict = err[err.index("Verdict") :].splitlines()
    assert verdict[1:] == [
        "  Part 1: the plan ended completed: it started 9 agents for 4 documents (9 completed, 5 retries); judged "
        "by what they hold, 3 of the 4 summaries hold up (each document's last try).",
        "  Part 2: the batch ended completed: 4 succeeded of 4 items; judged by what they hold, 1 of the 4 "
        "summaries holds up (one try each).",
        "  results.jsonl: 4 rows, one per item, each saying whether its summary holds (content_check: 1 hold).",
        "  What the model got wrong (4 summaries):",
        "    summaries/coffee-try4.md: not about docs/coffee.txt: shares 1 of its words (a summary of it shares at "
        "least 5); 1 word: too short for the two or three sentences asked for",
        "    summaries/batch-bikes.md: 160 words for a document of 160: a copy or a ramble, not a summary",
        "    summaries/batch-coffee.md: not about docs/coffee.txt: shares 1 of its words (a summary of it shares at "
        "least 5); 1 word: too short for the two or three sentences asked for",
        "    summaries/batch-sleep.md: empty",
    ]
    assert f"holds: {tmp_path / 'demo' / 'summaries/bread-try2.md'} (" in err
    rows = {r["key"]: r for r in map(json.loads, (tmp_path / "demo" / "results.jsonl").read_text().splitlines())}
    assert rows["bread"]["content_check"] == {"holds": True, "problems": []}
    assert rows["sleep"]["content_check"] == {"holds": False, "problems": ["empty"]}


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
        p.startswith("copies 15 words in a row ('write the summary your task asks for")
        and p.endswith("of its instructions")
        for p in verdict.problems
    )


def test_a_missing_or_blank_file_is_said_to_be_so() -> None:
    assert judge_summary("s.md", None, "bread", DOCS, task_of("bread")).problems == ["not written"]
    assert judge_summary("s.md", " \n", "bread", DOCS, task_of("bread")).problems == ["empty"]


def test_an_export_without_a_row_per_item_is_said_to_be_short(tmp_path: Path) -> None:
    export = tmp_path / "results.jsonl"
    export.write_text('{"key": "bikes", "status": "succeeded"}\nnot json\n')
    verdict = judge_results(export, NAMES)
    assert verdict.rows == 1 and verdict.statuses == {"succeeded": 1}
    assert verdict.problems == [
        "line 2 is not JSON",
        "its rows are for bikes, not one for each of bikes, bread, coffee, sleep",
        "1 row without a content_check",
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
