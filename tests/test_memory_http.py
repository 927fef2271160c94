"""Memory and enabled skills over HTTP, as two users: each sees and changes only its own notes
and its own choices of skills, and its runs see only what it enabled."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from delegate import Store
from delegate.models import ModelRequest, ModelResponse
from delegate.skills import SkillSettings
from delegate.testing import call, is_lead, reply
from tests.test_server_api import client, serving


def remembering(request: ModelRequest) -> ModelResponse:
    """The lead keeps what its prompt says, then answers with the skills its prompt lists."""
    assert is_lead(request)
    if request.messages[-1].role == "user":
        return call("memory_write", text=f"{request.messages[-1].text} is what this user keeps.")
    index = [line for line in request.system.splitlines() if line.startswith("- ") and ".delegate/skills/" in line]
    return reply("skills: " + ",".join(sorted(line[2:].split(":")[0] for line in index)))


def finished(api: Any, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = api.get(f"/runs/{run_id}").json()
        if run["status"] not in ("running", "waiting"):
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end")


def write_skill(root: Path, name: str) -> None:
    folder = root / ".delegate" / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: The {name} skill.\n---\nDo {name}.\n")


def test_each_user_sees_and_forgets_only_its_own_notes(workspace: Path, store: Store, tokens: dict[str, str]) -> None:
    with (
        serving(workspace, store, remembering) as server,
        client(server, tokens["alice"]) as alice,
        client(server, tokens["bob"]) as bob,
    ):
        run = alice.post("/runs", json={"prompt": "Alice's plum"}).json()["run_id"]
        assert finished(alice, run)["status"] == "completed"
        added = bob.post("/memory", json={"text": "Bob's pear is what this user keeps."})
        assert added.status_code == 201, added.text
        [mine] = alice.get("/memory").json()["notes"]
        assert mine["text"] == "Alice's plum is what this user keeps." and mine["written_by"] == "lead"
        assert [n["text"] for n in bob.get("/memory", params={"q": "keeps"}).json()["notes"]] == [
            "Bob's pear is what this user keeps."
        ]
        assert bob.get(f"/memory/{mine['id']}").status_code == 404
        assert bob.delete(f"/memory/{mine['id']}").status_code == 404
        assert alice.get(f"/memory/{mine['id']}").json()["text"] == mine["text"]
        assert alice.delete(f"/memory/{mine['id']}").status_code == 200
        assert alice.get("/memory").json()["notes"] == []
        assert alice.post("/memory", json={"text": " "}).status_code == 422


def test_each_user_enables_skills_for_its_own_runs_over_the_operators_defaults(
    workspace: Path, store: Store, tokens: dict[str, str]
) -> None:
    for name in ("report", "review", "pdf"):
        write_skill(workspace, name)
    SkillSettings(store).choose(None, "pdf", False)  # the operator: off unless a user turns it on
    with (
        serving(workspace, store, remembering) as server,
        client(server, tokens["alice"]) as alice,
        client(server, tokens["bob"]) as bob,
    ):
        assert alice.put("/skills/review", json={"enabled": False}).json() == {
            "name": "review",
            "description": "The review skill.",
            "path": ".delegate/skills/review/SKILL.md",
            "enabled": False,
            "default": True,
            "choice": False,
        }
        assert bob.put("/skills/pdf", json={"enabled": True}).json()["enabled"] is True
        assert {s["name"]: s["enabled"] for s in alice.get("/skills").json()["skills"]} == {
            "pdf": False,
            "report": True,
            "review": False,
        }
        assert {s["name"]: s["enabled"] for s in bob.get("/skills").json()["skills"]} == {
            "pdf": True,
            "report": True,
            "review": True,
        }
        alice_run = finished(alice, alice.post("/runs", json={"prompt": "a"}).json()["run_id"])
        bob_run = finished(bob, bob.post("/runs", json={"prompt": "b"}).json()["run_id"])
        assert alice_run["final"] == "skills: report"
        assert bob_run["final"] == "skills: pdf,report,review"
        assert alice.put("/skills/nope", json={"enabled": True}).status_code == 404
        assert alice.delete("/skills/review").json()["enabled"] is True  # back to the default
