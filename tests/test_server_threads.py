"""Threads over HTTP, through a real uvicorn server on loopback: `POST /runs` with `"continue"`,
`GET /threads` and `GET /threads/{id}`, each user's own."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2

from delegate import Store
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import call, is_lead, reply
from tests.durable_support import wait_for
from tests.test_server_api import client, serving

SEEN: list[ModelRequest] = []


def uploads_reader(request: ModelRequest) -> ModelResponse:
    """Lead: one subagent that lists the uploads, then an answer naming the prompt."""
    SEEN.append(request)
    last = request.messages[-1]
    if is_lead(request):
        if last.role == "user":
            return call("task", subagent_type="general-purpose", description="uploads", prompt="list them")
        prompt = next(m.text for m in reversed(request.messages) if m.role == "user" and not m.hidden)
        return reply(f"Answer to {prompt}.")
    if last.role == "user":
        return call("list_uploaded_files")
    return call("complete", summary=f"uploads: {last.tool_results[0].content}")


def _ended(api: httpx2.Client, run_id: str) -> dict[str, Any]:
    return wait_for(lambda: (r := api.get(f"/runs/{run_id}").json())["status"] != "running" and r)


def _start(api: httpx2.Client, **body: Any) -> httpx2.Response:
    return api.post("/runs", json={"prompt": "p", **body})


def test_a_run_continued_over_http_sees_the_thread_and_its_uploads_and_the_thread_reads_back(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    SEEN.clear()
    with serving(workspace, store, uploads_reader) as server, client(server, tokens["alice"]) as api:
        first = _start(api, prompt="read my notes", uploaded_files=[{"filename": "notes.txt", "path": "notes.txt"}])
        first_id = first.json()["run_id"]
        _ended(api, first_id)
        before = len(SEEN)
        second = _start(api, prompt="and the plan", uploaded_files=[{"filename": "plan.md"}], **{"continue": first_id})
        assert second.status_code == 202, second.text
        done = _ended(api, second.json()["run_id"])
        listed = api.get("/threads").json()
        thread = api.get(f"/threads/{first_id}").json()
    assert done["status"] == "completed" and done["final"] == "Answer to and the plan."
    assert (done["thread_id"], done["previous_run_id"]) == (first_id, first_id)
    lead = next(r for r in SEEN[before:] if is_lead(r))
    assert "Answer to read my notes." in json.dumps([m.text for m in lead.messages])
    assert "notes.txt" in done["subagents"][0]["summary"] and "plan.md" in done["subagents"][0]["summary"]

    (line,) = listed["threads"]
    assert (line["thread_id"], line["turns"], line["last_run_id"]) == (first_id, 2, done["run_id"])
    assert line["prompt"] == "read my notes"
    runs = thread["runs"]
    assert [r["run_id"] for r in runs] == [first_id, done["run_id"]]
    assert [(r["prompt"], r["status"], r["final"]) for r in runs] == [
        ("read my notes", "completed", "Answer to read my notes."),
        ("and the plan", "completed", "Answer to and the plan."),
    ]
    total = {k: runs[0]["usage"][k] + runs[1]["usage"][k] for k in ("input_tokens", "output_tokens")}
    assert {k: thread["usage"][k] for k in total} == total == {k: line["usage"][k] for k in total}
    assert [f["filename"] for f in thread["uploaded_files"]] == ["notes.txt", "plan.md"]


def test_another_users_run_and_thread_are_404_and_a_run_continued_twice_is_409(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with (
        serving(workspace, store, lambda r: reply("ok")) as server,
        client(server, tokens["alice"]) as alice,
        client(server, tokens["bob"]) as bob,
    ):
        first_id = _start(alice).json()["run_id"]
        _ended(alice, first_id)
        stolen = _start(bob, **{"continue": first_id})
        assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "not_found"
        assert bob.get(f"/threads/{first_id}").status_code == 404
        assert bob.get("/threads").json()["threads"] == []

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: _start(alice, **{"continue": first_id}), range(2)))
        assert sorted(a.status_code for a in answers) == [202, 409]
        (won,) = [a.json()["run_id"] for a in answers if a.status_code == 202]
        (lost,) = [a.json()["error"] for a in answers if a.status_code == 409]
        assert lost["code"] == "already_continued" and f"was already continued by run {won}" in lost["message"]
        _ended(alice, won)
        runs = alice.get(f"/threads/{first_id}").json()["runs"]
        assert [r["run_id"] for r in runs] == [first_id, won]
        again = _start(alice, **{"continue": first_id})
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_continued"
        assert f"continue the thread's last run, {won}" in again.json()["error"]["message"]
        going = store.create_run(prompt="p", model="m", user_id=store.user_for_token(tokens["alice"]))
        early = _start(alice, **{"continue": going.id})
        assert early.status_code == 409 and early.json()["error"]["code"] == "not_ended"
        assert f"run {going.id} is still running" in early.json()["error"]["message"]
