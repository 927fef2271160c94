"""The HTTP API of `delegate serve`, through a real uvicorn server on loopback, with fake models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import LoopGuard, LoopSettings, RuntimeSettings, Store
from delegate._record import Status, TaskOutput
from delegate._usage import Usage
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, call, is_lead, reply, respond
from tests.loopback_server import LiveServer

Answer = Callable[[ModelRequest], Any]


def fruit_counting(request: ModelRequest) -> ModelResponse:
    """Lead: two subagents in one turn, then a final answer. Subagents: complete at once."""
    if is_lead(request):
        if request.messages[-1].role == "user":
            return respond(
                [
                    ("task", {"subagent_type": "general-purpose", "description": "count apples", "prompt": "apples"}),
                    ("task", {"subagent_type": "general-purpose", "description": "count pears", "prompt": "pears"}),
                ]
            )
        return reply("3 apples and 4 pears")
    return call("complete", summary=f"counted {request.messages[0].text}")


async def stuck_subagents(request: ModelRequest) -> ModelResponse:
    """Like `fruit_counting`, but the subagents never answer: a run to cancel."""
    if not is_lead(request):
        await asyncio.sleep(60)
    return fruit_counting(request)


@contextmanager
def serving(workspace: Path, store: Store, answer: Answer = fruit_counting, **settings: Any) -> Iterator[LiveServer]:
    model = lambda name: FunctionModel(answer)  # noqa: E731 - a fresh fake per run
    config = ServerSettings(runtime=RuntimeSettings(workspace=workspace, **settings), model=model, run_batches=False)
    with LiveServer(create_app(config, store=store)) as server:
        yield server


@contextmanager
def client(server: LiveServer, token: str | None) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as opened:
        yield opened


def read_events(api: httpx2.Client, path: str, **kwargs: Any) -> list[httpx2.ServerSentEvent]:
    with api.stream("GET", path, **kwargs) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(httpx2.EventSource(response))


def start(api: httpx2.Client, prompt: str = "count the fruit", **body: Any) -> str:
    response = api.post("/runs", json={"prompt": prompt, **body})
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "running"
    return response.json()["run_id"]


# -- auth -----------------------------------------------------------------------------------------


def test_calls_without_a_token_or_with_an_unknown_one_answer_401_saying_how_to_get_one(
    workspace: Path, store: Store
) -> None:
    calls = [
        ("POST", "/runs"),
        ("GET", "/runs"),
        ("GET", "/runs/run_x"),
        ("GET", "/runs/run_x/events"),
        ("POST", "/runs/run_x/cancel"),
        ("GET", "/agents"),
        ("POST", "/batches"),
        ("GET", "/batches"),
        ("GET", "/batches/b/items"),
        ("GET", "/batches/b/results.jsonl"),
        ("POST", "/batches/b/pause"),
    ]
    with serving(workspace, store) as server:
        for token in (None, "not-a-token"):
            with client(server, token) as api:
                for method, path in calls:
                    response = api.request(method, path, json={"prompt": "hi"} if method == "POST" else None)
                    assert response.status_code == 401, (method, path, response.text)
                    assert response.headers["www-authenticate"] == "Bearer"
                    message = response.json()["error"]["message"]  # what an HTTP user can do: ask
                    assert "ask the server's operator" in message and "delegate users add" in message
        with client(server, None) as api:
            basic = api.get("/runs", headers={"Authorization": "Basic YWxpY2U6eA=="})
            assert basic.status_code == 401
            assert "Bearer" in basic.json()["error"]["message"]


def test_another_users_run_is_not_found_anywhere(workspace: Path, store: Store, tokens: dict[str, str]) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as alice:
        run_id = start(alice)
        read_events(alice, f"/runs/{run_id}/events")
        with client(server, tokens["bob"]) as bob:
            for method, path in [
                ("GET", f"/runs/{run_id}"),
                ("GET", f"/runs/{run_id}/events"),
                ("POST", f"/runs/{run_id}/cancel"),
            ]:
                response = bob.request(method, path)
                assert response.status_code == 404, (method, path)
                assert response.json()["error"]["code"] == "not_found"
            assert bob.get("/runs").json()["runs"] == []
        assert [r["run_id"] for r in alice.get("/runs").json()["runs"]] == [run_id]


# -- runs -----------------------------------------------------------------------------------------


def test_the_run_list_shows_each_run_as_get_run_does_newest_first_with_its_prompt_cut_at_200_characters(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    alice, bob = (store.user_for_token(tokens[name]) for name in ("alice", "bob"))
    long = "Résumé of 日本語 text, " * 20  # 400 characters, not ASCII: cut at 200 characters, not bytes
    done = store.create_run(prompt=long, model="openai:gpt-x", user_id=alice)
    store.finish_run(done.id, "completed", "the answer " * 500, Usage(input_tokens=12, output_tokens=3))
    failed = store.create_run(prompt="fails", model="test", user_id=alice)
    store.finish_run(failed.id, "error", error="boom")
    going = store.create_run(prompt="still going", model="test", user_id=alice)  # its owner, this process, lives
    store.create_run(prompt="bob's", model="test", user_id=bob)
    listed_keys = (
        "run_id",
        "status",
        "prompt",
        "model",
        "usage",
        "created_at",
        "completed_at",
        "thread_id",
        "previous_run_id",
    )
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        listed = api.get("/runs").json()
        shown = [api.get(f"/runs/{run.id}").json() for run in (going, failed, done)]
        paged = api.get("/runs", params={"offset": 1, "limit": 1}).json()
    counts = {"subagent_count": 0, "failed_subagents": 0, "running_subagents": 0}
    expected = [{key: run[key] for key in listed_keys} | {"prompt": run["prompt"][:200]} | counts for run in shown]
    assert listed == {"runs": expected, "offset": 0}
    assert [r["status"] for r in listed["runs"]] == ["running", "error", "completed"]
    assert listed["runs"][2]["prompt"] == long[:200]
    assert listed["runs"][2]["usage"] == {**Usage().to_dict(), "input_tokens": 12, "output_tokens": 3}
    assert paged == {"runs": [expected[1]], "offset": 1}


def test_the_run_list_searches_prompts_filters_by_status_pages_and_counts_failed_subagents(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    alice, bob = (store.user_for_token(tokens[name]) for name in ("alice", "bob"))
    for n in range(5):
        run = store.create_run(prompt=f"Summarise REPORT {n} (100% of it)", model="test", user_id=alice)
        store.finish_run(run.id, "completed" if n % 2 else "error", "done")
    counted = store.create_run(prompt="count the fruit", model="test", user_id=alice)
    store.add_subagent_records(
        counted.id,
        [subagent_record("a", "completed"), subagent_record("b", "error"), subagent_record("c", "timed_out")],
    )
    store.finish_run(counted.id, "completed", "3 apples")
    store.create_run(prompt="bob's report", model="test", user_id=bob)
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:

        def prompts(**params: Any) -> list[str]:
            response = api.get("/runs", params=params)
            assert response.status_code == 200, response.text
            return [run["prompt"] for run in response.json()["runs"]]

        searched = prompts(q="report")
        literal = prompts(q="100%")
        nothing = prompts(q="0%_")
        errors = prompts(status="error")
        searched_errors = prompts(q="report 2", status="error")
        first, second = prompts(q="report", limit=2), prompts(q="report", limit=2, offset=2)
        row = api.get("/runs", params={"q": "fruit"}).json()["runs"][0]
        bad = [api.get("/runs", params=params) for params in ({"status": "done"}, {"limit": 501}, {"offset": -1})]
    reports = [f"Summarise REPORT {n} (100% of it)" for n in (4, 3, 2, 1, 0)]
    assert searched == reports  # any case, newest first, never bob's
    assert literal == reports
    assert nothing == []  # `%` and `_` match themselves
    assert errors == [reports[0], reports[2], reports[4]]
    assert searched_errors == [reports[2]]
    assert (first, second) == (reports[:2], reports[2:4])
    assert (row["subagent_count"], row["failed_subagents"]) == (3, 2)
    assert [response.status_code for response in bad] == [422, 422, 422]
    assert all(response.json()["error"]["code"] == "invalid_request" for response in bad)
    assert "status" in bad[0].json()["error"]["message"]


def test_me_names_the_user_holding_the_token(workspace: Path, store: Store, tokens: dict[str, str]) -> None:
    with serving(workspace, store) as server:
        with client(server, tokens["bob"]) as api:
            me = api.get("/me")
        with client(server, "not-a-token") as api:
            stranger = api.get("/me")
    assert (me.status_code, me.json()) == (200, {"name": "bob"})
    assert stranger.status_code == 401


def subagent_record(agent_id: str, status: Status) -> TaskOutput:
    return TaskOutput(
        id=agent_id,
        type="general-purpose",
        description=agent_id,
        tool_call_id=None,
        parent_agent_id="lead",
        status=status,
        stop_reason=None,
        summary="",
        started_at=datetime.now(UTC),
    )


def test_a_run_answers_202_then_reports_its_final_answer_usage_and_subagents(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        response = api.post("/runs", json={"prompt": "count the fruit", "max_parallel": 2})
        assert response.status_code == 202
        run_id = response.json()["run_id"]
        assert response.headers["location"] == f"/api/v1/runs/{run_id}"
        assert api.get(f"/runs/{run_id}").status_code == 200  # readable as soon as it is announced
        events = read_events(api, f"/runs/{run_id}/events")
        run = api.get(f"/runs/{run_id}").json()

    assert json.loads(events[-1].data)["data"]["final"] == "3 apples and 4 pears"
    assert run["status"] == "completed"
    assert run["final"] == "3 apples and 4 pears"
    assert run["prompt"] == "count the fruit"
    # lead: 2 turns, subagents: 1 each; every usage field, the cost unknown (a fake model has no price)
    assert run["usage"] == {
        **Usage().to_dict(),
        "input_tokens": 40,
        "output_tokens": 20,
        "requests": 4,
        "cost_usd": None,
    }
    assert run["events"] == len(events)
    subagents = sorted(run["subagents"], key=lambda s: s["description"])
    assert [(s["id"], s["type"], s["status"]) for s in subagents] == [
        ("sub1", "general-purpose", "completed"),
        ("sub2", "general-purpose", "completed"),
    ]
    assert [s["summary"] for s in subagents] == ["counted apples", "counted pears"]
    assert all(s["parent_agent_id"] == "lead" and s["tool_call_id"] for s in subagents)
    assert subagents[0]["usage"] == {
        **Usage().to_dict(),
        "input_tokens": 10,
        "output_tokens": 5,
        "requests": 1,
        "cost_usd": None,
    }


def test_the_operators_agent_settings_hold_for_the_servers_runs(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    """What `delegate serve --max-idle-steps` sets reaches every run it serves: `ServerSettings`
    is the operator's `RuntimeSettings`, each field passed on (the window, the models, ...)."""

    def the_same_read(request: ModelRequest) -> ModelResponse:
        return call("list_files", path=".")

    guard = LoopGuard(repeated_failures=None, idle_steps=2)
    with (
        serving(workspace, store, the_same_read, loop=LoopSettings(guard=guard)) as server,
        client(server, tokens["alice"]) as api,
    ):
        run_id = start(api, "look around")
        read_events(api, f"/runs/{run_id}/events")
        run = api.get(f"/runs/{run_id}").json()

    assert (run["status"], run["stop_reason"]) == ("aborted", "no_progress"), run
    assert run["error"].startswith("made no progress in 2 turns in a row")


