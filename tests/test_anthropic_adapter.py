"""The `anthropic:` adapter, through the real `anthropic` SDK, against a real loopback HTTP server."""

from __future__ import annotations

import asyncio
import base64
import gc
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from delegate._errors import ModelError, UserError
from delegate._events import Event
from delegate._messages import MediaPart, Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from delegate._usage import Usage
from delegate.loop import AgentSpec, run_agent
from delegate.models import ModelRequest, RetryPolicy, ToolSpec, resolve_model
from delegate.models._anthropic import REDACTED_PREFIX, AnthropicModel
from delegate.tools import ToolContext, tool
from delegate.workspace import Workspace

from .loopback_anthropic import AnthropicServer, Fault, Reply, scripted

MakeModel = Callable[..., AnthropicModel]


@pytest.fixture(autouse=True)
def no_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's key, base URL or profile."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)


@pytest.fixture
async def make_model() -> AsyncIterator[MakeModel]:
    made: list[AnthropicModel] = []

    def make(server: AnthropicServer, **options: Any) -> AnthropicModel:
        options.setdefault("api_key", "test-key")
        options.setdefault("retry", RetryPolicy(base_delay=0.001))
        model = AnthropicModel("claude-test", base_url=server.base_url, **options)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


def ask(text: str = "hello", **options: Any) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user(text)], **options)


# answers


@pytest.mark.parametrize("stream", [True, False])
async def test_a_text_answer_comes_back_as_text(make_model: MakeModel, stream: bool) -> None:
    with AnthropicServer(scripted([Reply("Hello there, how can I help?")])) as server:
        model = make_model(server, stream=stream)
        response = await model.complete(ask())
    assert response.text == "Hello there, how can I help?"
    assert response.finish_reason == "end_turn"
    assert response.tool_calls == []
    assert server.requests[0]["stream"] is stream
    assert model.name == "anthropic:claude-test"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_tool_use_becomes_a_tool_call_with_parsed_arguments(make_model: MakeModel, stream: bool) -> None:
    arguments = {
        "path": "docs/auth.md",
        "lines": [1, 20],
        "options": {"follow": True, "note": 'a "quoted" word'},
    }
    with AnthropicServer(scripted([Reply("Reading it.", tool_uses=[("read_file", arguments)])])) as server:
        response = await make_model(server, stream=stream).complete(ask())
    assert response.finish_reason == "tool_use"
    assert response.text == "Reading it."
    [call] = response.tool_calls
    assert (call.id, call.name, call.arguments, call.raw_arguments) == (
        "toolu_0001_0",
        "read_file",
        arguments,
        None,
    )


async def test_several_tool_uses_of_one_turn_keep_their_order_and_ids(make_model: MakeModel) -> None:
    uses: list[tuple[str, dict[str, Any] | str]] = [
        ("grep", {"pattern": "login"}),
        ("read_file", {"path": "a.py"}),
        ("list_dir", {}),
    ]
    with AnthropicServer(scripted([Reply(tool_uses=uses)])) as server:
        response = await make_model(server).complete(ask())
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_0001_0", "grep", {"pattern": "login"}),
        ("toolu_0001_1", "read_file", {"path": "a.py"}),
        ("toolu_0001_2", "list_dir", {}),
    ]
    assert response.text == ""


async def test_tool_input_that_is_not_json_is_kept_as_text_for_the_loop_to_report(
    make_model: MakeModel,
) -> None:
    with AnthropicServer(scripted([Reply(tool_uses=[("write_file", '{"path": "a.md", "content": "unfinished')])])) as s:
        response = await make_model(s).complete(ask())
    [call] = response.tool_calls
    assert call.arguments == {}
    assert call.raw_arguments == '{"path": "a.md", "content": "unfinished'


