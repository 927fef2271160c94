"""MCP servers' tools, given to agents: real servers over stdio and streamable HTTP (tests/mcp_server.py)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from delegate._errors import ToolError, UserError
from delegate._messages import Message
from delegate.loop import AgentSpec, run_agent
from delegate.mcp import MCPServerConfig, MCPTools
from delegate.mcp._client import mcp_tool_name, result_text
from delegate.testing import ScriptedModel, reply, respond
from delegate.tools import Tool, ToolContext
from delegate.workspace import Workspace

SERVER = Path(__file__).with_name("mcp_server.py")
HAS_PROC = Path("/proc/self/cmdline").exists()


def stdio_server(name: str = "tiny", *extra: str) -> tuple[MCPServerConfig, str]:
    """A config for the test server over stdio, and the tag that finds its process."""
    tag = f"--tag={uuid.uuid4().hex}"
    return MCPServerConfig(name, command=[sys.executable, str(SERVER), *extra, tag]), tag


def server_processes(tag: str) -> list[int]:
    """The live processes whose command line holds `tag` (a zombie's command line is empty)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in cmdline:
            found.append(int(entry.name))
    return found


def context(root: Path) -> ToolContext:
    return ToolContext(run_id="run", agent_id="lead", workspace=Workspace.open(root), emit=lambda event: None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def by_name(tools: list[Tool]) -> dict[str, Tool]:
    return {t.name: t for t in tools}


# -- configuration --


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"command": ["srv"], "url": "http://127.0.0.1:1/mcp"}, "not both"),
        ({}, "needs `command`"),
        ({"command": "npx -y some-server"}, "['npx', '-y', 'some-server']"),
        ({"command": []}, "non-empty list"),
        ({"command": ["srv", 3]}, "list of strings"),
        ({"url": "127.0.0.1:8000/mcp"}, "not an http:// or https:// URL"),
        ({"url": "http://127.0.0.1:8000/mcp", "env": {"A": "1"}}, "`env` and `cwd` apply to a server started"),
        ({"command": ["srv"], "headers": {"Authorization": "x"}}, "`headers` are sent to a url"),
        ({"command": ["srv"], "env": {"PORT": 80}}, "`env` must map strings to strings"),
        ({"command": ["srv"], "connect_timeout": 0}, "connect_timeout must be a positive"),
    ],
    ids=["both", "neither", "command-string", "empty", "not-strings", "url", "env-url", "headers", "env", "timeout"],
)
def test_a_bad_server_config_is_a_user_error_saying_what_to_fix(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(UserError, match="MCP server 'docs'") as caught:
        MCPServerConfig("docs", **kwargs)
    assert says in str(caught.value)


def test_a_server_name_with_other_characters_is_refused_with_a_name_that_would_do() -> None:
    with pytest.raises(UserError, match=r"only letters, digits, '-' and '_'.*'my_server'"):
        MCPServerConfig("my server!", command=["srv"])


def test_two_servers_with_one_name_are_refused() -> None:
    with pytest.raises(UserError, match="two MCP servers are named 'docs'"):
        MCPTools([MCPServerConfig("docs", command=["a"]), MCPServerConfig("docs", url="http://127.0.0.1:1/mcp")])


def test_tool_names_follow_claude_codes_convention_and_stay_valid_for_providers() -> None:
    assert mcp_tool_name("github", "create_issue") == "mcp__github__create_issue"
    dotted, underscored = mcp_tool_name("fs", "read.file"), mcp_tool_name("fs", "read_file")
    assert dotted.startswith("mcp__fs__read_file_") and dotted != underscored
    long = mcp_tool_name("server", "x" * 100)
    assert len(long) == 64 and long != mcp_tool_name("server", "x" * 101)


def test_importing_delegate_tools_does_not_import_mcp() -> None:
    code = "import sys, delegate, delegate.tools; print('mcp' in sys.modules, 'mcp_types' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


# -- what the model reads of a result --


def test_images_audio_and_resources_become_short_notes_beside_the_text() -> None:
    result = CallToolResult(
        content=[
            TextContent(type="text", text="Here is the chart."),
            ImageContent(type="image", data="A" * 16_460, mime_type="image/png"),
            AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            ResourceLink(type="resource_link", name="log", uri="file:///var/log/app.log"),
            EmbeddedResource(type="resource", resource=TextResourceContents(uri="memo://1", text="remember")),
            EmbeddedResource(
                type="resource", resource=BlobResourceContents(uri="blob://2", blob="AAAA", mime_type="application/zip")
            ),
        ]
    )
    assert result_text(result).splitlines() == [
        "Here is the chart.",
        "[image/png, 12,345 bytes]",
        "[audio/wav, 3 bytes]",
        "[resource file:///var/log/app.log]",
        "[resource memo://1]",
        "remember",
        "[resource blob://2, application/zip, 3 bytes]",
    ]


def test_structured_content_is_the_answer_when_there_is_no_text() -> None:
    result = CallToolResult(content=[], structured_content={"temperature": 21.5, "unit": "C"})
    assert result_text(result) == '{"temperature": 21.5, "unit": "C"}'


# -- a stdio server, shared by the tests of this section --


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def paged() -> AsyncIterator[tuple[list[Tool], str]]:
    """The test server over stdio, listing its tools one per page."""
    config, tag = stdio_server("tiny", "--paged")
    servers = MCPTools([config])
    tools = await servers.load()
    yield tools, tag
    await servers.aclose()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_stdio_servers_tools_come_with_names_descriptions_and_schemas(
    paged: tuple[list[Tool], str],
) -> None:
    tools = by_name(paged[0])
    assert sorted(tools) == [
        "mcp__tiny__add",
        "mcp__tiny__fail",
        "mcp__tiny__meet",
        "mcp__tiny__shout",
    ]  # all pages were read
    add = tools["mcp__tiny__add"]
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.parameters["required"] == ["a", "b"]
    assert add.spec.parameters == add.parameters


@pytest.mark.asyncio(loop_scope="module")
async def test_calls_answer_with_the_servers_text(paged: tuple[list[Tool], str], tmp_path: Path) -> None:
    tools = by_name(paged[0])
    added = await tools["mcp__tiny__add"].run(context(tmp_path), {"a": 2, "b": 3})
    assert (added.content, added.data) == ("5", {"result": 5})
    shouted = await tools["mcp__tiny__shout"].run(context(tmp_path), {"text": "hello"})
    assert shouted.content == "HELLO!"


@pytest.mark.asyncio(loop_scope="module")
async def test_twenty_concurrent_calls_share_one_session_and_all_answer(
    paged: tuple[list[Tool], str], tmp_path: Path
) -> None:
    meet = by_name(paged[0])["mcp__tiny__meet"]
    results = await asyncio.gather(*(meet.run(context(tmp_path), {"party": 20}) for _ in range(20)))
    assert [r.data for r in results] == [{"result": 20}] * 20  # all twenty were running at once
    if HAS_PROC:
        assert len(server_processes(paged[1])) == 1  # one server for every call, not one per call


@pytest.mark.asyncio(loop_scope="module")
async def test_a_failing_tool_raises_tool_error_with_the_servers_message(
    paged: tuple[list[Tool], str], tmp_path: Path
) -> None:
    with pytest.raises(ToolError, match="disk is full"):
        await by_name(paged[0])["mcp__tiny__fail"].run(context(tmp_path), {"reason": "disk is full"})


@pytest.mark.asyncio(loop_scope="module")
async def test_an_agent_calls_mcp_tools_and_the_model_reads_the_results(
    paged: tuple[list[Tool], str], tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            respond(
                [
                    ("mcp__tiny__add", {"a": 2, "b": 40}),
                    ("mcp__tiny__shout", {"text": "hi"}),
                    ("mcp__tiny__fail", {"reason": "not today"}),
                ]
            ),
            reply("The answer is 42."),
        ]
    )
    spec = AgentSpec(name="lead", instructions="Use the tools.", model=model, tools=paged[0])
    result = await run_agent(spec, context(tmp_path), [Message.user("What is 2 + 40?")])
    assert (result.status, result.final) == ("completed", "The answer is 42.")
    model.assert_complete()
    assert {t.name for t in model.requests[0].tools} >= {"mcp__tiny__add", "mcp__tiny__shout"}
    seen = {part.name: part for part in model.requests[1].messages[-1].tool_results}
    assert (seen["mcp__tiny__add"].content, seen["mcp__tiny__add"].is_error) == ("42", False)
    assert seen["mcp__tiny__shout"].content == "HI!"
    assert seen["mcp__tiny__fail"].is_error and "not today" in seen["mcp__tiny__fail"].content


