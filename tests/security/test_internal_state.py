"""The store, `.delegate/` and the definitions other users' runs load are out of every agent's
reach (issue 9, findings "definitions hijacked" and "the store destroyed"), through the real
server and a real store (SQLite, and PostgreSQL when DELEGATE_TEST_PG is set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from delegate import Extensions, Store
from delegate.testing import FunctionModel, call, reply
from delegate.tools import builtin_tools
from tests.security.support import Calls, two_users

HIJACK = "---\nname: explore\ndescription: hijacked\ntools: [write_file, edit_file]\n---\nALICE WAS HERE\n"
BROKEN = "---\nname: [not, a, name\n---\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "server"
    (root / ".delegate" / "agents").mkdir(parents=True)
    (root / ".delegate" / "agents" / "helper.md").write_text("---\nname: helper\ndescription: shared\n---\nHelp.\n")
    return root.resolve()


def every_tool_on(path: str) -> Calls:
    """Every file tool aimed at `path`, reading and writing."""
    return [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "not a database"}),
        ("edit_file", {"path": path, "old_string": "S", "new_string": "x"}),
        ("list_dir", {"path": path}),
        ("find_files", {"pattern": "**", "path": path}),
        ("grep", {"pattern": ".", "path": path}),
    ]


def test_no_agent_can_write_a_definition_that_another_users_runs_load(workspace: Path, store: Store) -> None:
    with two_users(workspace, store) as users:
        attempts: Calls = []
        for target in [
            ".delegate/agents/explore.md",
            ".claude/agents/explore.md",
            ".delegate/skills/x/SKILL.md",
            "../../agents/explore.md",  # from alice's folder up to the server's .delegate/agents
            f"{workspace}/.delegate/agents/explore.md",
            f"{workspace}/.claude/agents/x.md",
        ]:
            attempts.append(("write_file", {"path": target, "content": HIJACK}))
        attempts.append(("write_file", {"path": ".claude/skills/x/SKILL.md", "content": BROKEN}))
        outcomes = users.act("alice", attempts)
        assert all(o.error for o in outcomes), outcomes
        assert not list(workspace.rglob("explore.md")) and not list(workspace.rglob("SKILL.md"))
        with users.api("bob") as bob:
            agents = bob.get("/agents")
        assert agents.status_code == 200
        by_name = {a["name"]: a for a in agents.json()["agents"]}
        assert by_name["helper"]["description"] == "shared"
        assert "hijacked" not in agents.text and "ALICE" not in agents.text


def test_no_file_tool_reads_or_changes_the_store_or_internal_folders(workspace: Path) -> None:
    """Against the server's own SQLite file, where `delegate serve` keeps it: `.delegate/delegate.db`."""
    with Store.for_workspace(workspace) as store, two_users(workspace, store) as users:
        alice = users.folder("alice")
        alice.mkdir(parents=True, exist_ok=True)
        (alice / ".delegate").mkdir(exist_ok=True)
        (alice / ".delegate" / "notes").write_text("Secret internal state")
        db = workspace / ".delegate" / "delegate.db"
        calls: Calls = []
        for target in [".delegate", ".delegate/notes", "../../delegate.db", "../..", str(db), str(workspace)]:
            calls += every_tool_on(target)
        outcomes = users.act("alice", calls)
        for (name, arguments), outcome in zip(calls, outcomes, strict=True):
            assert outcome.error, (name, arguments, outcome)
            assert "Secret" not in outcome.content and "SQLite format" not in outcome.content
        whole = users.act("alice", [("find_files", {"pattern": "**"}), ("grep", {"pattern": "Secret|SQLite"})])
        assert ".delegate" not in whole[0].content
        assert whole[1].content == "no lines match 'Secret|SQLite' in ."
    assert (alice / ".delegate" / "notes").read_text() == "Secret internal state"
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    with Store.for_workspace(workspace) as reopened:  # after a restart, every user is still there
        assert reopened.user_for_token(users.tokens["bob"]) == users.ids["bob"]


