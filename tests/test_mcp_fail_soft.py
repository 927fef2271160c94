"""An MCP server that does not start is reported and left out, as Claude Code does, and the run
goes on with the others: a warning on stderr, an `mcp.server_failed` event, and a line of the
run's `warnings` (`run --json`, `runs show --json`). Real server processes (tests/mcp_server.py),
a command that does not exist and one that exits at once; the real CLI against a loopback
Chat Completions server."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Runtime, Store
from delegate._events import Event
from delegate.mcp import MCPServerConfig
from delegate.run import stored_result
from delegate.testing import ScriptedModel, call, reply
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

SERVER = Path(__file__).with_name("mcp_server.py")
EXITS = [sys.executable, "-c", "import sys; sys.exit('GITHUB_TOKEN is not set')"]


def servers() -> list[MCPServerConfig]:
    return [
        MCPServerConfig("ghost", command=["/nonexistent/mcp-server"]),
        MCPServerConfig("github", command=EXITS),
        MCPServerConfig("tiny", command=[sys.executable, str(SERVER)]),
    ]


async def test_a_run_goes_on_without_the_servers_that_did_not_start_and_records_why(tmp_path: Path) -> None:
    model = ScriptedModel([call("mcp__tiny__shout", text="still here"), reply("done")])
    events: list[Event] = []
    async with Runtime(
        model=model,
        workspace=tmp_path,
        sinks=[events.append],
        extensions=Extensions(mcp_servers=servers(), tool_search=False),
    ) as runtime:
        result = await runtime.run("shout it")

    assert result.status == "completed"
    shouted = model.requests[1].messages[-1].tool_results[0]
    assert (shouted.content, shouted.is_error) == ("STILL HERE!", False)  # the server that started works
    offered = {t.name for t in model.requests[0].tools}
    assert "mcp__tiny__shout" in offered and not any(n.startswith(("mcp__ghost", "mcp__github")) for n in offered)

    failed = {e.data["server"]: e.data for e in events if e.type == "mcp.server_failed"}
    assert sorted(failed) == ["ghost", "github"]
    assert "'/nonexistent/mcp-server' was not found" in failed["ghost"]["reason"]
    assert "GITHUB_TOKEN is not set" in failed["github"]["reason"]
    assert failed["ghost"]["type"] is None
    assert [e.type for e in events].index("run.started") < [e.type for e in events].index("mcp.server_failed")

    assert len(result.warnings) == 2
    assert all(w.endswith("; the run goes on without its tools") for w in result.warnings)
    assert any("'ghost'" in w for w in result.warnings) and any("GITHUB_TOKEN" in w for w in result.warnings)
    stored = stored_result(Store.for_workspace(tmp_path), result.run_id)
    assert stored is not None and stored.to_dict()["warnings"] == result.warnings


def mcp_responder(body: dict[str, Any]) -> Reply:
    """Load the tiny server's `shout` with `tool_search`, call it, then answer with what it said."""
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turns == 0:
        return Reply(tool_calls=[("tool_search", {"query": "select:mcp__tiny__shout"})])
    if turns == 1:
        return Reply(tool_calls=[("mcp__tiny__shout", {"text": "hi"})])
    return Reply(content=body["messages"][-1]["content"])


def test_delegate_run_warns_on_stderr_and_shows_the_warnings_in_run_and_runs_show(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "ghost": {"command": "/nonexistent/mcp-server"},
                    "github": {"command": EXITS[0], "args": EXITS[1:]},
                    "tiny": {"command": sys.executable, "args": [str(SERVER)]},
                }
            }
        )
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with OpenAIServer(mcp_responder) as server:
        env = {**scrubbed_env(), "OPENAI_BASE_URL": server.base_url}
        done = run_cli(
            ["run", "shout hi", "--model", "openai:m", "--mcp-config", str(config), "--json"], env, workspace
        )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["status"], result["final"]) == ("completed", "HI!")
    assert len(result["warnings"]) == 2
    for name in ("ghost", "github"):
        line = next(line for line in done.stderr.splitlines() if f"MCP server '{name}'" in line)
        assert line.startswith("warning: ") and line.endswith("; the run goes on without its tools")
    shown = run_cli(["runs", "show", result["run_id"], "--json"], scrubbed_env(), workspace)
    assert json.loads(shown.stdout)["warnings"] == result["warnings"]


