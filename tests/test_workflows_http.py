"""Workflows through the HTTP API: `POST /runs` with a `workflow`, the operator's caps over it,
and another user who cannot see, stop or resume it."""

from __future__ import annotations

import json
from pathlib import Path

from delegate import RunLimits, RuntimeSettings, Store
from tests.test_server_api import client, read_events, serving
from tests.workflow_support import MAP_REVIEW_MERGE, answering, files_args, summary_of

LINE = "300 agents: 290 completed, 96 with every criterion holding, 4 with a criterion not holding, 10 failed"


def test_post_runs_with_a_workflow_runs_a_300_agent_map_review_merge_with_the_right_counts(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    alice_id = next(u.id for u in store.list_users() if u.name == "alice")
    own = RuntimeSettings(workspace=workspace).user_root(alice_id)  # each user works in a folder of her own
    assert own is not None
    own.mkdir(parents=True, exist_ok=True)
    (own / "README.md").write_text("# project\n")
    answer = answering(summary_of)
    limits = RunLimits(max_parallel=64)
    with serving(workspace, store, answer, limits=limits) as server, client(server, tokens["alice"]) as alice:
        body = {"prompt": "review the files", "workflow": MAP_REVIEW_MERGE, "args": files_args(100)}
        response = alice.post("/runs", json=body)
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        events = read_events(alice, f"/runs/{run_id}/events")
        run = alice.get(f"/runs/{run_id}").json()
        with client(server, tokens["bob"]) as bob:
            for method, path in [
                ("GET", f"/runs/{run_id}"),
                ("GET", f"/runs/{run_id}/events"),
                ("POST", f"/runs/{run_id}/cancel"),
                ("POST", f"/runs/{run_id}/resume"),
                ("POST", f"/runs/{run_id}/agents/sub1/stop"),
            ]:
                assert bob.request(method, path).status_code == 404, (method, path)

    assert run["status"] == "completed" and run["prompt"] == "review the files"
    assert run["workflow"]["line"] == LINE and run["final"].startswith(LINE)  # 96 hold, 4 name a missing file
    summarise, review, _ = run["workflow"]["phases"]
    assert (summarise["holding"], summarise["not_holding"], review["failed"]) == (96, 4, 10)
    assert run["result"] == {"accepted": 90, "summaries": 100}
    types = [json.loads(e.data)["type"] for e in events]
    assert types.count("workflow.phase") == 3 and "workflow.completed" in types


def test_a_workflow_request_is_held_to_the_operators_caps(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    answer = answering(lambda t: "ok")
    limits = RunLimits(workflow_agents=2, max_parallel=8)
    with serving(workspace, store, answer, limits=limits) as server, client(server, tokens["alice"]) as alice:
        script = "r = parallel(['t' + str(i) for i in range(5)])\nlen([x for x in r if x])"
        run_id = alice.post("/runs", json={"workflow": script, "max_parallel": 100}).json()["run_id"]
        read_events(alice, f"/runs/{run_id}/events")
        run = alice.get(f"/runs/{run_id}").json()

    assert run["result"] == 2 and run["workflow"]["counts"]["not_started"] == 3


def test_a_request_with_neither_prompt_nor_workflow_is_refused(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as alice:
        response = alice.post("/runs", json={"args": {}})
    assert response.status_code == 422 and "prompt is empty" in response.text