@pytest.mark.parametrize("stream", [True, False])
async def test_thinking_comes_back_as_reasoning_and_is_sent_back_signed(make_model: MakeModel, stream: bool) -> None:
    first = Reply(thinking="The user wants the file; I should read it.", signature="sig-123", tool_uses=[("read", {})])
    with AnthropicServer(scripted([first, Reply("Done.")])) as server:
        model = make_model(server, stream=stream)
        response = await model.complete(ask())
        assert response.reasoning == [
            ReasoningPart(text="The user wants the file; I should read it.", signature="sig-123")
        ]
        result = ToolResultPart(tool_call_id=response.tool_calls[0].id, name="read", content="contents")
        history = [
            Message.user("hello"),
            Message(role="assistant", parts=list(response.parts)),
            Message(role="tool", parts=[result]),
        ]
        await model.complete(ModelRequest(system="", messages=history))
    assistant = server.requests[1]["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "The user wants the file; I should read it.",
        "signature": "sig-123",
    }
    assert assistant["content"][1]["type"] == "tool_use"


@pytest.mark.parametrize("stream", [True, False])
async def test_usage_with_cache_tokens_matches_what_the_server_reported(make_model: MakeModel, stream: bool) -> None:
    replies = [
        Reply(
            "one",
            input_tokens=120,
            output_tokens=7,
            cache_read_input_tokens=3000,
            cache_creation_input_tokens=40,
        ),
        Reply("two", input_tokens=15, output_tokens=9, cache_read_input_tokens=3040),
    ]
    with AnthropicServer(scripted(replies)) as server:
        model = make_model(server, stream=stream)
        total = Usage()
        for _ in replies:
            total.add((await model.complete(ask())).usage)
    assert total == Usage(
        input_tokens=server.total_usage["input_tokens"],
        output_tokens=server.total_usage["output_tokens"],
        cache_read_tokens=server.total_usage["cache_read_input_tokens"],
        cache_write_tokens=server.total_usage["cache_creation_input_tokens"],
        requests=2,
    )
    assert total == Usage(input_tokens=135, output_tokens=16, cache_read_tokens=6040, cache_write_tokens=40, requests=2)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("max_tokens", "max_tokens"), ("stop_sequence", "end_turn"), ("refusal", "other")],
)
async def test_stop_reasons_map_to_the_loops_vocabulary(make_model: MakeModel, reason: str, expected: str) -> None:
    with AnthropicServer(scripted([Reply("cut", stop_reason=reason)])) as server:
        response = await make_model(server).complete(ask())
    assert response.finish_reason == expected


async def test_max_tokens_comes_from_the_request_else_from_the_model(make_model: MakeModel) -> None:
    with AnthropicServer(scripted([Reply("a"), Reply("b")])) as server:
        model = make_model(server, max_tokens=1234)
        await model.complete(ask())
        await model.complete(ask(max_tokens=99, temperature=0.2))
    assert server.requests[0]["max_tokens"] == 1234
    assert server.requests[1]["max_tokens"] == 99
    assert "temperature" not in server.requests[1]  # the Messages API of anthropic 2.x has none


@pytest.mark.parametrize(
    ("choice", "sent"), [("auto", None), ("required", {"type": "any"}), ("look", {"type": "tool", "name": "look"})]
)
async def test_the_tool_choice_reaches_the_api(make_model: MakeModel, choice: str, sent: object) -> None:
    look = ToolSpec(name="look", description="Look.", parameters={"type": "object", "properties": {}})
    with AnthropicServer(scripted([Reply(tool_uses=[("look", {})])])) as server:
        request = ModelRequest(system="s", messages=[Message.user("hi")], tools=[look], tool_choice=choice)
        await make_model(server).complete(request)
    assert server.requests[0].get("tool_choice") == sent


# failures and retries


async def test_an_overloaded_api_is_retried_until_it_answers(make_model: MakeModel) -> None:
    answers = [Fault(529, "Overloaded"), Fault(529, "Overloaded"), Reply("finally")]
    with AnthropicServer(scripted(answers)) as server:
        response = await make_model(server).complete(ask())
    assert response.text == "finally"
    assert len(server.requests) == 3


