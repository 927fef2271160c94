"""`delegate eval` through the real CLI, against the loopback OpenAI-compatible server: the counts
the criteria decide, the JSON and HTML reports, the runs it tags, equal budgets."""

from __future__ import annotations

import json
from pathlib import Path

from delegate import Store
from tests.cli_support import run_cli
from tests.eval_support import EXPECTED, REQUESTS, answer, write_suite
from tests.loopback_openai import OpenAIServer
from tests.test_batch_cli import env_for

MODEL = "openai:loopback-model"


def test_three_tasks_by_two_arms_twice_give_the_counts_the_criteria_decide(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    html = tmp_path / "report.html"
    args = ["eval", str(suite), "--arm", "single=single", "--arm", "delegation=delegation", "--repeat", "2"]
    with OpenAIServer(answer()) as server:
        done = run_cli([*args, "-m", MODEL, "-w", str(ws), "--json", "--html", str(html)], env=env_for(server.base_url))
        served = server.total_usage

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "completed" and report["repeat"] == 2
    arms = {a["arm"]: a for a in report["arms"]}
    assert arms["single"]["succeeded"] == 4 and arms["single"]["judged"] == 6
    assert arms["delegation"]["succeeded"] == 2 and arms["delegation"]["failed_runs"] == 2
    assert 0 < arms["delegation"]["ci95"][0] < 1 / 3 < arms["delegation"]["ci95"][1] < 1
    assert {t["task"]: {a: c["succeeded"] for a, c in t["arms"].items()} for t in report["tasks"]} == {
        task: {arm: EXPECTED[arm][task] for arm in EXPECTED} for task in ("notes", "answer", "missing")
    }
    failed = [a for a in report["attempts"] if a["arm"] == "delegation" and a["task"] == "answer"]
    assert [c["result"] for c in failed[0]["answer"]] == ["does not hold", "does not hold"]
    missing = [a for a in report["attempts"] if a["arm"] == "single" and a["task"] == "missing"]
    assert missing[0]["status"] == "completed" and missing[0]["criteria"][0]["result"] == "does not hold"
    for attempt in report["attempts"]:
        paid = REQUESTS[attempt["arm"], attempt["task"]]
        assert attempt["usage"]["input_tokens"] == 10 * paid and attempt["usage"]["output_tokens"] == 5 * paid
    total = sum(a["tokens"]["total"] for a in report["arms"])
    assert total == served.prompt_tokens + served.completion_tokens

    shown = run_cli(["runs", "show", report["attempts"][0]["run_id"], "--json", "-w", str(ws)])
    assert json.loads(shown.stdout)["eval"] == {
        "eval_id": report["eval_id"],
        "arm": "single",
        "task": "notes",
        "attempt": 1,
    }
    page = html.read_text()
    assert page.count("<svg") == 2 and "<script" not in page and "http" not in page.replace("http-equiv", "")
    assert "delegation" in page and "notes" in page

    table = run_cli(["eval", "show", "-w", str(ws)])
    assert table.returncode == 0 and "single" in table.stdout and "4/6" in table.stdout
    compared = run_cli(["eval", "compare", "single", "delegation", "--json", "-w", str(ws)])
    assert json.loads(compared.stdout)["success"]["difference"] == round(4 / 6 - 2 / 6, 4)


def test_equal_budget_gives_every_arm_the_smallest_budget_any_arm_sets(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    arms = ["--arm", "single=single,token_budget=900", "--arm", "delegation=delegation,token_budget=5000"]
    with OpenAIServer(answer()) as server:
        done = run_cli(
            ["eval", str(suite), *arms, "--equal-budget", "tokens", "-m", MODEL, "-w", str(ws), "--json"],
            env=env_for(server.base_url),
        )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["budget"] == {"kind": "tokens", "value": 900}
    assert {a["options"] for a in report["arms"]} >= {"single,model=openai:loopback-model,token_budget=900"}
    store = Store.for_workspace(ws)
    limits = {store.get_run(a["run_id"]).limits["token_budget"] for a in report["attempts"]}  # type: ignore[union-attr]
    assert limits == {900}