# -- sessions and event loops --


@pytest.mark.skipif(not HAS_PROC, reason="finds the server's process in /proc")
async def test_aclose_from_another_task_stops_the_server_process(tmp_path: Path) -> None:
    config, tag = stdio_server()
    servers = MCPTools([config])
    shout = by_name(await servers.load())["mcp__tiny__shout"]
    assert (await shout.run(context(tmp_path), {"text": "a"})).content == "A!"
    assert len(server_processes(tag)) == 1
    await asyncio.create_task(servers.aclose())
    assert server_processes(tag) == []
    await servers.aclose()  # closing twice is harmless


@pytest.mark.skipif(not HAS_PROC, reason="finds the server's process in /proc")
async def test_a_call_after_the_server_died_reports_it_and_the_next_call_reconnects(tmp_path: Path) -> None:
    config, tag = stdio_server()
    servers = MCPTools([config])
    shout = by_name(await servers.load())["mcp__tiny__shout"]
    try:
        [pid] = server_processes(tag)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ToolError, match="connection to MCP server 'tiny' was lost during shout"):
            for _ in range(50):  # until the client has seen the pipe close
                await shout.run(context(tmp_path), {"text": "a"})
                await asyncio.sleep(0.02)
        assert (await shout.run(context(tmp_path), {"text": "back"})).content == "BACK!"
        assert len(server_processes(tag)) == 1
    finally:
        await servers.aclose()


