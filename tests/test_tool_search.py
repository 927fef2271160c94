"""Deferred tools: an MCP server's tools are named in the system prompt, loaded with `tool_search`
(or routed from the task), hidden from requests until then, and reach subagents the same way."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Runtime
from delegate._errors import UserError
from delegate.agents import Subagent
from delegate.mcp import MCPServerConfig, load_mcp_config, rank
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from delegate.tools import Tool
from tests.cli_support import scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

SERVER = Path(__file__).with_name("mcp_server.py")
ADD, SHOUT = "mcp__calc__add", "mcp__calc__shout"


def calc(**options: object) -> list[MCPServerConfig]:
    return [MCPServerConfig("calc", command=[sys.executable, str(SERVER)], **options)]  # type: ignore[arg-type]


def names(request: ModelRequest) -> set[str]:
    return {t.name for t in request.tools}


async def test_deferred_tools_are_named_hidden_then_loaded_by_tool_search(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return [
            call(ADD, a=1, b=2),  # not loaded yet: refused with how to load it
            call("tool_search", query="select:mcp__calc__add"),
            call(ADD, a=1, b=2),
            reply("3"),
        ][turn]

    model = FunctionModel(answer)
    rt = Runtime(
        model=model, workspace=tmp_path, store=False, extensions=Extensions(mcp_servers=calc(), auto_promote=0)
    )
    try:
        result = await rt.run("go")
    finally:
        await rt.aclose()
    first, second, third, fourth = model.requests
    assert f"{ADD}, mcp__calc__fail, mcp__calc__meet, {SHOUT}" in first.system
    assert ADD not in names(first) and "tool_search" in names(first)
    assert "load it first with tool_search" in second.messages[-1].tool_results[0].content
    loaded = third.messages[-1].tool_results[0].content
    assert loaded.startswith(f"Loaded tools: {ADD}") and "Add two integers" in loaded
    assert ADD in names(third) and SHOUT not in names(third)
    assert fourth.messages[-1].tool_results[0].content == "3"
    assert result.final == "3"


async def test_the_tools_that_best_match_the_task_are_loaded_from_the_first_turn(tmp_path: Path) -> None:
    model = FunctionModel(lambda request: reply("ok"))
    rt = Runtime(
        model=model, workspace=tmp_path, store=False, extensions=Extensions(mcp_servers=calc(), auto_promote=1)
    )
    try:
        await rt.run("shout this text in capitals please")
    finally:
        await rt.aclose()
    assert SHOUT in names(model.requests[0]) and ADD not in names(model.requests[0])


async def test_without_tool_search_mcp_tools_are_ordinary_tools(tmp_path: Path) -> None:
    model = FunctionModel(lambda request: reply("ok"))
    rt = Runtime(
        model=model, workspace=tmp_path, store=False, extensions=Extensions(mcp_servers=calc(), tool_search=False)
    )
    try:
        await rt.run("go")
    finally:
        await rt.aclose()
    assert {ADD, SHOUT} <= names(model.requests[0]) and "tool_search" not in names(model.requests[0])
    assert "Deferred tools" not in model.requests[0].system


async def test_subagents_defer_mcp_tools_and_get_tool_search_whatever_their_lists_say(tmp_path: Path) -> None:
    types = [
        Subagent(name="inherits", description="Inherits.", instructions="i"),
        Subagent(name="adder", description="Adds.", instructions="a", tools=[ADD], disallowed_tools=["tool_search"]),
        Subagent(name="reader", description="Reads.", instructions="r", tools=["read_file"]),
    ]

    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            return call("complete", summary="done")
        if len(request.messages) > 1:
            return reply("done")
        tasks = [call("task", subagent_type=t.name, description=t.name, prompt="p") for t in types]
        return ModelResponse(parts=[c.parts[0] for c in tasks])

    model = FunctionModel(answer)
    rt = Runtime(
        model=model,
        workspace=tmp_path,
        store=False,
        subagents=types,
        extensions=Extensions(builtin_subagents=False, mcp_servers=calc()),
    )
    try:
        await rt.run("go", uploaded_files=None)
    finally:
        await rt.aclose()
    subs = {r.system.split("Instructions for the ")[-1].split(" agent")[0]: r for r in model.requests if not is_lead(r)}
    for name in ("inherits", "adder"):
        assert "tool_search" in names(subs[name]) and ADD not in names(subs[name])
        assert ADD in subs[name].system  # named in its prompt, loaded on demand
    assert names(subs["reader"]) == {"read_file", "complete"}


# -- MCP servers from a config file, and from the CLI ----------------------------------------------


def test_an_mcp_config_file_in_claudes_format_gives_servers(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "calc": {"command": sys.executable, "args": [str(SERVER)], "env": {"X": "1"}},
                    "docs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}},
                }
            }
        )
    )
    calc_server, docs = load_mcp_config(config)
    assert (calc_server.name, calc_server.command, calc_server.env) == (
        "calc",
        [sys.executable, str(SERVER)],
        {"X": "1"},
    )
    assert (docs.name, docs.url, docs.headers) == ("docs", "http://127.0.0.1:9/mcp", {"A": "b"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"servers": {}}', 'expected an object with "mcpServers"'),
        ('{"mcpServers": {"x": {"command": "a", "nope": 1}}}', "server 'x': unknown field(s) nope"),
        ('{"mcpServers": {"x": {}}}', "needs `command`"),
    ],
)
def test_a_bad_mcp_config_names_the_file_and_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(text)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_mcp_config(config)
    assert str(config) in str(caught.value)


def test_delegate_run_uses_the_mcp_servers_of_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER)]}}}))

    def lead(body: dict[str, Any]) -> Reply:
        tool_results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not tool_results:
            return Reply(tool_calls=[("tool_search", {"query": "add two integers"})])
        if len(tool_results) == 1:
            return Reply(tool_calls=[(ADD, {"a": 20, "b": 22})])
        return Reply(content=f"The sum is {tool_results[-1]}.")

    env = scrubbed_env()
    with OpenAIServer(lead) as server:
        env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "delegate",
                "run",
                "add them",
                "--json",
                "-m",
                "openai:m",
                "--mcp-config",
                str(config),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final"] == "The sum is 42."
    first_tools = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert "tool_search" in first_tools and ADD in first_tools and SHOUT not in first_tools  # routed: "add"


def test_ranking_weighs_the_name_over_the_description_and_ignores_common_words() -> None:
    tools = [
        Tool(name=n, description=d, parameters={"type": "object"}, function=lambda ctx, args: "")
        for n, d in [("git_log", "Show the commit history."), ("search_code", "Find text in the commit files.")]
    ]
    assert [t.name for t in rank("search the commit", tools)] == ["search_code", "git_log"]
    assert rank("the and with", tools) == []
    assert [t.name for t in rank("select:git_log, nope", tools)] == ["git_log"]
