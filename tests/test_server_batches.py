"""The batch routes of the HTTP API, through a real uvicorn server on loopback.

These tests run the server without its batch worker, so items stay queued and every state is
deterministic; `test_server_batch_worker.py` runs items for real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import RuntimeSettings, Store
from delegate.server import ServerSettings, create_app
from tests.loopback_server import LiveServer
from tests.test_server_api import client


@pytest.fixture
def server(workspace: Path, store: Store) -> Iterator[LiveServer]:
    app = create_app(
        ServerSettings(runtime=RuntimeSettings(workspace=workspace, model="local"), run_batches=False), store=store
    )
    with LiveServer(app) as running:
        yield running


@pytest.fixture
def alice(server: LiveServer, tokens: dict[str, str]) -> Iterator[httpx2.Client]:
    with client(server, tokens["alice"]) as api:
        yield api


def items(n: int) -> list[dict[str, Any]]:
    return [{"key": f"doc-{i}", "prompt": f"summarise doc {i}"} for i in range(n)]


def submit(api: httpx2.Client, n: int = 3, **body: Any) -> dict[str, Any]:
    response = api.post("/batches", json={"subagent_type": "general-purpose", "items": items(n), **body})
    assert response.status_code == 201, response.text
    return response.json()


def test_a_submitted_batch_is_listed_with_its_counts_and_items(alice: httpx2.Client) -> None:
    batch = submit(alice, 3, title="Docs", max_running_items=2)
    assert batch["status"] == "running"
    assert batch["title"] == "Docs"
    assert batch["total"] == 3
    assert batch["counts"]["queued"] == 3
    assert batch["max_running_items"] == 2

    assert [b["id"] for b in alice.get("/batches").json()["batches"]] == [batch["id"]]
    assert alice.get(f"/batches/{batch['id']}").json() == batch
    page = alice.get(f"/batches/{batch['id']}/items", params={"status": "queued", "offset": 1, "limit": 1}).json()
    assert [(i["key"], i["status"], i["prompt"]) for i in page["items"]] == [("doc-1", "queued", "summarise doc 1")]
    assert alice.get(f"/batches/{batch['id']}/items", params={"status": "failed"}).json()["items"] == []


def test_the_cli_name_type_is_accepted_for_the_subagent_type(alice: httpx2.Client) -> None:
    response = alice.post("/batches", json={"type": "explore", "items": items(1)})
    assert response.status_code == 201
    assert response.json()["subagent_type"] == "explore"


def test_a_bad_batch_is_refused_with_every_problem_and_nothing_is_stored(alice: httpx2.Client) -> None:
    response = alice.post(
        "/batches",
        json={
            "subagent_type": "nosuch",
            "items": [{"key": "a", "prompt": "x"}, {"key": "a", "prompt": ""}, {"key": "", "prompt": "y"}],
            "max_running_items": 0,
        },
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_batch"
    assert "nothing was stored" in error["message"]
    problems = " | ".join(error["problems"])
    assert "unknown subagent_type 'nosuch'; available: explore, general-purpose" in problems
    assert "empty prompt" in problems
    assert "empty key" in problems
    assert "max_running_items is 0" in problems
    assert alice.get("/batches").json()["batches"] == []


def test_a_batch_item_with_a_number_key_or_a_field_given_twice_is_refused_and_nothing_is_stored(
    alice: httpx2.Client,
) -> None:
    headers = {"Content-Type": "application/json"}
    items = '[{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q", "prompt": "r"}]'
    twice = f'{{"subagent_type": "explore", "items": {items}}}'
    repeated = alice.post("/batches", content=twice, headers=headers)
    top = alice.post("/batches", content='{"subagent_type": "explore", "items": [], "items": []}', headers=headers)
    number = alice.post("/batches", json={"subagent_type": "explore", "items": [{"key": 1, "prompt": "p"}]})
    assert (repeated.status_code, top.status_code, number.status_code) == (422, 422, 422)
    assert "item 1: field(s) 'prompt' given more than once" in " | ".join(repeated.json()["error"]["problems"])
    assert "the body gives 'items' more than once" in top.json()["error"]["message"]
    assert "item 0: key is a number (1); a key is a string" in " | ".join(number.json()["error"]["problems"])
    assert alice.get("/batches").json()["batches"] == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"items": []}, "subagent_type: Field required"),
        ({"subagent_type": "explore"}, "items: Field required"),
        ({"subagent_type": "explore", "items": [], "colour": "red"}, "colour: Extra inputs are not permitted"),
        ({"subagent_type": "explore", "items": "a.jsonl"}, "items: Input should be a valid list"),
    ],
)
def test_a_malformed_batch_request_answers_422_saying_what_to_fix(
    alice: httpx2.Client, body: dict[str, Any], expected: str
) -> None:
    response = alice.post("/batches", json=body)
    assert response.status_code == 422
    assert expected in response.json()["error"]["message"]
    assert alice.get("/batches").json()["batches"] == []


def test_a_batch_with_an_unknown_model_is_refused(alice: httpx2.Client) -> None:
    response = alice.post("/batches", json={"subagent_type": "explore", "items": items(1), "model": "nosuch:x"})
    assert response.status_code == 400
    assert "unknown model provider" in response.json()["error"]["message"]
    assert alice.get("/batches").json()["batches"] == []


def test_a_batch_may_name_its_model_by_an_alias_as_definitions_do(alice: httpx2.Client) -> None:
    response = alice.post("/batches", json={"subagent_type": "explore", "items": items(1), "model": "sonnet"})
    assert response.status_code in (200, 201), response.text
    assert [b["id"] for b in alice.get("/batches").json()["batches"]] == [response.json()["id"]]


def test_pause_resume_and_cancel_change_the_batch_and_a_cancelled_batch_stays_so(alice: httpx2.Client) -> None:
    batch_id = submit(alice)["id"]
    assert alice.post(f"/batches/{batch_id}/pause").json()["status"] == "paused"
    assert alice.post(f"/batches/{batch_id}/resume").json()["status"] == "running"
    cancelled = alice.post(f"/batches/{batch_id}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["counts"]["cancelled"] == 3

    resumed = alice.post(f"/batches/{batch_id}/resume")
    assert resumed.status_code == 409
    assert "cancelled" in resumed.json()["error"]["message"]
    retried = alice.post(f"/batches/{batch_id}/retry")
    assert retried.status_code == 409


def test_retrying_an_item_that_did_not_fail_or_does_not_exist_is_refused(alice: httpx2.Client) -> None:
    batch_id = submit(alice)["id"]
    queued = alice.post(f"/batches/{batch_id}/items/doc-0/retry")
    assert queued.status_code == 409
    assert "only failed items can be retried" in queued.json()["error"]["message"]
    missing = alice.post(f"/batches/{batch_id}/items/nosuch/retry")
    assert missing.status_code == 404
    assert "no item 'nosuch'" in missing.json()["error"]["message"]
    assert alice.post(f"/batches/{batch_id}/retry").json()["retried"] == 0


def test_an_unknown_item_status_filter_answers_422(alice: httpx2.Client) -> None:
    batch_id = submit(alice)["id"]
    response = alice.get(f"/batches/{batch_id}/items", params={"status": "done"})
    assert response.status_code == 422
    assert "use one of queued, running, succeeded, failed, cancelled" in response.json()["error"]["message"]
    assert alice.get(f"/batches/{batch_id}/items", params={"limit": 0}).status_code == 422


def test_results_export_one_json_line_per_item(alice: httpx2.Client) -> None:
    batch_id = submit(alice, 4)["id"]
    alice.post(f"/batches/{batch_id}/cancel")
    response = alice.get(f"/batches/{batch_id}/results.jsonl")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    assert f'filename="batch-{batch_id}.jsonl"' in response.headers["content-disposition"]
    rows = [json.loads(line) for line in response.text.splitlines()]
    assert [r["key"] for r in rows] == ["doc-0", "doc-1", "doc-2", "doc-3"]
    assert {r["status"] for r in rows} == {"cancelled"}
    assert {"key", "status", "attempts", "summary", "artifacts", "usage", "acceptance"} <= set(rows[0])


def test_batch_events_report_the_status_and_end_once_the_batch_is_done(alice: httpx2.Client) -> None:
    batch_id = submit(alice)["id"]
    seen: list[httpx2.ServerSentEvent] = []
    with alice.stream("GET", f"/batches/{batch_id}/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in httpx2.EventSource(response):
            seen.append(event)
            if len(seen) == 1:
                alice.post(f"/batches/{batch_id}/cancel")
    statuses = [json.loads(e.data) for e in seen if e.event == "batch.status"]
    assert statuses[0]["status"] == "running" and statuses[0]["counts"]["queued"] == 3
    assert statuses[-1]["status"] == "cancelled" and statuses[-1]["counts"]["cancelled"] == 3


def test_another_users_batch_is_not_found_anywhere(
    alice: httpx2.Client, server: LiveServer, tokens: dict[str, str]
) -> None:
    batch_id = submit(alice)["id"]
    with client(server, tokens["bob"]) as bob:
        for method, path in [
            ("GET", f"/batches/{batch_id}"),
            ("GET", f"/batches/{batch_id}/items"),
            ("POST", f"/batches/{batch_id}/pause"),
            ("POST", f"/batches/{batch_id}/resume"),
            ("POST", f"/batches/{batch_id}/cancel"),
            ("POST", f"/batches/{batch_id}/retry"),
            ("POST", f"/batches/{batch_id}/items/doc-0/retry"),
            ("GET", f"/batches/{batch_id}/results.jsonl"),
            ("GET", f"/batches/{batch_id}/events"),
        ]:
            response = bob.request(method, path)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"]["code"] == "not_found"
        assert bob.get("/batches").json()["batches"] == []
    assert alice.get(f"/batches/{batch_id}").json()["status"] == "running"
