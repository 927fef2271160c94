"""A batch item runs under every run limit, the cost budget included: the batch's (`--limit`,
`limits` in `POST /batches` and `batch_task`), tightened by the item's own `limits`, within the
runtime's (the operator's caps); bad limits refuse the whole submission."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx2
import sqlalchemy as sa

from delegate import RunLimits, RuntimeSettings, Store
from delegate._config import LOCAL_USER
from delegate.batch import BATCH_MIGRATIONS, Batches
from delegate.server import ServerSettings, create_app
from tests.batch_support import USER
from tests.cli_support import run_cli
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.loopback_server import LiveServer
from tests.test_batch_cli import env_for
from tests.test_cost import priced_model
from tests.test_results import tool_results
from tests.test_server_api import client

BUDGET = 0.00005
"""A few requests of 10 input and 5 output tokens at gpt-4.1-mini's price."""


def lists_forever_unless_done(body: dict[str, Any]) -> Reply | Fault:
    """An item's subagent: one whose prompt says `done` completes after one listing; the others
    list the folder for ever, so only a budget ends them."""
    if tool_results(body) and "done" in json.dumps(body["messages"][1]):
        return Reply(tool_calls=[("complete", {"summary": "finished"})])
    return Reply(tool_calls=[("list_dir", {})])


def test_a_batch_item_with_a_cost_budget_stops_at_it_and_its_record_says_why(tmp_path: Path) -> None:
    lines = [
        {"key": "capped", "prompt": "job"},
        {"key": "looser", "prompt": "job", "limits": {"cost_budget": 1}},  # tightened to the batch's
        {"key": "quick", "prompt": "job done", "limits": {"max_requests": 5}},
    ]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with OpenAIServer(lists_forever_unless_done) as server:
        env = env_for(server.base_url)
        args = ["batch", "submit", str(items), "--type", "general-purpose", "--model", "openai:gpt-4.1-mini"]
        submitted = run_cli([*args, "--max-attempts", "1", "--limit", f"cost_budget={BUDGET}"], env, tmp_path)
    assert submitted.returncode == 1, submitted.stderr
    batch_id = submitted.stdout.strip().splitlines()[-1]
    with Store.for_workspace(tmp_path) as store:  # as `batch export` and `batch items --json` read them
        batches = Batches(store)
        rows = {row["key"]: row for row in batches.export_rows(LOCAL_USER, batch_id)}
        limits = {item.key: item.to_dict()["limits"] for item in batches.items(LOCAL_USER, batch_id)}
    for key in ("capped", "looser"):
        row = rows[key]
        assert (row["status"], row["outcome"], row["record"]["stop_reason"]) == ("failed", "aborted", "run_cost_budget")
        assert "cost budget" in row["error"] and f"${BUDGET:g}" in row["error"]
        assert BUDGET / 2 < row["usage"]["cost_usd"] < BUDGET * 1.5
    assert (rows["quick"]["status"], rows["quick"]["steps"]) == ("succeeded", 2)
    assert limits == {
        "capped": {"cost_budget": BUDGET},
        "looser": {"cost_budget": BUDGET},
        "quick": {"cost_budget": BUDGET, "max_requests": 5},
    }


def test_bad_batch_limits_are_refused_saying_which_and_submit_nothing(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"key": "a", "prompt": "p", "limits": {"cost_budget": 0}}) + "\n")
    base = ["batch", "submit", str(items), "--type", "general-purpose", "--model", "openai:m", "--detach"]
    env = env_for("http://127.0.0.1:9")
    refused = run_cli([*base, "--limit", "speed=3"], env, tmp_path)
    assert refused.returncode == 2
    said = "items.jsonl:1: limits: RunLimits cost_budget=0: give positive US dollars, or leave it out (null in JSON)"
    assert said in refused.stderr and "None" not in refused.stderr  # Python's word, not the user's
    assert "limits: unknown limit(s) 'speed'; the run limits are timeout, token_budget" in refused.stderr
    with Store.for_workspace(tmp_path) as store:
        assert Batches(store).list_batches(LOCAL_USER) == []


def test_the_servers_cost_cap_holds_over_a_batch_that_asks_for_more(tmp_path: Path) -> None:
    with OpenAIServer(lists_forever_unless_done) as upstream, Store.for_workspace(tmp_path) as store:
        model = priced_model(upstream)
        runtime = RuntimeSettings(workspace=tmp_path, limits=RunLimits(cost_budget=BUDGET))
        settings = ServerSettings(runtime=runtime, model=lambda _: model)
        token = store.add_user("alice")[1]
        with LiveServer(create_app(settings, store=store)) as server, client(server, token) as api:
            bad = api.post(
                "/batches",
                json={"type": "general-purpose", "items": [{"key": "a", "prompt": "p"}], "limits": {"cost_budget": -1}},
            )
            unknown = api.post(
                "/batches",
                json={"type": "general-purpose", "items": [{"key": "a", "prompt": "p", "limits": {"speed": 3}}]},
            )
            nothing = api.get("/batches").json()
            body = {
                "type": "general-purpose",
                "items": [{"key": "greedy", "prompt": "job", "limits": {"cost_budget": 10}}],
                "limits": {"cost_budget": 5},
                "max_attempts": 1,
            }
            batch_id = api.post("/batches", json=body).json()["id"]
            batch = wait_done(api, batch_id)
            rows = [json.loads(line) for line in api.get(f"/batches/{batch_id}/results.jsonl").text.splitlines()]
    assert bad.status_code == 422 and "limits: RunLimits cost_budget=-1: give positive US dollars, or leave" in bad.text
    assert "None" not in bad.text
    assert unknown.status_code == 422 and "item 0: limits: unknown limit(s) 'speed'" in unknown.text
    assert nothing["batches"] == []
    assert batch["status"] == "failed"
    [row] = rows
    assert (row["outcome"], row["record"]["stop_reason"]) == ("aborted", "run_cost_budget")
    assert f"${BUDGET:g}" in row["error"]  # the operator's cap, not the $5 or $10 asked for


def wait_done(api: httpx2.Client, batch_id: str, deadline: float = 60.0) -> dict[str, Any]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        batch = api.get(f"/batches/{batch_id}").json()
        if batch["status"] in ("completed", "failed", "cancelled"):
            return batch
        time.sleep(0.05)
    raise AssertionError(f"batch {batch_id} did not end within {deadline}s")


def test_an_items_budgets_stored_before_limits_are_its_limits_after_the_migration(store_url: str) -> None:
    store = Store.open(store_url)
    try:
        store.migrate(BATCH_MIGRATIONS[:6])
        assert BATCH_MIGRATIONS[6].name == "batch.0007_item_limits"
        now = "2026-12-01T00:00:00+00:00"
        batch = {"id": "b1", "user_id": USER, "title": "t", "subagent_type": "explore", "max_running": 1}
        batch |= {"max_live": 1, "max_attempts": 1, "state": "active", "item_count": 2, "created_at": now}
        item = {"batch_id": "b1", "prompt": "p", "status": "queued", "created_at": now, "max_requests": None}
        with store.write() as conn:
            conn.execute(sa.table("batches", *map(sa.column, batch)).insert(), [batch])
            rows = [
                item | {"seq": 0, "key": "a", "token_budget": 500},
                item | {"seq": 1, "key": "b", "token_budget": None},
            ]
            conn.execute(sa.table("batch_items", *map(sa.column, rows[0])).insert(), rows)
        items = Batches(store).items(USER, "b1")
        assert [i.limits for i in items] == [{"token_budget": 500}, {}]
    finally:
        store.close()
