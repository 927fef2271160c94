"""The `openai:` adapter, through the real SDK, against a real Chat Completions server on loopback."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from delegate import (
    MediaPart,
    Message,
    ModelError,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UserError,
)
from delegate.loop import AgentSpec, path_states, run_agent
from delegate.models import ModelRequest, OpenAIModel, RetryPolicy, ToolSpec, resolve_model
from delegate.models._constrained import constrained_format, mentioned_paths, parse_constrained
from delegate.subagents._complete import COMPLETE_TOOL
from delegate.tools import BUILTIN_TOOLS, Tool, ToolContext, tool
from delegate.workspace import Workspace

from .loopback_openai import Fault, OpenAIServer, Reply, scripted

ModelFactory = Callable[..., OpenAIModel]


@pytest.fixture
async def make_model() -> AsyncIterator[ModelFactory]:
    """Build models against a server with tiny retry delays, and close their clients afterwards."""
    made: list[OpenAIModel] = []

    def build(server: OpenAIServer, **options: Any) -> OpenAIModel:
        options = {"api_key": "sk-test", "retry": RetryPolicy(attempts=3, base_delay=0.001), **options}
        model = OpenAIModel("gpt-test", base_url=server.base_url, **options)
        made.append(model)
        return model

    yield build
    for model in made:
        await model.aclose()


def ask(text: str = "hi", *, tools: list[ToolSpec] | None = None, system: str = "Be brief.") -> ModelRequest:
    return ModelRequest(system=system, messages=[Message.user(text)], tools=tools or [])


WEATHER = ToolSpec(
    name="weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


# -- text, tool calls, usage --


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_text_reply_comes_back_as_the_response_text(make_model: ModelFactory, stream: bool) -> None:
    with OpenAIServer(scripted([Reply(content="Hello there, how are you doing today?")])) as server:
        response = await make_model(server, stream=stream).complete(ask())
    assert response.text == "Hello there, how are you doing today?"
    assert response.tool_calls == []
    assert response.finish_reason == "end_turn"
    assert response.model == "gpt-test"
    assert server.requests[0].get("stream", False) is stream


async def test_a_streamed_request_asks_for_usage_in_the_stream(make_model: ModelFactory) -> None:
    with OpenAIServer(scripted([Reply(content="ok")])) as server:
        await make_model(server).complete(ask())
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_tool_call_arguments_split_across_stream_chunks_are_joined(make_model: ModelFactory) -> None:
    arguments = {"city": "Reykjavík", "note": "a long enough value to be cut into several chunks"}
    with OpenAIServer(scripted([Reply(tool_calls=[("weather", arguments)])])) as server:
        response = await make_model(server).complete(ask(tools=[WEATHER]))
    [call] = response.tool_calls
    assert (call.name, call.arguments, call.raw_arguments) == ("weather", arguments, None)
    assert call.id.startswith("call_")
    assert response.finish_reason == "tool_use"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_several_tool_calls_in_one_turn_keep_their_order_and_ids(make_model: ModelFactory, stream: bool) -> None:
    calls: list[tuple[str, dict[str, Any] | str]] = [
        ("weather", {"city": "Oslo"}),
        ("weather", {"city": "Lima"}),
        ("clock", {}),
    ]
    with OpenAIServer(scripted([Reply(content="Checking.", tool_calls=calls)])) as server:
        response = await make_model(server, stream=stream).complete(ask(tools=[WEATHER]))
    assert response.text == "Checking."
    assert [(c.name, c.arguments) for c in response.tool_calls] == calls
    assert len({c.id for c in response.tool_calls}) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_usage_is_what_the_server_reported(make_model: ModelFactory, stream: bool) -> None:
    reply = Reply(content="ok", prompt_tokens=1234, completion_tokens=56, cached_tokens=1000)
    with OpenAIServer(scripted([reply])) as server:
        response = await make_model(server, stream=stream).complete(ask())
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.requests) == (
        1234,
        56,
        1000,
        1,
    )
    assert (server.total_usage.prompt_tokens, server.total_usage.completion_tokens) == (1234, 56)


async def test_a_reply_cut_at_the_token_limit_says_so(make_model: ModelFactory) -> None:
    with OpenAIServer(scripted([Reply(content="The answer is", finish_reason="length")])) as server:
        request = ask()
        request.max_tokens = 3
        response = await make_model(server).complete(request)
    assert response.finish_reason == "max_tokens"
    assert server.requests[0]["max_tokens"] == 3


async def test_malformed_tool_call_json_keeps_the_raw_text(make_model: ModelFactory) -> None:
    with OpenAIServer(scripted([Reply(tool_calls=[("weather", '{"city": "Oslo"')])])) as server:
        response = await make_model(server).complete(ask(tools=[WEATHER]))
    [call] = response.tool_calls
    assert call.name == "weather"
    assert call.arguments == {}
    assert call.raw_arguments == '{"city": "Oslo"'


async def test_tool_call_arguments_that_are_json_but_not_an_object_keep_the_raw_text(
    make_model: ModelFactory,
) -> None:
    with OpenAIServer(scripted([Reply(tool_calls=[("weather", '["Oslo"]')])])) as server:
        response = await make_model(server, stream=False).complete(ask(tools=[WEATHER]))
    assert response.tool_calls[0].raw_arguments == '["Oslo"]'


# -- retries and errors --


async def test_a_bad_request_fails_at_once_with_the_servers_message(make_model: ModelFactory) -> None:
    refusal = OpenAIServer(lambda body: Fault(400, "context length exceeded"))
    with refusal as server, pytest.raises(ModelError, match=r"HTTP 400.*context length exceeded"):
        await make_model(server).complete(ask())
    assert len(server.requests) == 1


async def test_a_request_that_times_out_is_retried(make_model: ModelFactory) -> None:
    def slow_then_fast(body: dict[str, Any]) -> Reply:
        if len(server.requests) == 1:
            time.sleep(1.0)
        return Reply(content="in time")

    with OpenAIServer(slow_then_fast) as server:
        response = await make_model(server, timeout=0.2, stream=False).complete(ask())
    assert response.text == "in time"
    assert len(server.requests) == 2


async def test_a_server_that_is_not_there_is_a_model_error_naming_it(make_model: ModelFactory) -> None:
    with OpenAIServer(scripted([])) as server:
        base_url = server.base_url
    model = OpenAIModel("gpt-test", base_url=base_url, api_key="k", retry=RetryPolicy(attempts=2, base_delay=0.001))
    try:
        with pytest.raises(ModelError, match=r"connection to .* failed"):
            await model.complete(ask())
    finally:
        await model.aclose()


async def test_an_exhausted_script_fails_the_test_loudly(make_model: ModelFactory) -> None:
    with (
        pytest.raises(AssertionError, match="exhausted"),
        OpenAIServer(scripted([Reply(content="one")])) as server,
    ):
        model = make_model(server)
        await model.complete(ask())
        with pytest.raises(ModelError, match="exhausted"):
            await model.complete(ask())


# -- configuration --


def test_no_key_and_no_base_url_is_a_user_error_saying_what_to_set() -> None:
    with pytest.raises(UserError, match=r"OPENAI_API_KEY.*OPENAI_BASE_URL"):
        OpenAIModel("gpt-test")
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        resolve_model("openai:gpt-test")


async def test_a_base_url_from_the_environment_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAIServer(scripted([Reply(content="local")])) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        model = resolve_model("openai:llama")
        assert model.name == "openai:llama"
        assert isinstance(model, OpenAIModel)
        try:
            response = await model.complete(ask())
        finally:
            await model.aclose()
    assert response.text == "local"
    assert server.headers[0]["authorization"] == "Bearer not-needed"
    assert server.requests[0]["model"] == "llama"


async def test_the_api_key_from_the_environment_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with OpenAIServer(scripted([Reply(content="ok")])) as server:
        model = OpenAIModel("gpt-test", base_url=server.base_url)
        try:
            await model.complete(ask())
        finally:
            await model.aclose()
    assert server.headers[0]["authorization"] == "Bearer sk-from-env"


def test_importing_delegate_does_not_import_the_openai_sdk() -> None:
    code = "import sys, delegate, delegate.models._openai; assert 'openai' not in sys.modules, 'openai imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_one_client_serves_hundreds_of_concurrent_requests(make_model: ModelFactory) -> None:
    everyone_arrived = threading.Event()

    def wait_for_everyone(body: dict[str, Any]) -> Reply:
        if server.in_flight >= 200:
            everyone_arrived.set()
        everyone_arrived.wait(timeout=30)
        return Reply(content="ok")

    with OpenAIServer(wait_for_everyone) as server:
        model = make_model(server, retry=RetryPolicy(attempts=1))
        responses = await asyncio.gather(*(model.complete(ask()) for _ in range(200)))
    assert all(r.text == "ok" for r in responses)
    assert server.max_in_flight == 200
    assert server.in_flight == 0
    assert len(model._clients) == 1  # pyright: ignore[reportPrivateUsage]


def test_a_model_can_serve_one_event_loop_after_another_closing_each_client() -> None:
    clients: list[Any] = []

    async def ask_once(model: OpenAIModel) -> str:
        response = await model.complete(ask())
        clients.append(model._clients[asyncio.get_running_loop()].client)  # pyright: ignore[reportPrivateUsage]
        return response.text

    with OpenAIServer(lambda body: Reply(content="ok")) as server:
        model = OpenAIModel("gpt-test", base_url=server.base_url, api_key="k")
        assert [asyncio.run(ask_once(model)) for _ in range(2)] == ["ok", "ok"]
    assert len(clients) == 2 and clients[0] is not clients[1]
    assert all(client.is_closed() for client in clients)


async def test_a_client_passed_in_is_used_without_the_sdks_own_retries() -> None:
    from openai import AsyncOpenAI

    with OpenAIServer(scripted([Fault(500, "boom"), Reply(content="never")])) as server:
        async with AsyncOpenAI(api_key="sk-mine", base_url=server.base_url) as client:
            model = OpenAIModel("gpt-test", client=client, retry=RetryPolicy(attempts=1))
            with pytest.raises(ModelError, match="HTTP 500"):
                await model.complete(ask())
        assert len(server.requests) == 1
        assert server.headers[0]["authorization"] == "Bearer sk-mine"


# -- request translation --


async def test_a_conversation_is_sent_with_the_system_prompt_first_and_tool_results_as_role_tool(
    make_model: ModelFactory,
) -> None:
    image = base64.b64encode(b"\x89PNG fake").decode()
    messages = [
        Message(role="user", parts=[TextPart(text="Look:"), MediaPart(media_type="image/png", data=image)]),
        Message(
            role="assistant",
            parts=[
                ReasoningPart(text="private thoughts"),
                TextPart(text="Two lookups."),
                ToolCallPart(id="c1", name="weather", arguments={"city": "Oslo"}),
                ToolCallPart(id="c2", name="weather", arguments={}, raw_arguments="{oops"),
            ],
        ),
        Message(
            role="tool",
            parts=[
                ToolResultPart(tool_call_id="c1", name="weather", content="sunny"),
                ToolResultPart(tool_call_id="c2", name="weather", content="Error: bad JSON", is_error=True),
            ],
        ),
    ]
    request = ModelRequest(system="You are a forecaster.", messages=messages, tools=[WEATHER], temperature=0.2)
    with OpenAIServer(scripted([Reply(content="Sunny in Oslo.")])) as server:
        await make_model(server).complete(request)
    body = server.requests[0]
    assert body["messages"] == [
        {"role": "system", "content": "You are a forecaster."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Two lookups.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: bad JSON"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": WEATHER.description,
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert body["temperature"] == 0.2
    assert "response_format" not in body


async def test_media_the_api_cannot_carry_becomes_a_note_in_the_text(make_model: ModelFactory) -> None:
    data = base64.b64encode(b"bytes").decode()
    parts: list[Any] = [
        MediaPart(media_type="audio/wav", data=data),
        MediaPart(media_type="application/pdf", data=data, name="spec.pdf"),
        MediaPart(media_type="video/mp4", data=data, name="clip.mp4"),
        MediaPart(media_type="text/plain", data=base64.b64encode(b"file text").decode(), name="notes.txt"),
        MediaPart(media_type="image/jpeg", url="https://example.com/cat.jpg"),
    ]
    request = ModelRequest(system="", messages=[Message(role="user", parts=parts)])
    with OpenAIServer(scripted([Reply(content="ok")])) as server:
        await make_model(server).complete(request)
    [user] = server.requests[0]["messages"]  # no system message when the prompt is empty
    audio, pdf, video, text, image = user["content"]
    assert audio == {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    assert pdf == {
        "type": "file",
        "file": {"filename": "spec.pdf", "file_data": f"data:application/pdf;base64,{data}"},
    }
    assert video["type"] == "text" and "clip.mp4" in video["text"] and "left out" in video["text"]
    assert text == {"type": "text", "text": "[notes.txt (text/plain)]\nfile text"}
    assert image == {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}


# -- the turn loop end to end --


@tool
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


async def run(model: OpenAIModel, tools: list[Tool], tmp_path: Path, prompt: str) -> Any:
    spec = AgentSpec(name="lead", instructions="Use the tools.", model=model, tools=tools, max_steps=5)
    ctx = ToolContext(run_id="r1", agent_id="a1", workspace=Workspace(root=tmp_path), emit=lambda event: None)
    return await run_agent(spec, ctx, [Message.user(prompt)])


async def test_a_malformed_tool_call_is_reported_to_the_model_which_then_calls_it_right(
    make_model: ModelFactory, tmp_path: Path
) -> None:
    replies = [
        Reply(tool_calls=[("add", '{"a": 1, "b": ')]),
        Reply(tool_calls=[("add", {"a": 1, "b": 2})]),
        Reply(content="1 + 2 = 3"),
    ]
    with OpenAIServer(scripted(replies)) as server:
        result = await run(make_model(server), [add], tmp_path, "What is 1 + 2?")
    assert result.status == "completed"
    assert result.final == "1 + 2 = 3"
    assert result.usage.requests == 3
    assert result.usage.input_tokens == server.total_usage.prompt_tokens

    second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    bad_call_id = second[2]["tool_calls"][0]["id"]
    assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == bad_call_id
    assert "not a valid JSON object" in second[3]["content"]
    assert third[-1] == {"role": "tool", "tool_call_id": third[-2]["tool_calls"][0]["id"], "content": "3"}


# -- constrained tool calling --


def json_only(text_for: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], Reply]:
    """A server that can only answer text, as a weak local server in JSON-schema mode does."""
    return lambda body: Reply(content=text_for(body))


async def test_constrained_mode_sends_a_schema_instead_of_tools_and_parses_the_reply(
    make_model: ModelFactory,
) -> None:
    answer = json.dumps({"tool": "weather", "arguments": {"city": "Oslo"}})
    with OpenAIServer(json_only(lambda body: answer)) as server:
        response = await make_model(server, constrained_tools=True).complete(ask(tools=[WEATHER]))
    body = server.requests[0]
    assert "tools" not in body
    assert body["response_format"]["type"] == "json_schema"
    assert body["messages"][0]["role"] == "system"
    assert "weather" in body["messages"][0]["content"] and "final_answer" in body["messages"][0]["content"]
    [call] = response.tool_calls
    assert (call.name, call.arguments, call.raw_arguments) == ("weather", {"city": "Oslo"}, None)
    assert response.finish_reason == "tool_use"


async def test_constrained_final_answer_becomes_the_reply_text(make_model: ModelFactory) -> None:
    answer = json.dumps({"tool": "final_answer", "arguments": {"text": "It is sunny."}})
    with OpenAIServer(json_only(lambda body: answer)) as server:
        response = await make_model(server, constrained_tools=True, stream=False).complete(ask(tools=[WEATHER]))
    assert response.text == "It is sunny."
    assert response.tool_calls == []


async def test_a_constrained_run_sends_tool_results_back_as_user_messages(
    make_model: ModelFactory, tmp_path: Path
) -> None:
    replies = [
        Reply(content='{"tool": "add", "arguments": {"a": 2, "b": 3}}'),
        Reply(content='{"tool": "final_answer", "arguments": {"text": "5"}}'),
    ]
    with OpenAIServer(scripted(replies)) as server:
        result = await run(make_model(server, constrained_tools=True), [add], tmp_path, "2 + 3?")
    assert result.final == "5"
    messages = server.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert json.loads(messages[2]["content"]) == {"tool": "add", "arguments": {"a": 2, "b": 3}}
    assert messages[3]["content"] == "Result of add:\n5\n"
    assert all("tools" not in body for body in server.requests)


async def test_constrained_mode_without_tools_asks_for_plain_text(make_model: ModelFactory) -> None:
    with OpenAIServer(scripted([Reply(content="a summary")])) as server:
        response = await make_model(server, constrained_tools=True).complete(ask())
    assert response.text == "a summary"
    assert "response_format" not in server.requests[0]


def test_the_constrained_schema_admits_one_call_of_each_tool_or_a_final_answer() -> None:
    schema = constrained_format([WEATHER], [])["json_schema"]["schema"]
    weather, final = schema["anyOf"]
    assert weather["properties"] == {"tool": {"const": "weather"}, "arguments": WEATHER.parameters}
    assert weather["required"] == ["tool", "arguments"]
    assert final["properties"]["tool"] == {"const": "final_answer"}
    assert final["properties"]["arguments"]["properties"] == {"text": {"type": "string"}}


class Point(BaseModel):
    x: int
    y: int


@tool
def plot(points: list[Point]) -> str:
    """Plot points."""
    return "ok"


def test_the_constrained_schema_keeps_nested_definitions_resolvable() -> None:
    schema = constrained_format([plot.spec], [])["json_schema"]["schema"]
    assert set(schema["$defs"]) == {"plot__Point"}
    items = schema["anyOf"][0]["properties"]["arguments"]["properties"]["points"]["items"]
    assert items == {"$ref": "#/$defs/plot__Point"}


@pytest.mark.parametrize(
    ("text", "name", "raw"),
    [
        (
            '{"tool": "weather", "arguments": {"city": "Os',
            "weather",
            '{"tool": "weather", "arguments": {"city": "Os',
        ),
        ('{"tool": "weather", "arguments": "Oslo"}', "weather", '"Oslo"'),
        ('{"arguments": {}}', "unknown", '{"arguments": {}}'),
    ],
    ids=["truncated", "arguments-not-an-object", "no-tool-name"],
)
def test_a_malformed_constrained_reply_becomes_a_call_the_loop_reports(text: str, name: str, raw: str) -> None:
    [call] = parse_constrained(text)
    assert isinstance(call, ToolCallPart)
    assert (call.name, call.arguments, call.raw_arguments) == (name, {}, raw)


def test_a_constrained_reply_that_is_not_json_is_taken_as_text() -> None:
    assert parse_constrained("Just prose.") == [TextPart(text="Just prose.")]
    [call] = parse_constrained('```json\n{"tool": "weather", "arguments": {"city": "Oslo"}}\n```')
    assert isinstance(call, ToolCallPart) and call.arguments == {"city": "Oslo"}


async def test_a_required_tool_choice_reaches_the_server_in_both_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ToolSpec(name="look", description="Look.", parameters={"type": "object", "properties": {}})
    request = ModelRequest(system="s", messages=[Message.user("hi")], tools=[spec], tool_choice="required")
    with OpenAIServer(lambda body: Reply(tool_calls=[("look", {})])) as server:
        native = OpenAIModel("m", base_url=server.base_url, api_key="k")
        await native.complete(request)
        await native.aclose()
    assert server.requests[0]["tool_choice"] == "required"
    with OpenAIServer(lambda body: Reply(content='{"tool": "look", "arguments": {}}')) as server:
        constrained = OpenAIModel("m", base_url=server.base_url, api_key="k", constrained_tools=True)
        response = await constrained.complete(request)
        await constrained.aclose()
    options = server.requests[0]["response_format"]["json_schema"]["schema"]["anyOf"]
    assert [o["properties"]["tool"]["const"] for o in options] == ["look"]
    assert "final_answer" not in server.requests[0]["messages"][0]["content"]
    assert response.tool_calls[0].name == "look"


async def test_a_named_tool_choice_reaches_the_server_in_both_modes() -> None:
    look = ToolSpec(name="look", description="Look.", parameters={"type": "object", "properties": {}})
    request = ModelRequest(system="s", messages=[Message.user("hi")], tools=[WEATHER, look], tool_choice="look")
    with OpenAIServer(lambda body: Reply(tool_calls=[("look", {})])) as server:
        native = OpenAIModel("m", base_url=server.base_url, api_key="k")
        await native.complete(request)
        await native.aclose()
    assert server.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "look"}}
    with OpenAIServer(lambda body: Reply(content='{"tool": "look", "arguments": {}}')) as server:
        constrained = OpenAIModel("m", base_url=server.base_url, api_key="k", constrained_tools=True)
        await constrained.complete(request)
        await constrained.aclose()
    options = server.requests[0]["response_format"]["json_schema"]["schema"]["anyOf"]
    assert [o["properties"]["tool"]["const"] for o in options] == ["look"]
    assert server.requests[0]["messages"][0]["content"].endswith('Now call "look".')


def test_a_constrained_call_gives_one_of_the_parameters_a_tool_needs_one_of() -> None:
    spec = ToolSpec(
        name="task",
        description="Delegate.",
        parameters={
            "type": "object",
            "properties": {"label": {"type": "string"}, "prompt": {"type": "string"}, "prompts": {"type": "array"}},
            "required": ["label"],
        },
        one_of=("prompts", "prompt"),
    )
    schema = constrained_format([spec], [], "task")["json_schema"]["schema"]
    arguments = [o["properties"]["arguments"] for o in schema["anyOf"]]
    assert [(sorted(a["properties"]), a["required"]) for a in arguments] == [
        (["label", "prompts"], ["label", "prompts"]),
        (["label", "prompt"], ["label", "prompt"]),
    ]


async def test_lean_tools_leave_out_the_optional_arguments_that_name_no_path() -> None:
    tools = [BUILTIN_TOOLS["read_file"].spec, COMPLETE_TOOL.spec]
    request = ModelRequest(system="s", messages=[Message.user("Read a.txt.")], tools=tools)
    with OpenAIServer(lambda body: Reply(content='{"tool": "read_file", "arguments": {"path": "a.txt"}}')) as server:
        model = OpenAIModel("m", base_url=server.base_url, api_key="k", constrained_tools=True, lean_tools=True)
        await model.complete(request)
        await model.aclose()
    options = server.requests[0]["response_format"]["json_schema"]["schema"]["anyOf"]
    arguments = {o["properties"]["tool"]["const"]: o["properties"]["arguments"]["properties"] for o in options}
    assert sorted(arguments["read_file"]) == ["path"]  # no offset or limit to make up
    assert sorted(arguments["complete"]) == ["paths", "summary"]
    assert "Arguments: path (string)\n" in server.requests[0]["messages"][0]["content"]


# -- grounding: a constrained model names only the paths it was told of --


def grounded_options(
    messages: list[Message], choice: str = "auto", workspace: Workspace | None = None
) -> dict[str, dict[str, Any]]:
    tools = [BUILTIN_TOOLS["read_file"].spec, BUILTIN_TOOLS["write_file"].spec, COMPLETE_TOOL.spec]
    states = path_states(workspace, messages) if workspace is not None else None
    schema = constrained_format(tools, messages, choice, states)["json_schema"]["schema"]
    return {o["properties"]["tool"]["const"]: o["properties"]["arguments"]["properties"] for o in schema["anyOf"]}


def test_paths_come_from_the_task_and_tool_results_in_order_of_mention() -> None:
    messages = [
        Message.user("Summarise docs/a.txt into out/a.md (see https://example.com/x.html, e.g. notes.txt)."),
        Message(role="assistant", parts=[ToolCallPart(id="c1", name="list_dir", arguments={"path": "docs"})]),
        Message(
            role="tool",
            parts=[ToolResultPart(tool_call_id="c1", name="list_dir", content="docs/a.txt\ndocs/b.v2.json")],
        ),
    ]
    assert mentioned_paths(messages) == ["docs/a.txt", "out/a.md", "notes.txt", "docs/b.v2.json"]


def test_path_parameters_are_narrowed_to_mentioned_paths_no_call_has_named_yet() -> None:
    task = Message.user("Summarise docs/a.txt into out/a.md.")
    options = grounded_options([task])
    assert options["read_file"]["path"]["enum"] == ["docs/a.txt", "out/a.md"]
    assert options["write_file"]["path"]["enum"] == ["docs/a.txt", "out/a.md"]
    assert "enum" not in options["write_file"]["content"]
    assert options["complete"]["paths"]["items"] == {"type": "string", "enum": ["docs/a.txt", "out/a.md"]}
    read = Message(role="assistant", parts=[ToolCallPart(id="c1", name="read_file", arguments={"path": "docs/a.txt"})])
    result = Message(role="tool", parts=[ToolResultPart(tool_call_id="c1", name="read_file", content="1\tHello")])
    options = grounded_options([task, read, result])
    assert options["read_file"]["path"]["enum"] == ["out/a.md"]
    assert options["write_file"]["path"]["enum"] == ["out/a.md"]  # never over the file it read
    assert options["complete"]["paths"]["items"]["enum"] == ["docs/a.txt", "out/a.md"]


def test_a_tool_with_no_path_left_is_not_offered_and_a_required_one_gives_way() -> None:
    task = Message.user("Write the answer to out/a.md.")
    wrote = Message(
        role="assistant",
        parts=[ToolCallPart(id="c1", name="write_file", arguments={"path": "out/a.md", "content": "x"})],
    )
    done = Message(role="tool", parts=[ToolResultPart(tool_call_id="c1", name="write_file", content="created")])
    assert sorted(grounded_options([task, wrote, done])) == ["complete", "final_answer"]
    assert sorted(grounded_options([task, wrote, done], "write_file")) == ["complete"]
    read_only = [BUILTIN_TOOLS["read_file"].spec]
    schema = constrained_format(read_only, [Message.user("Say hello.")], "read_file")["json_schema"]["schema"]
    assert [o["properties"]["tool"]["const"] for o in schema["anyOf"]] == ["final_answer"]
    assert "enum" not in grounded_options([Message.user("Say hello.")])["complete"]["paths"]["items"]


def test_in_a_workspace_reads_name_existing_files_and_writes_new_ones_only(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("A\n")
    (tmp_path / "old.md").write_text("keep me\n")
    (tmp_path.parent / "outside.txt").write_text("secret\n")
    (tmp_path / "link.txt").symlink_to(tmp_path.parent / "outside.txt")
    task = Message.user("Summarise docs/a.txt into out/a.md; see old.md, link.txt and missing.txt.")
    states = path_states(Workspace.open(tmp_path), [task])
    assert states == {
        "docs/a.txt": "file",
        "out/a.md": "absent",
        "old.md": "file",
        "link.txt": "other",  # it leads out of the workspace
        "missing.txt": "absent",
    }
    options = grounded_options([task], workspace=Workspace.open(tmp_path))
    assert options["read_file"]["path"]["enum"] == ["docs/a.txt", "old.md"]
    assert options["write_file"]["path"]["enum"] == ["out/a.md", "missing.txt"]
    assert options["complete"]["paths"]["items"]["enum"] == ["docs/a.txt", "old.md"]


async def test_a_constrained_agent_writes_where_its_task_says(tmp_path: Path) -> None:
    """Through the real SDK and server: the schema the server gets holds the model to the task's paths."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("Bread needs flour, water, salt and time.\n")

    def server_model(body: dict[str, Any]) -> Reply:
        options = {
            o["properties"]["tool"]["const"]: o["properties"]["arguments"]["properties"]
            for o in body["response_format"]["json_schema"]["schema"]["anyOf"]
        }
        if "read_file" in options and "enum" in options["read_file"]["path"]:
            first = options["read_file"]["path"]["enum"][0]
            if first == "docs/a.txt":
                return Reply(content=json.dumps({"tool": "read_file", "arguments": {"path": first}}))
        if "write_file" in options:
            path = options["write_file"]["path"]["enum"][-1]
            return Reply(content=json.dumps({"tool": "write_file", "arguments": {"path": path, "content": "Bread."}}))
        return Reply(content=json.dumps({"tool": "complete", "arguments": {"summary": "done", "paths": ["out/a.md"]}}))

    with OpenAIServer(server_model) as server:
        model = OpenAIModel("m", base_url=server.base_url, api_key="k", constrained_tools=True)
        tools = [BUILTIN_TOOLS["read_file"], BUILTIN_TOOLS["write_file"], COMPLETE_TOOL]
        spec = AgentSpec(name="a", instructions="Work.", model=model, tools=tools, first_tool_choice="read_file")
        ctx = ToolContext(run_id="r", agent_id="a", workspace=Workspace.open(tmp_path), emit=lambda e: None)
        result = await run_agent(spec, ctx, [Message.user("Summarise docs/a.txt into out/a.md.")])
        await model.aclose()
    assert result.status == "completed" and result.stop_reason == "stop_tool"
    assert (tmp_path / "out" / "a.md").read_text() == "Bread."
    first = server.requests[0]["response_format"]["json_schema"]["schema"]["anyOf"]
    assert [o["properties"]["tool"]["const"] for o in first] == ["read_file"]
    assert "Bread needs flour" in server.requests[1]["messages"][-1]["content"]
