"""Batches submitted over HTTP run in the server's own worker (on the workspace's SQLite store)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import RuntimeSettings, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, call
from tests.loopback_server import LiveServer


class Summariser:
    """Each item's subagent completes with a summary of its prompt; a 'broken' prompt fails once."""

    def __init__(self) -> None:
        self.broken_left = 1

    def __call__(self, request: ModelRequest) -> ModelResponse:
        prompt = request.messages[0].text
        if "broken" in prompt and self.broken_left:
            self.broken_left -= 1
            raise RuntimeError("the model fell over")
        return call("complete", summary=f"summary of {prompt.split()[0]}")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[httpx2.Client]:
    summariser = Summariser()
    settings = ServerSettings(runtime=RuntimeSettings(workspace=tmp_path), model=lambda _: FunctionModel(summariser))
    with Store.for_workspace(tmp_path) as store:
        _, token = store.add_user("alice")
        with (
            LiveServer(create_app(settings, store=store)) as server,
            httpx2.Client(
                base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
            ) as client,
        ):
            yield client


def follow(api: httpx2.Client, batch_id: str) -> list[tuple[str, dict[str, Any]]]:
    with api.stream("GET", f"/batches/{batch_id}/events") as response:
        return [(e.event, json.loads(e.data)) for e in httpx2.EventSource(response)]


def test_a_batch_runs_to_its_end_in_the_server_and_a_failed_item_can_be_retried(api: httpx2.Client) -> None:
    items = [{"key": key, "prompt": f"{key} please"} for key in ("apples", "pears", "broken")]
    response = api.post("/batches", json={"subagent_type": "general-purpose", "items": items, "max_attempts": 1})
    assert response.status_code == 201
    batch_id = response.json()["id"]

    events = follow(api, batch_id)
    assert events[-1][0] == "batch.status"
    assert events[-1][1]["status"] == "failed"
    assert events[-1][1]["counts"] == {"queued": 0, "running": 0, "succeeded": 2, "failed": 1, "cancelled": 0}
    # Item events are live news from the worker: those that ended before the stream opened are
    # not repeated, but every one sent is right. The counts are the record.
    finished = {(data["key"], data["status"]) for kind, data in events if kind == "batch.item"}
    assert finished <= {("apples", "succeeded"), ("pears", "succeeded"), ("broken", "failed")}

    failed = api.get(f"/batches/{batch_id}/items", params={"status": "failed"}).json()["items"]
    assert [i["key"] for i in failed] == ["broken"]
    assert "the model fell over" in failed[0]["error"]

    retried = api.post(f"/batches/{batch_id}/items/broken/retry").json()
    assert retried["retried"] == 1
    assert follow(api, batch_id)[-1][1]["status"] == "completed"

    rows = [json.loads(line) for line in api.get(f"/batches/{batch_id}/results.jsonl").text.splitlines()]
    assert [(r["key"], r["status"], r["summary"]) for r in rows] == [
        ("apples", "succeeded", "summary of apples"),
        ("pears", "succeeded", "summary of pears"),
        ("broken", "succeeded", "summary of broken"),
    ]
    assert rows[0]["usage"]["input_tokens"] == 10
