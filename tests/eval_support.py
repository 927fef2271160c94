"""A small suite and a scripted model for `delegate eval` tests: three tasks, whose outcome each arm
decides by what the scripted model does (see `answer`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from delegate.testing import is_lead
from tests.loopback_openai import Fault, Reply

SUITE = """\
name: small
tasks:
  - id: notes
    prompt: "Write notes.md saying what the project is."
    files:
      README.md: "# sample project\\n"
    criteria: ["file:notes.md non-empty"]
  - id: answer
    prompt: "What is six times seven? Answer with the number."
    answer:
      contains: "42"
      regex: "\\\\b42\\\\b"
  - id: missing
    prompt: "Make missing.txt."
    criteria: ["file:missing.txt exists"]
"""

REQUESTS = {
    ("single", "notes"): 2,
    ("single", "answer"): 1,
    ("single", "missing"): 1,
    ("delegation", "notes"): 4,
    ("delegation", "answer"): 1,
    ("delegation", "missing"): 0,
}
"""How many answers (of 10 + 5 tokens each) an attempt of each arm and task is paid for."""

EXPECTED = {"single": {"notes": 2, "answer": 2, "missing": 0}, "delegation": {"notes": 2, "answer": 0, "missing": 0}}
"""Successes of each arm on each task, out of 2: the single agent writes the notes and answers 42;
the delegating lead writes the notes through a subagent, answers 41 (an answer check does not
hold), and its model refuses the third task (a run that errs, a failure kept as one); nobody makes
missing.txt (a criterion that does not hold)."""


def write_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    return suite


def _first_user(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


def answer(slow: float = 0.0) -> Any:
    """The scripted model of every arm: see `EXPECTED`. With `slow`, each answer of the delegating
    arm's notes task (the lead's and its subagent's) takes that many seconds."""

    def reply(body: dict[str, Any]) -> Reply | Fault:
        tools = {t["function"]["name"] for t in body.get("tools") or []}
        prompt = _first_user(body)
        if slow and ("notes.md" in prompt or "write notes" in prompt) and ("task" in tools or not is_lead(body)):
            time.sleep(slow)
        answered = body["messages"][-1]["role"] == "tool"
        if not is_lead(body):  # the delegating lead's subagent
            if answered:
                return Reply(tool_calls=[("complete", {"summary": "wrote notes.md"})])
            return Reply(tool_calls=[("write_file", {"path": "notes.md", "content": "A sample project.\n"})])
        delegating = "task" in tools
        if "six times seven" in prompt:
            return Reply(content="41" if delegating else "The answer is 42.")
        if "missing.txt" in prompt:
            return Fault(400, "the model refuses") if delegating else Reply(content="I cannot.")
        if answered:
            return Reply(content="Done: notes.md written.")
        if delegating:
            call = {"subagent_type": "general-purpose", "description": "write notes", "prompt": prompt}
            return Reply(tool_calls=[("task", call)])
        return Reply(tool_calls=[("write_file", {"path": "notes.md", "content": "A sample project.\n"})])

    return reply
