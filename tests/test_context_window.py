"""Every model knows its context window, and no run dies of a request longer than it: the
conversation is compacted from the window without configuration, what still does not fit is cut
before sending, and a server that refuses a request as too long (as llama.cpp does) gets it
again, cut to the window it named. Played against a loopback server that refuses over-long
prompts with llama.cpp's own error."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Lead, LoopSettings, Runtime, ToolContext, tool
from delegate._events import Event
from delegate._messages import Message, ToolCallPart, ToolResultPart
from delegate.loop._fit import CUT_NOTE, fit_request
from delegate.models import (
    DEFAULT_CONTEXT_WINDOW,
    AnthropicModel,
    ModelRequest,
    OpenAIModel,
    context_window,
    estimate_tokens,
    known_context_window,
)
from delegate.models._window import overflow_limit
from tests.loopback_openai import Fault, OpenAIServer, Reply

COMPACTOR = "You compact a conversation"


class LlamaCpp:
    """Answers like llama.cpp's server with `n_ctx` tokens of context: a prompt longer than that
    (counted as llama.cpp would roughly, 4 characters a token) is refused with its error."""

    def __init__(self, n_ctx: int, turns: list[Reply]) -> None:
        self.n_ctx = n_ctx
        self.turns = list(turns)
        self.refused: list[int] = []
        self.sizes: list[int] = []
        self.summaries = 0

    def __call__(self, body: dict[str, Any]) -> Reply | Fault:
        tokens = len(json.dumps(body["messages"])) // 4
        if tokens > self.n_ctx:
            self.refused.append(tokens)
            message = (
                f"request ({tokens} tokens) exceeds the available context size ({self.n_ctx} tokens), try increasing it"
            )
            error = {
                "code": 400,
                "message": message,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": self.n_ctx,
            }
            return Fault(400, message, error=error)
        self.sizes.append(tokens)
        if body["messages"][0]["content"].startswith(COMPACTOR):
            self.summaries += 1
            return Reply(content="Summary: the agent read big files and found nothing of note.")
        return self.turns.pop(0)


@tool
def fetch(ctx: ToolContext, name: str) -> str:
    """Fetch a long document by name."""
    return f"{name}: " + "lorem ipsum dolor sit amet " * 1200  # about 32,000 characters


def fetches(*names: str) -> list[Reply]:
    return [Reply(tool_calls=[("fetch", {"name": n})], prompt_tokens=500) for n in names]


def run(server: OpenAIServer, tmp_path: Path, window: int | None, prompt: str = "Fetch the documents.") -> Any:
    model = OpenAIModel("small-model", base_url=server.base_url, api_key="k", context_window=window)
    events: list[Event] = []
    rt = Runtime(
        model=model,
        workspace=tmp_path,
        store=False,
        lead=Lead(tools=["task", fetch]),
        extensions=Extensions(builtin_subagents=False),
    )
    result = rt.run_sync(prompt, sinks=[events.append])
    return result, events


def test_a_tool_result_longer_than_the_window_is_cut_before_the_request_is_sent(tmp_path: Path) -> None:
    server_side = LlamaCpp(4096, [*fetches("a", "b"), Reply(content="Done.")])
    with OpenAIServer(server_side) as server:
        result, events = run(server, tmp_path, window=4096)

    assert server_side.refused == []
    assert (result.status, result.final) == ("completed", "Done.")
    assert max(server_side.sizes) <= 4096
    assert any(e.type == "context.cut" for e in events)


def test_a_long_conversation_is_compacted_from_the_window_without_configuration(tmp_path: Path) -> None:
    turns = [Reply(tool_calls=[("fetch", {"name": f"doc{i}"})], prompt_tokens=500) for i in range(6)]
    server_side = LlamaCpp(8192, [*turns, Reply(content="Done.")])
    with OpenAIServer(server_side) as server:
        result, events = run(server, tmp_path, window=8192)

    assert server_side.refused == []
    assert result.status == "completed"
    assert server_side.summaries >= 1
    assert any(e.type == "compaction" for e in events)


def test_a_server_that_refuses_a_request_as_too_long_gets_it_again_cut_to_the_window_it_named(
    tmp_path: Path,
) -> None:
    server_side = LlamaCpp(4096, [*fetches("a"), Reply(content="Done.")])
    with OpenAIServer(server_side) as server:
        result, events = run(server, tmp_path, window=200_000)  # the model claims far more than it has

    assert (result.status, result.final) == ("completed", "Done.")
    assert len(server_side.refused) == 1
    overflow = next(e for e in events if e.type == "context.overflow")
    assert (overflow.data["window"], overflow.data["now"]) == (200_000, 4096)
    assert "exceeds the available context size (4096 tokens)" in overflow.data["error"]


def test_a_window_set_on_the_runtime_overrides_what_the_model_says(tmp_path: Path) -> None:
    server_side = LlamaCpp(4096, [*fetches("a"), Reply(content="Done.")])
    with OpenAIServer(server_side) as server:
        model = OpenAIModel("gpt-4.1", base_url=server.base_url, api_key="k")  # the table says 1M
        rt = Runtime(
            model=model,
            workspace=tmp_path,
            store=False,
            lead=Lead(tools=["task", fetch]),
            loop=LoopSettings(context_window=4096),
        )
        result = rt.run_sync("Fetch a.")

    assert result.status == "completed"
    assert server_side.refused == []


def test_known_models_have_their_windows_from_the_table_and_others_the_default() -> None:
    assert known_context_window("openai:gpt-4o-mini") == 128_000
    assert known_context_window("gpt-4.1-nano") == 1_000_000
    assert known_context_window("gpt-4") == 8_192
    assert known_context_window("gpt-5-mini") == 272_000
    assert known_context_window("o3-mini") == 200_000
    assert known_context_window("anthropic:claude-sonnet-4-5") == 200_000
    assert known_context_window("anthropic:claude-3-5-haiku-latest") == 200_000
    assert known_context_window("Qwen/Qwen2.5-7B-Instruct") is None

    qwen = OpenAIModel("qwen2.5:7b", base_url="http://127.0.0.1:9/v1")
    assert context_window(qwen) == DEFAULT_CONTEXT_WINDOW
    assert context_window(OpenAIModel("qwen2.5:7b", base_url="http://127.0.0.1:9/v1", context_window=16_384)) == 16_384
    claude = AnthropicModel("claude-opus-4-1", api_key="k", context_window=100_000)
    assert context_window(claude) == 100_000
    assert context_window(claude, override=50_000) == 50_000


@pytest.mark.parametrize(
    ("status", "detail", "body", "expected"),
    [
        (400, "request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it", None, 8192),
        (400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens", None, 4096),
        (400, "invalid_request_error: prompt is too long: 210000 tokens > 200000 maximum", None, 200_000),
        (400, "the request exceeds the available context size", {"n_ctx": 2048}, 2048),
    ],
)
def test_a_refusal_for_length_is_recognised_with_the_window_it_names(
    status: int, detail: str, body: object, expected: int
) -> None:
    assert overflow_limit(status, detail, body) == (True, expected)


def test_other_refusals_are_not_taken_for_a_context_overflow() -> None:
    assert overflow_limit(400, "invalid value for temperature", None) == (False, None)
    assert overflow_limit(500, "context size exceeded", None) == (False, None)  # a 5xx is retried as it is


def _fan_out_turn(calls: int, results_chars: int) -> list[Message]:
    """A lead's conversation after one turn of `calls` parallel `task` calls, each answered with
    `results_chars` characters of results (100 subagents' at about 150 characters each)."""
    parts = [
        ToolCallPart(id=f"c{i}", name="task", arguments={"prompts": [f"q{i}-{j}" for j in range(100)]})
        for i in range(calls)
    ]
    results = [
        ToolResultPart(tool_call_id=f"c{i}", name="task", content=f"[completed] sub{i} " + "r" * results_chars)
        for i in range(calls)
    ]
    return [Message.user("fan out"), Message(role="assistant", parts=parts), Message(role="tool", parts=results)]


def test_the_request_after_a_fan_out_to_ten_thousand_subagents_is_cut_to_fit() -> None:
    # 100 results of 15,000 characters, as the lead gets them back from 10,000 subagents, and a
    # window the calls fit in: each result is cut to its start and end, the agent's record kept
    request = ModelRequest(system="lead", messages=_fan_out_turn(100, 15_000))
    assert estimate_tokens(request) > 500_000
    fitted = fit_request(request, 100_000)
    assert estimate_tokens(fitted) <= 100_000
    tool_results = fitted.messages[2].parts
    assert len(tool_results) == 100 and all(
        CUT_NOTE in p.content for p in tool_results if isinstance(p, ToolResultPart)
    )
    assert request.messages[2].parts[0].content.endswith("r" * 100)  # the agent's own record is not cut


def test_a_request_that_cannot_be_cut_to_fit_is_sent_as_far_as_cutting_goes() -> None:
    # 100 calls whose arguments alone are over the limit: every result is cut down to the shortest
    # a cut leaves, and then it is sent (this looped for ever: a cut of a text of 460 characters
    # and its note is 460 characters again). Run in a thread, so a loop fails the test.
    request = ModelRequest(system="lead", messages=_fan_out_turn(100, 15_000))
    limit = 20_000
    assert estimate_tokens(ModelRequest(system="lead", messages=request.messages[:2])) > limit
    got: list[ModelRequest] = []
    worker = threading.Thread(target=lambda: got.append(fit_request(request, limit)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert got, "fit_request never returned"
    results = [p for p in got[0].messages[2].parts if isinstance(p, ToolResultPart)]
    assert len(results) == 100 and all(len(p.content) < 500 for p in results)
    assert got[0].messages[1] == request.messages[1]  # the calls' arguments hold no text to cut
