"""Evals through the HTTP API: a user's eval, its report and page, and another user who cannot see
it or the runs that are its attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from delegate import RuntimeSettings, Store
from delegate.eval import Arm, Evaluation, load_suite
from delegate.models import ModelRequest, ModelResponse
from delegate.run import attempt_factory
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.eval_support import write_suite
from tests.test_server_api import client, serving


def answering(request: ModelRequest) -> ModelResponse:
    """The single agent writes notes.md when asked for it and answers 42 to anything else."""
    if is_lead(request) and "notes.md" in request.messages[0].text and request.messages[-1].role == "user":
        return call("write_file", path="notes.md", content="notes\n")
    return reply("42")


def test_another_user_cannot_see_an_eval_or_its_attempts(workspace: Path, store: Store, tmp_path: Path) -> None:
    alice, alice_token = store.add_user("alice")
    _, bob_token = store.add_user("bob")
    settings = RuntimeSettings(workspace=workspace, model=FunctionModel(answering))
    root = settings.user_root(alice)
    assert root is not None
    factory = attempt_factory(settings, store, user_id=alice)
    suite = load_suite(write_suite(tmp_path))
    arms = [Arm(name="single", mode="single")]
    evaluation = Evaluation.create(store, suite, arms, factory, root / ".delegate" / "evals", user_id=alice)
    report = asyncio.run(evaluation.run())
    assert report.status == "completed" and report.arms[0].succeeded == 2  # notes and answer; nobody makes missing.txt
    run_id = report.attempts[0]["run_id"]

    with serving(workspace, store) as server, client(server, alice_token) as api, client(server, bob_token) as other:
        mine = api.get("/evals").json()["evals"]
        shown = api.get(f"/evals/{evaluation.id}")
        page = api.get(f"/evals/{evaluation.id}/report.html")
        run = api.get(f"/runs/{run_id}")
        assert other.get("/evals").json()["evals"] == []
        for path in (f"/evals/{evaluation.id}", f"/evals/{evaluation.id}/report.html", f"/runs/{run_id}"):
            assert other.get(path).status_code == 404, path

    assert [e["eval_id"] for e in mine] == [evaluation.id] and mine[0]["arms"]["single"] == {
        "succeeded": 2,
        "judged": 3,
    }
    assert shown.status_code == 200 and shown.json()["attempts"][0]["run_id"] == run_id
    assert page.status_code == 200 and page.text.count("<svg") == 2
    assert run.json()["eval"] == {"eval_id": evaluation.id, "arm": "single", "task": "notes", "attempt": 1}
