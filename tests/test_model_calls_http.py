"""`GET /api/v1/runs/{id}/agents/{agent_id}/calls`: each model call of an agent, and what it was
sent and answered, rebuilt from what the store keeps (a served run, fake models that record every
request they get): exactly the request the model got, "not kept" where the store has none, and
another user's run or an unknown agent answer 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from delegate import Compaction, LoopSettings, Store
from delegate._errors import ModelError
from delegate._messages import messages_adapter
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import is_lead, reply, respond
from tests.test_background import turns
from tests.test_server_api import client, fruit_counting, read_events, serving, start


class Recording:
    """`fruit_counting`, keeping every request each agent's model got (the lead's under `lead`, a
    subagent's under its prompt); with `failing`, that subagent's model fails for good."""

    def __init__(self, failing: str | None = None) -> None:
        self.seen: dict[str, list[ModelRequest]] = {}
        self.failing = failing

    def __call__(self, request: ModelRequest) -> ModelResponse:
        who = "lead" if is_lead(request) else request.messages[0].text
        self.seen.setdefault(who, []).append(request)
        if who == self.failing:
            raise ModelError("the provider refused the key")
        return fruit_counting(request)


def finished_run(workspace: Path, store: Store, token: str, answer: Recording) -> tuple[str, dict[str, Any]]:
    """Run `answer`'s team to its end; the run's id and its record."""
    with serving(workspace, store, answer) as server, client(server, token) as api:
        run_id = start(api)
        read_events(api, f"/runs/{run_id}/events")
        return run_id, api.get(f"/runs/{run_id}").json()


def sent(calls: dict[str, Any], n: int) -> tuple[str | None, list[dict[str, Any]]]:
    """The system prompt and messages the route says call `n` was sent."""
    call = calls["calls"][n]
    return calls["system"], calls["messages"][: call["request_messages"]]


def got(request: ModelRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.system, messages_adapter().dump_python(request.messages, mode="json")


def test_each_call_of_the_lead_and_a_subagent_shows_exactly_what_its_model_was_sent_and_answered(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    team = Recording()
    run_id, run = finished_run(workspace, store, tokens["alice"], team)
    apples = next(s["id"] for s in run["subagents"] if s["description"] == "count apples")
    with serving(workspace, store, team) as server, client(server, tokens["alice"]) as api:
        lead = api.get(f"/runs/{run_id}/agents/lead/calls").json()
        sub = api.get(f"/runs/{run_id}/agents/{apples}/calls").json()

    assert (lead["kept"], lead["why_not_kept"]) == (True, None)
    assert [(c["step"], c["model"], c["tool_calls"]) for c in lead["calls"]] == [
        (1, "test:function", ["task", "task"]),
        (2, "test:function", []),
    ]
    for n, request in enumerate(team.seen["lead"]):
        assert sent(lead, n) == got(request)  # what the model got, system prompt and every message
    answer = lead["messages"][lead["calls"][1]["answer_message"]]
    assert answer["role"] == "assistant"
    assert answer["parts"] == [{"kind": "text", "text": "3 apples and 4 pears"}]
    first = lead["messages"][lead["calls"][0]["answer_message"]]
    assert [p["arguments"]["description"] for p in first["parts"] if p["kind"] == "tool_call"] == [
        "count apples",
        "count pears",
    ]
    for call in lead["calls"]:
        assert call["usage"]["input_tokens"] == 10 and call["usage"]["output_tokens"] == 5
        assert call["cost_usd"] is None  # a fake model has no price
        assert call["duration_s"] == call["completed_at"] - call["started_at"] >= 0
        assert call["note"] is None

    assert [c["tool_calls"] for c in sub["calls"]] == [["complete"]]
    assert sent(sub, 0) == got(team.seen["apples"][0])
    complete = sub["messages"][sub["calls"][0]["answer_message"]]["parts"][0]
    assert (complete["name"], complete["arguments"]) == ("complete", {"summary": "counted apples"})


def test_a_subagent_that_did_not_complete_says_its_calls_are_not_kept(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    run_id, run = finished_run(workspace, store, tokens["alice"], Recording(failing="pears"))
    pears = next(s for s in run["subagents"] if s["description"] == "count pears")
    assert pears["status"] == "error"
    with serving(workspace, store) as server, client(server, tokens["alice"]) as api:
        found = api.get(f"/runs/{run_id}/agents/{pears['id']}/calls").json()
    assert found["kept"] is False
    assert found["why_not_kept"] == (
        "not kept: a subagent's conversation is kept when it completes, and this one ended error"
    )
    assert (found["system"], found["messages"]) == (None, [])
    assert len(found["calls"]) == 1  # the request was made (the events say when), its content is not kept
    call = found["calls"][0]
    assert (call["note"], call["request_messages"], call["answer_message"], call["usage"]) == (
        "not kept",
        None,
        None,
        None,
    )


def test_another_users_run_and_an_agent_the_run_does_not_have_answer_404(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    run_id, _ = finished_run(workspace, store, tokens["alice"], Recording())
    with serving(workspace, store) as server:
        with client(server, tokens["bob"]) as bob:
            for agent in ("lead", "sub1"):
                response = bob.get(f"/runs/{run_id}/agents/{agent}/calls")
                assert response.status_code == 404
                assert response.json()["error"]["code"] == "not_found"
                assert "no run" in response.json()["error"]["message"]
        with client(server, tokens["alice"]) as alice:
            for agent in ("sub9", "end", "lead%231", "sub1%231", "..%2F..%2Fetc"):
                response = alice.get(f"/runs/{run_id}/agents/{agent}/calls")
                assert response.status_code == 404, agent
                assert response.json()["error"]["code"] == "not_found"
            assert alice.get(f"/runs/{run_id}/agents/{'x' * 201}/calls").status_code == 422
        with client(server, None) as nobody:
            assert nobody.get(f"/runs/{run_id}/agents/lead/calls").status_code == 401


def test_after_a_compaction_the_calls_before_it_are_not_kept_and_those_after_it_are_exact(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    lead: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith("You compact"):
            return reply("SUMMARY of the listings so far")
        lead.append(request)
        if len(lead) < 6:  # each turn's prompt larger than the last: the conversation is compacted
            return respond([("list_dir", {"path": "."})], input_tokens=400 * (len(lead) + 1), output_tokens=10)
        return reply("listed six times")

    compacting = LoopSettings(compaction=Compaction(max_context_tokens=1_000, keep_recent=2))
    with serving(workspace, store, answer, loop=compacting) as server, client(server, tokens["alice"]) as api:
        run_id = start(api, "list the folder six times")
        events = read_events(api, f"/runs/{run_id}/events")
        found = api.get(f"/runs/{run_id}/agents/lead/calls").json()

    assert any(e.event == "compaction" for e in events)
    assert [c["step"] for c in found["calls"]] == [1, 2, 3, 4, 5, 6]
    before = [c for c in found["calls"] if c["request_messages"] is None]
    assert before and all(
        c["note"] == "not kept: sent before the conversation was compacted, which replaced these messages"
        and c["answer_message"] is None
        for c in before
    )
    after = found["calls"][len(before) :]
    assert after and all(c["request_messages"] is not None for c in after)  # the calls before come first
    for n in range(len(before), len(found["calls"])):
        assert sent(found, n) == got(lead[n])
    assert found["messages"][1]["name"] == "conversation_summary"  # what the later calls were sent


def test_a_continued_runs_first_call_was_sent_the_conversation_it_continues(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    team = Recording()
    with serving(workspace, store, team) as server, client(server, tokens["alice"]) as api:
        first = start(api)
        read_events(api, f"/runs/{first}/events")
        second = start(api, "and now the plums", **{"continue": first})
        read_events(api, f"/runs/{second}/events")
        found = api.get(f"/runs/{second}/agents/lead/calls").json()
    system, messages = sent(found, 0)
    assert (system, messages) == got(team.seen["lead"][2])  # the third request of the lead: the second run's first
    assert messages[0]["parts"] == [{"kind": "text", "text": "count the fruit"}]  # the thread so far, then the prompt
    assert messages[-1]["parts"] == [{"kind": "text", "text": "and now the plums"}]


def test_a_follow_ups_calls_show_what_the_subagent_was_sent_after_its_first_task(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    subagent: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            subagent.append(request)
            return respond([("complete", {"summary": f"counted, call {len(subagent)}"})])
        match turns(request):
            case 0:
                task = {"subagent_type": "general-purpose", "description": "count", "prompt": "count to 2"}
                return respond([("task", task | {"run_in_background": True})])
            case 1:
                return respond([("task_wait", {})])
            case 2:
                return respond([("task_message", {"id": "sub1", "message": "now count to 3"})])
            case _:
                return reply("done")

    with serving(workspace, store, answer) as server, client(server, tokens["alice"]) as api:
        run_id = start(api, "count")
        read_events(api, f"/runs/{run_id}/events")
        found = api.get(f"/runs/{run_id}/agents/sub1/calls").json()
    assert found["kept"] is True
    assert len(found["calls"]) == len(subagent) == 2
    for n, request in enumerate(subagent):
        assert sent(found, n) == got(request)
    follow_up = found["messages"][found["calls"][1]["request_messages"] - 1]
    assert follow_up["parts"] == [{"kind": "text", "text": "now count to 3"}]