async def test_overload_reported_inside_a_stream_is_retried(make_model: MakeModel) -> None:
    with AnthropicServer(scripted([Fault(529, "Overloaded", in_stream=True), Reply("after")])) as server:
        response = await make_model(server).complete(ask())
    assert response.text == "after"
    assert len(server.requests) == 2


async def test_a_wrong_key_fails_at_once_with_a_hint(make_model: MakeModel) -> None:
    server = AnthropicServer(scripted([Reply("never")]), api_key="the-right-key")
    with server, pytest.raises(ModelError) as caught:
        await make_model(server, api_key="a-wrong-key").complete(ask())
    assert len(server.requests) == 1
    assert "401" in str(caught.value)
    assert "ANTHROPIC_API_KEY" in str(caught.value)


@pytest.mark.parametrize("status", [400, 403])
async def test_a_bad_request_or_a_forbidden_one_is_not_retried(make_model: MakeModel, status: int) -> None:
    with (
        AnthropicServer(lambda body: Fault(status, "no")) as server,
        pytest.raises(ModelError, match=str(status)),
    ):
        await make_model(server).complete(ask())
    assert len(server.requests) == 1


async def test_a_server_that_cannot_be_reached_fails_after_the_attempts(make_model: MakeModel) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = AnthropicModel(
        "claude-test",
        base_url=f"http://127.0.0.1:{port}",
        api_key="k",
        retry=RetryPolicy(attempts=3, base_delay=0.001),
    )
    try:
        with pytest.raises(ModelError, match=r"after 3 attempts: connection to .* failed: ConnectError"):
            await model.complete(ask())
    finally:
        await model.aclose()


async def test_many_concurrent_calls_share_one_model(make_model: MakeModel) -> None:
    with AnthropicServer(lambda body: Reply(body["messages"][0]["content"][0]["text"], delay=0.4)) as server:
        model = make_model(server)
        answers = await asyncio.gather(*(model.complete(ask(f"q{i}")) for i in range(40)))
    assert [a.text for a in answers] == [f"q{i}" for i in range(40)]
    assert server.max_in_flight == 40


# translation


async def test_the_request_uses_the_system_param_tool_result_blocks_and_alternating_roles(
    make_model: MakeModel,
) -> None:
    history = [
        Message.user("Fix the bug."),
        Message.user("It is in auth.py.", hidden=True, name="note"),
        Message(
            role="assistant",
            parts=[
                ReasoningPart(text="unsigned thoughts are not sent"),
                TextPart(text="Looking."),
                ToolCallPart(id="t1", name="read_file", arguments={"path": "auth.py"}),
                ToolCallPart(id="t2", name="grep", arguments={"pattern": "token"}),
            ],
        ),
        Message(
            role="tool",
            parts=[
                ToolResultPart(tool_call_id="t1", name="read_file", content="def login(): ..."),
                ToolResultPart(tool_call_id="t2", name="grep", content="Error: bad pattern", is_error=True),
            ],
        ),
        Message.user("Also check the tests."),
    ]
    spec = ToolSpec(name="read_file", description="Read a file.", parameters={"type": "object", "properties": {}})
    with AnthropicServer(scripted([Reply("ok")])) as server:
        await make_model(server).complete(ModelRequest(system="Be careful.", messages=history, tools=[spec]))
    body = server.requests[0]
    assert body["system"] == "Be careful."
    assert body["model"] == "claude-test"
    assert body["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Fix the bug."},
                {"type": "text", "text": "It is in auth.py."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "auth.py"}},
                {"type": "tool_use", "id": "t2", "name": "grep", "input": {"pattern": "token"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": False,
                    "content": "def login(): ...",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "content": "Error: bad pattern",
                },
                {"type": "text", "text": "Also check the tests."},
            ],
        },
    ]


