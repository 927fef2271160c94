"""Calls that wait for a person, over HTTP: the run reads `waiting` with its pending calls, the
approvals routes are the owner's alone, and a decision posted reaches the run."""

from __future__ import annotations

from pathlib import Path

from delegate import Extensions, Permissions, Store
from tests.approvals_support import waiting_calls, write_notes
from tests.durable_support import wait_for
from tests.test_server_api import client, serving
from tests.test_server_api import start as start_run

ASK_WRITE = Extensions(permissions=Permissions(ask=["Write"]))


def ended(api: object, run_id: str) -> dict[str, object]:
    def done() -> dict[str, object] | None:
        run = api.get(f"/runs/{run_id}").json()  # type: ignore[attr-defined]
        return run if run["status"] not in ("running", "waiting") else None

    return wait_for(done, what=f"run {run_id} to end")


def test_a_waiting_call_is_listed_and_approved_over_http_and_the_run_completes(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store, write_notes, extensions=ASK_WRITE) as server, client(server, tokens["alice"]) as api:
        run_id = start_run(api, "write notes")
        (call,) = waiting_calls(store)
        run = api.get(f"/runs/{run_id}").json()
        assert run["status"] == "waiting"
        assert [p["call_id"] for p in run["pending_approvals"]] == [call.call_id]
        listed = api.get(f"/runs/{run_id}/approvals").json()["approvals"]
        assert listed[0]["tool"] == "write_file" and listed[0]["decision"] is None
        assert listed[0]["arguments"]["path"] == "notes.md" and listed[0]["subagent_type"] == "general-purpose"
        decided = api.post(f"/runs/{run_id}/approvals/{call.call_id}", json={"decision": "approve"})
        assert decided.status_code == 200 and decided.json()["decision"] == "approve"
        again = api.post(f"/runs/{run_id}/approvals/{call.call_id}", json={"decision": "deny"})
        assert again.status_code == 409
        run = ended(api, run_id)
    assert run["status"] == "completed"
    user_root = workspace / ".delegate" / "users" / store.get_run(run_id).user_id  # type: ignore[union-attr, operator]
    assert (user_root / "notes.md").read_text() == "notes for notes.md\n"


def test_a_denial_over_http_reaches_the_model_with_its_reason(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with serving(workspace, store, write_notes, extensions=ASK_WRITE) as server, client(server, tokens["alice"]) as api:
        run_id = start_run(api, "write notes")
        (call,) = waiting_calls(store)
        body = {"decision": "deny", "reason": "not today"}
        assert api.post(f"/runs/{run_id}/approvals/{call.call_id}", json=body).status_code == 200
        run = ended(api, run_id)
    assert "a person denied this call of write_file: not today" in str(run["final"])


def test_another_users_run_answers_404_and_a_bad_decision_422(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    with (
        serving(workspace, store, write_notes, extensions=ASK_WRITE) as server,
        client(server, tokens["alice"]) as alice,
        client(server, tokens["bob"]) as bob,
    ):
        run_id = start_run(alice, "write notes")
        (call,) = waiting_calls(store)
        bad = alice.post(f"/runs/{run_id}/approvals/{call.call_id}", json={"decision": "maybe"})
        assert bad.status_code == 422
        assert bob.get(f"/runs/{run_id}/approvals").status_code == 404
        posted = bob.post(f"/runs/{run_id}/approvals/{call.call_id}", json={"decision": "approve"})
        assert posted.status_code == 404
        unknown = alice.post(f"/runs/{run_id}/approvals/call_nope", json={"decision": "approve"})
        assert unknown.status_code == 404
        assert alice.post(f"/runs/{run_id}/approvals/{call.call_id}", json={"decision": "deny"}).status_code == 200
        ended(alice, run_id)