@pytest.mark.skipif(not HAS_PROC, reason="finds the server's process in /proc")
def test_tools_loaded_under_one_event_loop_work_under_another(tmp_path: Path) -> None:
    config, tag = stdio_server()
    servers = MCPTools([config])
    shout = by_name(asyncio.run(servers.load()))["mcp__tiny__shout"]
    assert server_processes(tag) == []  # the loop's shutdown closed its session, without aclose

    async def use() -> str:
        try:
            return (await shout.run(context(tmp_path), {"text": "again"})).content
        finally:
            await servers.aclose()

    assert asyncio.run(use()) == "AGAIN!"
    assert server_processes(tag) == []


# -- streamable HTTP --


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The test server over streamable HTTP on a free loopback port, once it accepts connections."""
    port = free_port()
    command = [sys.executable, str(SERVER), "--http", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the HTTP MCP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(60)


async def test_a_streamable_http_server_serves_the_same_tools(http_url: str, tmp_path: Path) -> None:
    servers = MCPTools([MCPServerConfig("web", url=http_url, headers={"X-Test": "1"})])
    try:
        tools = by_name(await servers.load())
        assert sorted(tools) == ["mcp__web__add", "mcp__web__fail", "mcp__web__meet", "mcp__web__shout"]
        assert tools["mcp__web__shout"].description == "Repeat the text in capitals."
        assert (await tools["mcp__web__shout"].run(context(tmp_path), {"text": "web"})).content == "WEB!"
        add = tools["mcp__web__add"]
        results = await asyncio.gather(*(add.run(context(tmp_path), {"a": i, "b": 1}) for i in range(20)))
        assert [r.content for r in results] == [str(i + 1) for i in range(20)]
        with pytest.raises(ToolError, match="over the wire"):
            await tools["mcp__web__fail"].run(context(tmp_path), {"reason": "over the wire"})
    finally:
        await servers.aclose()


# -- servers that cannot be used --


async def test_each_server_that_cannot_be_reached_is_left_out_and_named_with_the_cause() -> None:
    closed = f"http://127.0.0.1:{free_port()}/mcp"
    good, _ = stdio_server()
    servers = MCPTools(
        [MCPServerConfig("ghost", command=["/nonexistent/mcp-server"]), MCPServerConfig("down", url=closed), good]
    )
    try:
        tools = by_name(await servers.load())
        assert sorted(servers.failed) == ["down", "ghost"]
        assert "MCP server 'ghost' could not be started" in servers.failed["ghost"]
        assert "'/nonexistent/mcp-server' was not found" in servers.failed["ghost"]
        assert f"MCP server 'down' could not be reached at {closed}" in servers.failed["down"]
        assert sorted(tools) == ["mcp__tiny__add", "mcp__tiny__fail", "mcp__tiny__meet", "mcp__tiny__shout"]
    finally:
        await servers.aclose()


async def test_a_server_that_exits_at_start_is_left_out_with_what_it_said() -> None:
    code = "import sys; sys.exit('GITHUB_TOKEN is not set')"
    servers = MCPTools([MCPServerConfig("github", command=[sys.executable, "-c", code])])
    assert await servers.load() == []
    assert re.search(r"MCP server 'github' could not be started.*GITHUB_TOKEN is not set", servers.failed["github"])
    await servers.aclose()


async def test_a_server_that_never_answers_is_given_up_after_the_connect_timeout() -> None:
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    servers = MCPTools([MCPServerConfig("mute", command=silent, connect_timeout=0.5)])
    async with asyncio.timeout(120):  # only so that a regression fails instead of hanging the suite
        assert await servers.load() == []
    assert re.search(r"MCP server 'mute' could not be started.*within 0.5s", servers.failed["mute"])
    await servers.aclose()