async def test_media_parts_become_image_and_document_blocks(make_model: MakeModel) -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    notes = base64.b64encode(b"plain notes").decode()
    parts: list[Any] = [
        TextPart(text="Look at these."),
        MediaPart(media_type="image/png", data=png),
        MediaPart(media_type="image/jpeg", url="https://example.com/cat.jpg"),
        MediaPart(media_type="application/pdf", url="https://example.com/spec.pdf", name="spec.pdf"),
        MediaPart(media_type="text/plain", data=notes, name="notes.txt"),
        MediaPart(media_type="audio/wav", data="AAAA", name="hum.wav"),
    ]
    with AnthropicServer(scripted([Reply("seen")])) as server:
        await make_model(server).complete(ModelRequest(system="", messages=[Message(role="user", parts=parts)]))
    body = server.requests[0]
    assert "system" not in body
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Look at these."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {"type": "url", "url": "https://example.com/spec.pdf"},
            "title": "spec.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"},
            "title": "notes.txt",
        },
        {"type": "text", "text": "[attachment hum.wav (audio/wav) cannot be shown to this model]"},
    ]


async def test_redacted_thinking_goes_back_as_it_came(make_model: MakeModel) -> None:
    history = [
        Message.user("q"),
        Message(
            role="assistant",
            parts=[ReasoningPart(text="", signature=REDACTED_PREFIX + "opaque"), TextPart(text="a")],
        ),
        Message.user("next"),
    ]
    with AnthropicServer(scripted([Reply("ok")])) as server:
        await make_model(server).complete(ModelRequest(system="", messages=history))
    assert server.requests[0]["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "a"},
    ]


# configuration


def test_a_missing_key_is_a_user_error_that_says_what_to_set() -> None:
    with pytest.raises(UserError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-test")
    with pytest.raises(UserError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic:claude-test")


async def test_the_key_and_base_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with AnthropicServer(scripted([Reply("from env")]), api_key="env-key") as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = resolve_model("anthropic:claude-test")
        assert isinstance(model, AnthropicModel)
        async with model:
            response = await model.complete(ask())
    assert response.text == "from env"
    assert model.name == "anthropic:claude-test"


def test_one_model_serves_several_event_loops_and_leaves_no_connection_open() -> None:
    """`asyncio.run` twice with one model (as a sync caller does): each loop gets its own
    connections, closed when that loop shuts down (a leak would fail this test as a warning)."""
    with AnthropicServer(lambda body: Reply("again")) as server:
        model = AnthropicModel("claude-test", base_url=server.base_url, api_key="k")
        answers = [asyncio.run(model.complete(ask())).text for _ in range(3)]
        del model
        gc.collect()
    assert answers == ["again"] * 3


# end to end


@tool
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


async def test_an_agent_calls_a_tool_and_answers_through_the_api(make_model: MakeModel, tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply | Fault:
        last = body["messages"][-1]
        if last["content"][0]["type"] == "tool_result":
            return Reply("2 + 3 = 5", input_tokens=30, output_tokens=6)
        return Reply("Let me add.", tool_uses=[("add", {"a": 2, "b": 3})], input_tokens=20, output_tokens=8)

    events: list[Event] = []
    ctx = ToolContext(run_id="r1", agent_id="lead", workspace=Workspace.open(tmp_path), emit=events.append)
    with AnthropicServer(responder) as server:
        spec = AgentSpec(name="lead", instructions="Use tools.", model=make_model(server), tools=[add])
        result = await run_agent(spec, ctx, [Message.user("What is 2 + 3?")])
    assert result.status == "completed"
    assert result.final == "2 + 3 = 5"
    assert result.usage == Usage(input_tokens=50, output_tokens=14, requests=2, cost_usd=None)  # no price on loopback
    first, second = server.requests
    assert first["system"] == "Use tools."
    assert first["tools"][0]["name"] == "add"
    assert first["tools"][0]["input_schema"]["required"] == ["a", "b"]
    assert second["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_0001_0", "is_error": False, "content": "5"}],
    }
