"""MCP servers on the workspace work and cannot read delegate's state (issue 34, item 9). The
official git server (`mcp-server-git --repository .`, as nearly every `.mcp.json` names it) and the
official filesystem server (`@modelcontextprotocol/server-filesystem`) given the workspace root
were refused since round three, since a server runs as the operator, outside the commands'
sandbox: the filesystem server listed and read the store, every run and users' token hashes. Now
they start, in a view where `.delegate/` is an empty read-only folder, and their tools work."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from delegate import Store, ToolContext, ToolError, Workspace
from delegate.mcp import MCPServerConfig, MCPTools

HERE = Path(__file__).resolve().parents[2]
GIT_SERVER = HERE / ".venv" / "bin" / "mcp-server-git"
FILES_SERVER = HERE / ".venv" / "mcp-node" / "node_modules" / ".bin" / "mcp-server-filesystem"
pytestmark = [
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)"),
    pytest.mark.skipif(
        not GIT_SERVER.exists() or not FILES_SERVER.exists() or shutil.which("node") is None,
        reason="needs mcp-server-git and @modelcontextprotocol/server-filesystem (scripts/test.sh installs them)",
    ),
]


def workspace_with_state(root: Path) -> str:
    """A repository with a committed file and a store holding a user's token hash; that hash."""
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("notes\n")
    git = ["git", "-C", str(root), "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "docs"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the notes"], check=True)
    with Store.for_workspace(root) as store:
        store.add_user("alice")
    return next(p.name for p in (root / ".delegate").iterdir())


async def outcome(tools: dict[str, Any], name: str, **arguments: Any) -> str:
    ctx = ToolContext(run_id="r", agent_id="a", workspace=Workspace.open(Path.cwd()), emit=lambda e: None)
    try:
        return (await tools[name].run(ctx, arguments)).content
    except ToolError as exc:
        return f"refused: {exc}"


async def test_the_official_git_and_filesystem_servers_at_the_root_work_and_never_read_the_state(
    tmp_path: Path,
) -> None:
    root = (tmp_path / "ws").resolve()
    state_file = workspace_with_state(root)
    servers = MCPTools(
        [
            MCPServerConfig("git", command=[str(GIT_SERVER), "--repository", "."], cwd=root),
            MCPServerConfig("files", command=[str(FILES_SERVER), str(root)]),
        ],
        workspaces=[root],
    )
    try:
        tools = {t.name: t for t in await servers.load()}
        assert servers.failed == {}
        said = {
            "status": await outcome(tools, "mcp__git__git_status", repo_path=str(root)),
            "log": await outcome(tools, "mcp__git__git_log", repo_path=str(root)),
            "add": await outcome(tools, "mcp__git__git_add", repo_path=str(root), files=[f".delegate/{state_file}"]),
            "show": await outcome(
                tools, "mcp__git__git_show", repo_path=str(root), revision=f":.delegate/{state_file}"
            ),
            "list": await outcome(tools, "mcp__files__list_directory", path=str(root)),
            "docs": await outcome(tools, "mcp__files__read_text_file", path=str(root / "docs" / "a.md")),
            "state": await outcome(tools, "mcp__files__list_directory", path=str(root / ".delegate")),
            "read": await outcome(tools, "mcp__files__read_text_file", path=str(root / ".delegate" / state_file)),
            "search": await outcome(tools, "mcp__files__search_files", path=str(root), pattern="**/*.db"),
        }
    finally:
        await servers.aclose()
    assert "On branch" in said["status"] and "the notes" in said["log"], said
    assert "docs" in said["list"] and said["docs"].strip() == "notes", said
    assert said["add"].startswith("refused:") and said["show"].startswith("refused:"), said
    assert said["read"].startswith("refused:"), said
    assert state_file not in said["state"] and state_file not in said["search"], said
    assert (root / ".delegate" / state_file).exists()  # the store is there, for delegate alone


async def test_under_serve_a_server_given_a_users_folder_sees_it_and_not_the_servers_state(tmp_path: Path) -> None:
    shared = (tmp_path / "server").resolve()
    state_file = workspace_with_state(shared)
    user = shared / ".delegate" / "users" / "u1"
    (user / "src").mkdir(parents=True)
    (user / "src" / "main.py").write_text("print('hi')\n")
    (user / ".delegate").mkdir()
    (user / ".delegate" / "secret.json").write_text("{}")
    servers = MCPTools([MCPServerConfig("files", command=[str(FILES_SERVER), str(user)])], workspaces=[user, shared])
    try:
        tools = {t.name: t for t in await servers.load()}
        assert servers.failed == {}
        mine = await outcome(tools, "mcp__files__read_text_file", path=str(user / "src" / "main.py"))
        own_state = await outcome(tools, "mcp__files__list_directory", path=str(user / ".delegate"))
        store = await outcome(tools, "mcp__files__read_text_file", path=str(shared / ".delegate" / state_file))
    finally:
        await servers.aclose()
    assert mine.strip() == "print('hi')"
    assert "secret.json" not in own_state
    assert store.startswith("refused:")
