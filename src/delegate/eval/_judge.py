"""How an attempt is judged, in code: the task's acceptance criteria checked by the same code that
checks a `task` call's (`delegate.subagents.check_criteria`), and checks on the final answer.

An attempt `succeeded` only when its run `completed`, every criterion `holds` and every answer
check holds. A criterion that could not be checked (`UNVERIFIED`) is no success: it is counted
apart (`unverified`), never as holding. A run that failed, timed out or ran out of budget is a
failure of that arm, kept as one. No model judges.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .._messages import Message
from .._record import ResultSchema
from ..subagents import Baseline, Verdict, check_criteria
from ..workspace import Workspace
from ._suite import AnswerChecks, Task

__all__ = ["check_answer", "judge"]


def check_answer(checks: AnswerChecks, answer: str) -> list[dict[str, Any]]:
    """One verdict per answer check, as `{check, result, evidence}` (`holds` / `does not hold`)."""
    found: list[dict[str, Any]] = []

    def verdict(check: str, holds: bool, evidence: str) -> None:
        found.append({"check": check, "result": "holds" if holds else "does not hold", "evidence": evidence})

    for text in checks.contains:
        verdict(f"contains {text!r}", text in answer, "found" if text in answer else "not in the answer")
    for pattern in checks.regex:
        match = re.search(pattern, answer, re.MULTILINE)
        verdict(f"regex {pattern!r}", match is not None, f"matched {match.group(0)[:80]!r}" if match else "no match")
    if checks.json_schema is not None:
        holds, evidence = _schema(dict(checks.json_schema), answer)
        verdict("json_schema", holds, evidence)
    if checks.exact is not None:
        same = answer.strip() == checks.exact.strip()
        verdict(f"exact {checks.exact[:80]!r}", same, "equal" if same else f"got {answer.strip()[:80]!r}")
    return found


def _schema(schema: dict[str, Any], answer: str) -> tuple[bool, str]:
    text = answer.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError as exc:
        return False, f"the answer is not JSON: {exc}"
    _, problems = ResultSchema(schema, "answer.json_schema").check(value)
    return (False, problems[0][:200]) if problems else (True, "valid")


async def judge(
    task: Task,
    status: str,
    answer: str,
    workspace: Workspace,
    baseline: Baseline,
    transcript: Sequence[Message] = (),
) -> dict[str, Any]:
    """The attempt's judgement: `succeeded`, `status` of its run, `criteria` and `answer` verdicts,
    and `unverified` (how many criteria no check could decide)."""
    verdicts: list[Verdict] = []
    if task.criteria:
        verdicts = await check_criteria(task.criteria, workspace, baseline, transcript=transcript)
    answers = check_answer(task.answer, answer)
    criteria = [{"criterion": v.criterion, "result": v.result, "evidence": v.evidence} for v in verdicts]
    every = [c["result"] for c in criteria] + [a["result"] for a in answers]
    return {
        "succeeded": status == "completed" and all(r == "holds" for r in every),
        "status": status,
        "criteria": criteria,
        "answer": answers,
        "unverified": sum(1 for c in criteria if c["result"] == "UNVERIFIED"),
    }
