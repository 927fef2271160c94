"""A workspace per user in `delegate serve` (issue 9, finding "no per-user files"): one user's
agent can neither see nor touch another's files or uploads, and a user's own definitions shadow
the shared ones for that user alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate import Store
from tests.security.support import Calls, two_users


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "server"
    (root / ".delegate" / "agents").mkdir(parents=True)
    (root / ".delegate" / "agents" / "helper.md").write_text("---\nname: helper\ndescription: shared\n---\nHelp.\n")
    return root.resolve()


def test_each_users_agents_work_in_a_folder_of_their_own(workspace: Path, store: Store) -> None:
    with two_users(workspace, store) as users:
        wrote = users.act("alice", [("write_file", {"path": "plan.md", "content": "Alice's secret plan"})])
        assert not wrote[0].error
        alice = users.folder("alice")
        assert (alice / "plan.md").read_text() == "Alice's secret plan"
        assert not (workspace / "plan.md").exists()
        uploads = alice / "uploads"
        uploads.mkdir()
        (uploads / "report.csv").write_text("Alice's upload")
        seen = users.act("bob", [("list_dir", {"path": "."}), ("find_files", {"pattern": "**"})])
        assert all("plan.md" not in o.content and "report.csv" not in o.content for o in seen), seen


def test_one_users_agent_can_neither_read_nor_change_anothers_files(workspace: Path, store: Store) -> None:
    with two_users(workspace, store) as users:
        users.act("alice", [("write_file", {"path": "plan.md", "content": "Alice's secret plan"})])
        alice = users.folder("alice")
        calls: Calls = []
        for target in [f"../{users.ids['alice']}/plan.md", str(alice / "plan.md"), f"../{users.ids['alice']}", ".."]:
            calls += [
                ("read_file", {"path": target}),
                ("write_file", {"path": target, "content": "Bob was here"}),
                ("edit_file", {"path": target, "old_string": "secret", "new_string": "public"}),
                ("list_dir", {"path": target}),
                ("find_files", {"pattern": "**", "path": target}),
                ("grep", {"pattern": "secret", "path": target}),
            ]
        outcomes = users.act("bob", calls)
        for (name, arguments), outcome in zip(calls, outcomes, strict=True):
            assert outcome.error, (name, arguments, outcome)
            assert "secret plan" not in outcome.content
        assert (alice / "plan.md").read_text() == "Alice's secret plan"


def test_a_users_own_definitions_shadow_the_shared_ones_for_that_user_only(workspace: Path, store: Store) -> None:
    with two_users(workspace, store) as users:
        own = users.folder("alice") / ".delegate" / "agents"
        own.mkdir(parents=True)
        (own / "helper.md").write_text("---\nname: helper\ndescription: alice's own\n---\nMine.\n")
        with users.api("alice") as alice, users.api("bob") as bob:
            mine = {a["name"]: a["description"] for a in alice.get("/agents").json()["agents"]}
            theirs = {a["name"]: a["description"] for a in bob.get("/agents").json()["agents"]}
        assert mine["helper"] == "alice's own"
        assert theirs["helper"] == "shared"
        # and her agents can read neither the shared definitions nor her own (nor change them)
        outcomes = users.act(
            "alice",
            [
                ("read_file", {"path": ".delegate/agents/helper.md"}),
                ("write_file", {"path": ".delegate/agents/helper.md", "content": "x"}),
            ],
        )
        assert all(o.error for o in outcomes)
        assert "alice's own" in (own / "helper.md").read_text()


def test_shared_skills_are_readable_and_read_only_for_every_user(workspace: Path, store: Store) -> None:
    skill = workspace / ".delegate" / "skills" / "style"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: style\ndescription: House style.\n---\nUse short sentences.\n")
    with two_users(workspace, store) as users:
        outcomes = users.act(
            "bob",
            [
                ("read_file", {"path": ".delegate/skills/style/SKILL.md"}),
                ("write_file", {"path": ".delegate/skills/style/SKILL.md", "content": "hijacked"}),
                ("list_dir", {"path": ".delegate/skills"}),
            ],
        )
        assert not outcomes[0].error and "Use short sentences." in outcomes[0].content
        assert outcomes[1].error and "read-only" in outcomes[1].content
        assert outcomes[2].content.splitlines()[1:] == ["style/"]
    assert "Use short sentences." in (skill / "SKILL.md").read_text()