def lister(name: str, *args: str, cwd: Path | None = None) -> MCPServerConfig:
    """The test server with `list_root`, listing the folder its arguments name (as a filesystem server)."""
    return MCPServerConfig(name, command=[sys.executable, str(SERVER), *args], cwd=cwd)


NO_BWRAP = pytest.mark.skipif(
    Path("/usr/bin/bwrap").exists() or shutil.which("bwrap") is not None,
    reason="bwrap runs here: servers start with .delegate hidden (tests/security/test_mcp_state.py)",
)


@NO_BWRAP
async def test_where_bwrap_cannot_run_a_server_given_the_workspace_root_is_never_started_and_one_given_a_subfolder_is(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "docs").mkdir(parents=True)
    (workspace / "docs" / "a.md").write_text("notes\n")
    Store.for_workspace(workspace).close()  # .delegate/ with the store in it

    model = ScriptedModel([call("mcp__docs__list_root"), reply("done")])
    events: list[Event] = []
    configs = [
        lister("root", "--root", str(workspace)),
        lister("dot", "--root=.", cwd=workspace),
        lister("above", "--root", str(tmp_path)),
        lister("inside", "--root", str(workspace / ".delegate")),
        lister("docs", "--root", str(workspace / "docs")),
    ]
    async with Runtime(
        model=model,
        workspace=workspace,
        sinks=[events.append],
        extensions=Extensions(mcp_servers=configs, tool_search=False),
    ) as runtime:
        result = await runtime.run("list the docs")

    assert result.status == "completed"
    listed = model.requests[1].messages[-1].tool_results[0]
    assert (listed.content, listed.is_error) == ("a.md", False)  # the one given a subfolder lists it
    offered = {t.name for t in model.requests[0].tools}
    assert "mcp__docs__list_root" in offered
    assert not any(n.startswith(("mcp__root", "mcp__dot", "mcp__above", "mcp__inside")) for n in offered)
    failed = {e.data["server"]: e.data["reason"] for e in events if e.type == "mcp.server_failed"}
    assert sorted(failed) == ["above", "dot", "inside", "root"]
    assert f"its argument {str(workspace)!r} is the workspace root" in failed["root"]
    assert f"its cwd {str(workspace)!r} is the workspace root" in failed["dot"]
    assert "is a folder that holds the workspace" in failed["above"]
    assert "is inside a .delegate folder" in failed["inside"]
    assert all("is not started" in why and "give it a folder inside the workspace" in why for why in failed.values())
    assert len(result.warnings) == 4


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")
async def test_a_server_given_the_workspace_root_or_a_folder_above_starts_and_finds_delegate_empty(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "docs").mkdir(parents=True)
    (workspace / "docs" / "a.md").write_text("notes\n")
    Store.for_workspace(workspace).close()  # .delegate/ with the store in it

    model = ScriptedModel(
        [call("mcp__root__list_root"), call("mcp__inside__list_root"), call("mcp__above__list_root"), reply("done")]
    )
    configs = [
        lister("root", "--root=.", cwd=workspace),
        lister("above", "--root", str(tmp_path)),
        lister("inside", "--root", str(workspace / ".delegate")),
    ]
    async with Runtime(
        model=model, workspace=workspace, extensions=Extensions(mcp_servers=configs, tool_search=False)
    ) as runtime:
        result = await runtime.run("list the folders")

    assert result.status == "completed" and result.warnings == []
    root, inside, above = (model.requests[n].messages[-1].tool_results[0] for n in (1, 2, 3))
    assert root.content.split() == [
        ".delegate",
        "docs",
        "outputs",
    ]  # outputs: the run's outputs folder and not root.is_error
    assert (inside.content, inside.is_error) == ("", False)  # the store is not there for it
    assert above.content.split() == ["ws"]