def test_run_events_are_numbered_typed_and_say_which_subagent_they_come_from(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        run_id = start(api)
        events = read_events(api, f"/runs/{run_id}/events")

    payloads = [json.loads(e.data) for e in events]
    assert [e.id for e in events] == [str(n) for n in range(1, len(events) + 1)]
    assert [e.event for e in events] == [p["type"] for p in payloads]
    assert payloads[0]["type"] == "run.started" and payloads[-1]["type"] == "run.completed"
    assert all(p["run_id"] == run_id for p in payloads)
    started = [p for p in payloads if p["type"] == "subagent.started"]
    assert sorted(p["agent_id"] for p in started) == ["sub1", "sub2"]
    lead_calls = {p["tool_call_id"] for p in payloads if p["type"] == "tool.started" and p["agent_id"] == "lead"}
    for sub in started:
        assert sub["parent_agent_id"] == "lead"
        assert sub["tool_call_id"] in lead_calls
        own = [p for p in payloads if p["agent_id"] == sub["agent_id"]]
        assert {"agent.started", "model.response", "agent.completed", "subagent.completed"} <= {p["type"] for p in own}
        assert all(p["parent_agent_id"] == "lead" for p in own)


def test_last_event_id_resumes_the_stream_after_that_event(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        run_id = start(api)
        everything = read_events(api, f"/runs/{run_id}/events")
        resumed = read_events(api, f"/runs/{run_id}/events", headers={"Last-Event-ID": "5"})
        after = read_events(api, f"/runs/{run_id}/events", params={"after": len(everything) - 1})

    assert [e.id for e in resumed] == [e.id for e in everything[5:]]
    assert [e.data for e in resumed] == [e.data for e in everything[5:]]
    assert [e.event for e in after] == ["run.completed"]


def test_a_finished_run_and_its_events_read_back_after_a_restart(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        run_id = start(api)
        live = read_events(api, f"/runs/{run_id}/events")
        before = api.get(f"/runs/{run_id}").json()
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        after = api.get(f"/runs/{run_id}").json()
        replayed = read_events(api, f"/runs/{run_id}/events")

    assert after == before
    assert [(e.id, e.event, e.data) for e in replayed] == [(e.id, e.event, e.data) for e in live]


def test_cancel_stops_a_live_run_and_records_its_subagents_as_cancelled(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store, stuck_subagents) as server, client(server, tokens["alice"]) as api:
        run_id = start(api)
        seen: list[dict[str, Any]] = []
        cancelled: httpx2.Response | None = None
        with api.stream("GET", f"/runs/{run_id}/events") as response:
            for event in httpx2.EventSource(response):
                seen.append(json.loads(event.data))
                waiting = sum(p["type"] == "model.request" and p["agent_id"] != "lead" for p in seen)
                if waiting == 2 and cancelled is None:  # both subagents are waiting for their model
                    cancelled = api.post(f"/runs/{run_id}/cancel")
                    assert cancelled.status_code == 200, cancelled.text
        again = api.post(f"/runs/{run_id}/cancel")
        run = api.get(f"/runs/{run_id}").json()

    assert cancelled is not None and cancelled.json()["status"] == "cancelled"
    assert seen[-1]["type"] == "run.completed" and seen[-1]["data"]["status"] == "cancelled"
    ended = [p for p in seen if p["type"] == "subagent.completed"]
    assert sorted((p["agent_id"], p["data"]["status"]) for p in ended) == [
        ("sub1", "cancelled"),
        ("sub2", "cancelled"),
    ]
    assert run["status"] == "cancelled"
    assert sorted((s["id"], s["status"]) for s in run["subagents"]) == [("sub1", "cancelled"), ("sub2", "cancelled")]
    assert again.status_code == 409
    assert "already ended (cancelled)" in again.json()["error"]["message"]


def test_stopping_the_server_leaves_its_live_runs_interrupted_for_the_next_one_to_resume(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store, stuck_subagents) as server, client(server, tokens["alice"]) as api:
        run_id = start(api)
    run = store.get_run(run_id)
    assert run is not None and (run.status, run.owner, run.stop_reason) == ("interrupted", None, None)
    assert [r.id for r in store.interrupted_runs()] == [run_id]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, "the prompt is empty"),
        ({"prompt": "   "}, "the prompt is empty: say what the agent should do"),
        ({"prompt": "hi", "max_parallel": 0}, "max_parallel: Input should be greater than or equal to 1"),
        ({"prompt": "hi", "temperature": 1}, "temperature: Extra inputs are not permitted"),
        ({"prompt": 3}, "prompt: Input should be a valid string"),
        ({"prompt": "hi", "uploaded_files": [{"size": 3}]}, "uploaded_files.0.filename: Field required"),
    ],
)
def test_bad_run_requests_answer_422_saying_what_to_fix_and_start_nothing(
    workspace: Path, store: Store, tokens: dict[str, str], body: dict[str, Any], expected: str
) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        response = api.post("/runs", json=body)
        runs = api.get("/runs").json()["runs"]
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"
    assert expected in response.json()["error"]["message"]
    assert runs == []


