"""The shipped suite (`delegate eval sample`): it reads, and runs through the machinery against a
scripted fake model (the machinery, not a model's quality): the facts it answers right hold, the
work it does not do does not."""

from __future__ import annotations

import asyncio
from pathlib import Path

from delegate import RuntimeSettings, Store
from delegate.eval import Arm, Evaluation, load_suite
from delegate.models import ModelRequest, ModelResponse
from delegate.run import attempt_factory
from delegate.testing import FunctionModel, reply

FACTS = {
    "How many items": "500",
    "which currency": "EUR",
    "which city": "Lyon",
    "How many suppliers": "3",
    "one JSON object": '{"warehouse": "Lyon", "port": 8089, "open_days": 6}',
    "sells pears": "Les Poiriers, 0.55",
}


def knowing_facts(request: ModelRequest) -> ModelResponse:
    task = request.messages[0].text
    return reply(next((a for q, a in FACTS.items() if q.lower() in task.lower()), "I did nothing."))


def test_the_shipped_suite_runs_and_is_judged_in_code(tmp_path: Path) -> None:
    suite = load_suite("sample")
    assert len(suite.tasks) == 12 and [a.name for a in suite.arms] == ["single", "delegation"]
    assert all(t.workspace is not None and Path(t.workspace, "README.md").is_file() for t in suite.tasks)
    ws = tmp_path / "ws"
    ws.mkdir()
    with Store.for_workspace(ws) as store:
        factory = attempt_factory(RuntimeSettings(workspace=ws, model=FunctionModel(knowing_facts)), store)
        arms = [Arm(name="single", mode="single")]
        evaluation = Evaluation.create(store, suite, arms, factory, ws / ".delegate" / "evals", max_parallel=4)
        report = asyncio.run(evaluation.run())

    outcomes = {a["task"]: a["succeeded"] for a in report.attempts}
    assert report.status == "completed" and outcomes == {t.id: t.id in list(outcomes)[:6] for t in suite.tasks}
    fixed = next(a for a in report.attempts if a["task"] == "fix-total")
    assert [c["result"] for c in fixed["criteria"]] == ["does not hold", "UNVERIFIED"]  # no commands: not run