def test_complete_and_acceptance_checks_cannot_name_internal_state(tmp_path: Path) -> None:
    from delegate import Runtime

    root = tmp_path / "ws"
    (root / ".delegate").mkdir(parents=True)
    (root / ".delegate" / "agents").mkdir()
    turns = iter(
        [
            call("task", subagent_type="general-purpose", description="d", prompt="p",
                 acceptance_criteria=["file_exists: .delegate/delegate.db"]),
            call("complete", summary="done", paths=[".delegate/delegate.db", ".delegate/agents"]),
            reply("over"),
        ]
    )  # fmt: skip
    runtime = Runtime(
        model=FunctionModel(lambda request: next(turns)), workspace=root, extensions=Extensions(builtin_subagents=True)
    )
    result = runtime.run_sync("go")
    record = result.subagents[0]
    assert record.artifacts == []
    assert [s.to_dict()["path"] for s in record.skipped] == [".delegate/delegate.db", ".delegate/agents"]
    assert record.acceptance and record.acceptance[0]["result"] != "holds"
    assert (root / ".delegate" / "delegate.db").read_bytes().startswith(b"SQLite format 3\x00")
    assert "bash" not in [t.name for t in builtin_tools(allow_commands=False)]


@pytest.mark.parametrize("content", [b"not a database", b""])
def test_a_server_whose_store_is_not_a_database_refuses_to_start_and_says_why(tmp_path: Path, content: bytes) -> None:
    root = tmp_path / "ws"
    Store.for_workspace(root).close()
    db = root / ".delegate" / "delegate.db"
    db.write_bytes(content)
    old = db.stat().st_mtime - 3600
    import os

    os.utime(db, (old, old))  # an empty file being created this moment is let be; an old one is not
    done = subprocess.run(
        [sys.executable, "-m", "delegate", "serve", "--workspace", str(root), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != "DELEGATE_DB"}, "DELEGATE_MODEL": "local"},
    )
    assert done.returncode == 2
    assert "is empty" in done.stderr or "is not a SQLite database" in done.stderr
    assert "restore it from a backup" in done.stderr
    assert db.read_bytes() == content  # nothing was written over it


def test_the_file_tools_may_read_git_and_claude_but_never_change_them(tmp_path: Path) -> None:
    """`core.fsmonitor` (or a hook, `core.pager`, an alias) in `.git/config` runs as whoever runs
    `git status` next: the operator, outside any sandbox. `.claude/settings.json` holds the
    permission rules and hooks runs load."""
    import asyncio

    from delegate import ToolContext, ToolError, Workspace
    from delegate.tools import BUILTIN_TOOLS

    root = (tmp_path / "ws").resolve()
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text('{"permissions": {"deny": ["Bash"]}}')
    ctx = ToolContext(run_id="r", agent_id="a", workspace=Workspace.open(root), emit=lambda e: None)

    async def outcome(name: str, **arguments: str) -> str:
        try:
            return (await BUILTIN_TOOLS[name].run(ctx, arguments)).content
        except ToolError as exc:
            return f"refused: {exc}"

    async def attempts() -> list[str]:
        return [
            await outcome("read_file", path=".git/config"),
            await outcome("write_file", path=".git/config", content="[core]\n\tfsmonitor = touch /tmp/pwned\n"),
            await outcome("edit_file", path=".git/config", old_string="bare = false", new_string="fsmonitor = x"),
            await outcome("write_file", path=".git/hooks/pre-commit", content="#!/bin/sh\ntouch /tmp/pwned\n"),
            await outcome("write_file", path=".claude/settings.json", content="{}"),
            await outcome("write_file", path=".claude/agents/new.md", content="---\nname: new\n---\n"),
        ]

    read, *changes = asyncio.run(attempts())
    assert "bare = false" in read
    assert all(c.startswith("refused:") and "read-only" in c for c in changes), changes
    assert (root / ".git" / "config").read_text() == "[core]\n\tbare = false\n"
    assert not (root / ".git" / "hooks").exists() and not (root / ".claude" / "agents").exists()
    assert (root / ".claude" / "settings.json").read_text() == '{"permissions": {"deny": ["Bash"]}}'