def test_a_body_that_is_not_json_or_an_unknown_model_is_refused_before_anything_is_stored(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with (
        LiveServer(
            create_app(ServerSettings(runtime=RuntimeSettings(workspace=workspace), run_batches=False), store=store)
        ) as server,
        client(server, tokens["alice"]) as api,
    ):
        broken = api.post("/runs", content=b"{prompt:", headers={"Content-Type": "application/json"})
        unknown = api.post("/runs", json={"prompt": "hi", "model": "nosuch:model"})
        a_file = api.post("/runs", json={"prompt": "hi", "model": "local:/etc/hostname"})  # the operator's to name
        runs = api.get("/runs").json()["runs"]
    assert broken.status_code == 422
    assert "not valid JSON" in broken.json()["error"]["message"]
    assert unknown.status_code == 400
    assert "unknown model provider in 'nosuch:model'" in unknown.json()["error"]["message"]
    assert a_file.status_code == 400
    assert "names a model file on the server" in a_file.json()["error"]["message"]
    assert runs == []


def test_an_unknown_endpoint_answers_a_json_404(workspace: Path, store: Store, tokens: dict[str, str]) -> None:
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        response = api.get("/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


# -- agents ---------------------------------------------------------------------------------------


def test_agents_lists_the_built_in_types_and_the_workspace_definitions(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    agents = workspace / ".delegate" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: Reviews one file.\ntools: [read_file]\nmax_steps: 5\n---\nReview it.\n"
    )
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        listed = api.get("/agents").json()["agents"]
    by_name = {a["name"]: a for a in listed}
    assert {"general-purpose", "explore", "reviewer"} <= set(by_name)
    assert by_name["reviewer"]["description"] == "Reviews one file."
    assert by_name["reviewer"]["tools"] == ["read_file"]
    assert by_name["reviewer"]["max_steps"] == 5
    assert by_name["general-purpose"]["source"] == "builtin"
    assert by_name["general-purpose"]["available"] is True
    assert by_name["bash"]["available"] is False  # the server does not allow shell commands


def test_a_malformed_definition_or_skill_is_a_warning_for_everyone_never_a_400(
    workspace: Path, store: Store, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    agents = workspace / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "x.md").write_text("---\nname: x\ndescription: [never closed\n  tools: :\n---\n")
    (agents / "notes.md").write_text("no front matter\n")
    skill = workspace / ".delegate" / "skills" / "bad"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: bad\n---\nNo description.\n")
    with serving(workspace, store) as server, client(server, tokens["bob"]) as api:
        listed = api.get("/agents")
        run_id = start(api)
        events = [json.loads(e.data) for e in read_events(api, f"/runs/{run_id}/events")]
    assert listed.status_code == 200
    warnings = listed.json()["warnings"]
    assert [(w["file"], w["line"], w["reason"].split(" (")[0].split(":")[0]) for w in warnings] == [
        (".claude/agents/notes.md", 1, "no front matter"),
        (".claude/agents/x.md", 4, "front matter is not strict YAML"),
        (".delegate/skills/bad/SKILL.md", None, "field 'description'"),
    ]
    assert str(workspace) not in listed.text and str(workspace) not in json.dumps(events)
    assert [e["data"]["file"] for e in events if e["type"] == "warning"] == [w["file"] for w in warnings]
    assert events[-1]["data"]["status"] == "completed"
    assert sum("catalogue: .claude/agents/notes.md:1: no front matter" in r.getMessage() for r in caplog.records) == 1


def uploads_aware(request: ModelRequest) -> ModelResponse:
    """Lead: lists the uploads when it can, then answers with what it saw."""
    names = {t.name for t in request.tools}
    if request.messages[-1].role == "user" and "list_uploaded_files" in names:
        return call("list_uploaded_files")
    if request.messages[-1].role == "user":
        return reply("no uploads tool")
    return reply(request.messages[-1].tool_results[0].content)


def test_a_run_can_be_told_of_files_uploaded_earlier(workspace: Path, store: Store, tokens: dict[str, str]) -> None:
    uploaded = [{"filename": "q3.csv", "path": "uploads/q3.csv", "size": 2048, "content_type": "text/csv"}]
    with serving(workspace, store, uploads_aware) as server, client(server, tokens["alice"]) as api:
        with_uploads = start(api, uploaded_files=uploaded)
        without = start(api)
        read_events(api, f"/runs/{with_uploads}/events")
        read_events(api, f"/runs/{without}/events")
        finals = [api.get(f"/runs/{run_id}").json()["final"] for run_id in (with_uploads, without)]
    assert finals == ["- q3.csv (2,048 bytes, text/csv) at uploads/q3.csv", "no uploads tool"]
