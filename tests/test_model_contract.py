"""The contract every provider adapter keeps, run against both loopback servers through the real SDKs.

An answer counts only when it is whole: a cut stream, a missing finish reason, an HTML page where
the API's JSON belongs are retried like an overload, and a `ModelError` when the attempts run out.
Every call ends within its deadline, however slowly the server dribbles. Both adapters share one
retry policy (attempts, backoff, `Retry-After`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from delegate import (
    AnthropicModel,
    Event,
    Extensions,
    Lead,
    Message,
    ModelError,
    ModelOutputError,
    OpenAIModel,
    RetryPolicy,
    Runtime,
    Store,
    ToolContext,
    UserError,
    Workspace,
)
from delegate.batch import Batches, BatchWorker
from delegate.loop import AgentSpec, run_agent
from delegate.models import Model, ModelProfile, ModelRequest, ModelResponse, Pricing, context_window
from delegate.testing import FunctionModel, call, reply
from delegate.tools import BUILTIN_TOOLS
from tests.cli_support import scrubbed_env

from . import loopback_anthropic, loopback_openai
from .batch_support import FAST, batches_fixture, finished  # noqa: F401
from .loopback_misbehaviour import Html

FASTEST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.005)


@dataclass(frozen=True)
class Provider:
    """One adapter with its loopback server: what a contract test needs to know of either."""

    name: str
    serve: Callable[[Any], AbstractContextManager[Any]]
    reply: Callable[..., Any]
    fault: Callable[..., Any]
    build: Callable[..., Model]
    scripted: Callable[[list[Any]], Any]


OPENAI = Provider(
    name="openai",
    serve=loopback_openai.OpenAIServer,
    reply=loopback_openai.Reply,
    fault=loopback_openai.Fault,
    build=lambda server, **options: OpenAIModel("gpt-test", base_url=server.base_url, api_key="k", **options),
    scripted=loopback_openai.scripted,
)
ANTHROPIC = Provider(
    name="anthropic",
    serve=loopback_anthropic.AnthropicServer,
    reply=loopback_anthropic.Reply,
    fault=loopback_anthropic.Fault,
    build=lambda server, **options: AnthropicModel("claude-test", base_url=server.base_url, api_key="k", **options),
    scripted=loopback_anthropic.scripted,
)


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda p: p.name)
def provider(request: pytest.FixtureRequest) -> Provider:
    return request.param


@pytest.fixture(params=[True, False], ids=["streamed", "plain"])
def stream(request: pytest.FixtureRequest) -> bool:
    return request.param


@dataclass
class Harness:
    provider: Provider
    stream: bool
    made: list[Model]

    def serve(self, answers: list[Any] | Callable[[dict[str, Any]], Any]) -> AbstractContextManager[Any]:
        responder = self.provider.scripted(answers) if isinstance(answers, list) else answers
        return self.provider.serve(responder)

    def model(self, server: Any, **options: Any) -> Model:
        options = {"retry": FASTEST, "stream": self.stream, **options}
        model = self.provider.build(server, **options)
        self.made.append(model)
        return model

    def reply(self, text: str = "", **options: Any) -> Any:
        return self.provider.reply(content=text, **options)

    def fault(self, status: int, message: str, **options: Any) -> Any:
        return self.provider.fault(status, message, **options)


@pytest.fixture
async def harness(provider: Provider, stream: bool) -> AsyncIterator[Harness]:
    made: list[Model] = []
    yield Harness(provider, stream, made)
    for model in made:
        await model.aclose()


def ask(text: str = "hello") -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[Message.user(text)])


BAD_ANSWERS = {
    "cut": {"cut": True},
    "no_finish_reason": {"no_finish": True},
}


# -- answers are checked before they count --


@pytest.mark.parametrize("misbehaviour", list(BAD_ANSWERS), ids=list(BAD_ANSWERS))
async def test_a_bad_answer_is_asked_again_and_the_whole_one_counts(harness: Harness, misbehaviour: str) -> None:
    bad = harness.reply("half an ans", **BAD_ANSWERS[misbehaviour])
    with harness.serve([bad, harness.reply("a whole answer")]) as server:
        response = await harness.model(server).complete(ask())
    assert response.text == "a whole answer"
    assert response.finish_reason == "end_turn"
    assert len(server.requests) == 2


@pytest.mark.parametrize("misbehaviour", list(BAD_ANSWERS), ids=list(BAD_ANSWERS))
async def test_a_bad_answer_every_time_is_a_model_error_never_the_cut_text(harness: Harness, misbehaviour: str) -> None:
    with (
        harness.serve(lambda body: harness.reply("half an ans", **BAD_ANSWERS[misbehaviour])) as server,
        pytest.raises(ModelOutputError) as caught,
    ):
        await harness.model(server).complete(ask())
    assert len(server.requests) == 3
    message = str(caught.value)
    assert "after 3 attempts" in message
    words = {"cut": ("incomplete", "not"), "no_finish_reason": ("finish_reason", "stop_reason")}[misbehaviour]
    assert any(word in message for word in words), message


async def test_a_stream_without_its_end_marker_is_not_an_answer(provider: Provider) -> None:
    harness = Harness(provider, stream=True, made=[])
    with harness.serve([harness.reply("all of it", done=False), harness.reply("all of it, ended")]) as server:
        model = harness.model(server)
        response = await model.complete(ask())
        await model.aclose()  # type: ignore[attr-defined]
    assert response.text == "all of it, ended"
    assert len(server.requests) == 2


async def test_an_html_page_from_a_proxy_is_retried_and_then_a_model_error(harness: Harness) -> None:
    with harness.serve([Html(), harness.reply("the real answer")]) as server:
        response = await harness.model(server).complete(ask())
    assert response.text == "the real answer"
    with harness.serve(lambda body: Html()) as server, pytest.raises(ModelOutputError) as caught:
        await harness.model(server).complete(ask())
    assert len(server.requests) == 3
    assert "after 3 attempts" in str(caught.value)
    assert "It works!" in str(caught.value)  # the message shows what came instead


async def test_an_agent_whose_answers_are_always_cut_ends_in_error_not_completed(
    harness: Harness, tmp_path: Path
) -> None:
    with harness.serve(lambda body: harness.reply("The answer is 4", cut=True)) as server:
        spec = AgentSpec(name="lead", instructions="Answer.", model=harness.model(server), tools=[])
        ctx = ToolContext(run_id="r", agent_id="lead", workspace=Workspace.open(tmp_path), emit=lambda e: None)
        result = await run_agent(spec, ctx, [Message.user("2 + 2?")])
    assert result.status == "error"
    assert result.stop_reason == "model_error"
    assert result.final in ("", None)
    assert result.error is not None and "after 3 attempts" in result.error


# -- deadlines --


async def test_a_dribbling_answer_ends_at_the_calls_deadline(harness: Harness) -> None:
    """One chunk every 50 ms keeps every read in time; only the whole-call deadline stops it."""
    with (
        harness.serve(lambda body: harness.reply("never ending", dribble=0.05)) as server,
        pytest.raises(ModelError, match=r"no whole answer within the 0\.5 s deadline") as caught,
    ):
        await harness.model(server, deadline=0.5, timeout=30.0).complete(ask())
    assert "deadline=" in str(caught.value)  # it says what to change
    assert len(server.requests) == 1


async def test_a_retry_after_longer_than_the_deadline_fails_at_once_saying_so(harness: Harness) -> None:
    with (
        harness.serve(lambda body: harness.fault(429, "slow down", retry_after=60)) as server,
        pytest.raises(ModelError, match=r"HTTP 429.*slow down.*would pass the 5 s deadline"),
    ):
        await harness.model(server, deadline=5.0).complete(ask())
    assert len(server.requests) == 1


@pytest.mark.parametrize("deadline", [0, -1.0, float("inf"), float("nan")])
def test_a_deadline_that_is_not_a_positive_number_is_a_user_error(provider: Provider, deadline: float) -> None:
    from delegate import UserError

    with provider.serve(provider.scripted([])) as server, pytest.raises(UserError, match="deadline"):
        provider.build(server, deadline=deadline)


# -- one retry policy --


async def test_a_rate_limit_waits_what_retry_after_says(harness: Harness) -> None:
    with harness.serve([harness.fault(429, "slow down", retry_after=0.3), harness.reply("ok")]) as server:
        started = time.monotonic()
        response = await harness.model(server).complete(ask())
        waited = time.monotonic() - started
    assert response.text == "ok"
    assert len(server.requests) == 2
    assert waited >= 0.3


async def test_server_errors_are_tried_exactly_as_often_as_the_policy_says(harness: Harness) -> None:
    policy = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.001)
    with (
        harness.serve(lambda body: harness.fault(503, "busy")) as server,
        pytest.raises(ModelError, match=r"after 4 attempts: .*HTTP 503.*busy"),
    ):
        await harness.model(server, retry=policy).complete(ask())
    assert len(server.requests) == 4


async def test_refused_credentials_are_not_retried_and_name_the_key(harness: Harness) -> None:
    with harness.serve(lambda body: harness.fault(401, "bad key")) as server, pytest.raises(ModelError) as caught:
        await harness.model(server).complete(ask())
    assert len(server.requests) == 1
    key = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}[harness.provider.name]
    assert "HTTP 401" in str(caught.value) and key in str(caught.value)


def test_the_backoff_doubles_with_jitter_up_to_its_ceiling() -> None:
    policy = RetryPolicy(attempts=10, base_delay=1.0, max_delay=8.0)
    for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (7, 8.0)]:
        waits = {policy.delay(failures) for _ in range(50)}
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits)
        assert len(waits) > 1  # jittered
    assert policy.delay(3, retry_after=12.5) == 12.5


@pytest.mark.parametrize("options", [{"attempts": 0}, {"base_delay": -1.0}, {"base_delay": 5.0, "max_delay": 1.0}])
def test_a_retry_policy_that_cannot_work_is_a_user_error(options: dict[str, Any]) -> None:
    from delegate import UserError

    with pytest.raises(UserError, match="RetryPolicy"):
        RetryPolicy(**options)


# -- a batch item counts a bad answer as a failed attempt --


async def test_a_batch_item_whose_answers_are_cut_fails_after_its_attempts(batches: Batches, tmp_path: Path) -> None:
    with loopback_openai.OpenAIServer(lambda body: loopback_openai.Reply(content="cut short", cut=True)) as server:
        model = OPENAI.build(server, retry=RetryPolicy(attempts=1))
        runtime = Runtime(model=model, workspace=tmp_path, store=False, lead=Lead(tools=[*BUILTIN_TOOLS, "task"]))
        sub = batches.submit(
            "alice", subagent_type="general-purpose", items=[{"key": "a", "prompt": "Say hi."}], max_attempts=2
        )
        settings = FAST
        async with BatchWorker(batches, runtime, **settings) as worker:
            batch = await finished(worker, sub.batch.id, user="alice")
        await runtime.aclose()
    item = batches.item("alice", sub.batch.id, "a")
    assert batch.counts["failed"] == 1 and batch.counts["succeeded"] == 0
    assert item.status == "failed"
    assert item.attempts == 2
    assert item.error is not None and "incomplete" in item.error
    assert len(server.requests) == 2


# -- credentials in a provider URL stay with the operator --

LEAKS = ("leakuser", "leakpass", "leaksecret")


def with_credentials(base_url: str, *, query: bool) -> SimpleNamespace:
    """A stand-in for a loopback server whose URL carries `user:pass@` and maybe `?api-key=` (as
    an operator's `OPENAI_BASE_URL` may)."""
    scheme, _, rest = base_url.partition("://")
    return SimpleNamespace(base_url=f"{scheme}://leakuser:leakpass@{rest}" + ("?api-key=leaksecret" if query else ""))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "failure",
    [
        "HTTP 500",
        "a 404 quoting the path",  # the SDKs put the query inside the path, which the server echoes
        "connection refused",
    ],
)
async def test_credentials_in_the_base_url_reach_no_error_run_or_event(
    harness: Harness, tmp_path: Path, batches: Batches, failure: str
) -> None:
    with harness.serve(lambda body: harness.fault(500, "the model is down")) as server:
        url = f"http://127.0.0.1:{closed_port()}/v1" if failure == "connection refused" else server.base_url
        model = harness.model(with_credentials(url, query=failure != "HTTP 500"))
        with pytest.raises(ModelError) as raised:
            await model.complete(ask())
        (tmp_path / "ws").mkdir()
        with Store.for_workspace(tmp_path / "ws") as store:
            events: list[Event] = []
            runtime = Runtime(model=model, workspace=tmp_path / "ws", store=store, sinks=[events.append])
            result = await runtime.run("Say hi.")
            stored = store.get_run(result.run_id)
            stored_events = store.events(result.run_id)
            sub = batches.submit("alice", subagent_type="general-purpose", items=[{"key": "a", "prompt": "Say hi."}])
            settings = FAST
            async with BatchWorker(batches, runtime, **settings) as worker:
                await finished(worker, sub.batch.id, user="alice")
            await runtime.aclose()
    item = batches.item("alice", sub.batch.id, "a")
    exported = list(batches.export_rows("alice", sub.batch.id))
    assert stored is not None and result.status == "error" and item.status == "failed"
    place = "127.0.0.1:" + url.split(":")[-1]
    texts = {
        "the error": str(raised.value),
        "the run's error": result.error or "",
        "the stored run": repr(stored),
        "its events": repr(events) + repr(stored_events),
        "the item's error": item.error or "",
        "the export": repr(exported),
        "the model's repr": repr(model),
    }
    for what, text in texts.items():
        assert not [leak for leak in LEAKS if leak in text], f"{what} shows a credential: {text[:2000]}"
    assert place in str(raised.value) and place in (result.error or "") and place in (item.error or "")
    said = {"HTTP 500": "answered HTTP 500", "a 404 quoting the path": "HTTP 404", "connection refused": "connection"}
    assert said[failure] in str(raised.value)


# -- a provider sees schemas and plain data --


def test_providers_see_plain_data_not_the_workspace() -> None:
    code = (
        "import sys, delegate.models, delegate.models._openai, delegate.models._anthropic\n"
        "print(sorted(m for m in sys.modules if m in ('delegate.workspace._root', 'delegate.tools')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert "workspace" not in {f.name for f in dataclasses.fields(ModelRequest)}


def test_the_models_page_example_builds_its_models(tmp_path: Path) -> None:
    page = Path(__file__).parent.parent / "docs" / "models.md"
    block = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)[0]
    check = "\nassert rt.model is lead and lead.deadline == 1800 and lead.retry.attempts == 8\n"
    env = scrubbed_env()
    env["ANTHROPIC_API_KEY"] = "sk-ant-not-used"  # the models are built, never called:
    env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"  # were one called, it would reach nothing
    (tmp_path / "ws").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", block + check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("grounds", [False, True], ids=["plain model", "grounding model"])
async def test_the_loop_gives_path_states_only_to_a_model_that_grounds_paths(tmp_path: Path, grounds: bool) -> None:
    (tmp_path / "notes.md").write_text("hello\n")
    model = FunctionModel(lambda request: reply("done"), profile=ModelProfile(grounds_paths=grounds))
    spec = AgentSpec(name="a", instructions="Work.", model=model, tools=[])
    ctx = ToolContext(run_id="r", agent_id="a", workspace=Workspace.open(tmp_path), emit=lambda e: None)
    await run_agent(spec, ctx, [Message.user("Read notes.md and write out/summary.md.")])
    expected = {"notes.md": "file", "out/summary.md": "absent"} if grounds else None
    assert model.requests[0].path_states == expected


class OwnProvider:
    """A provider of one's own, as docs/models.md shows: a name, a declared profile, `complete`
    and `aclose`. It reads a long file once, then a missing one again and again."""

    name = "own:small"
    profile = ModelProfile(context_window=2_048, when_stuck="Own advice: try own:large.")

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return call("read_file", path="long.md" if len(self.requests) == 1 else "missing.md")

    async def aclose(self) -> None:
        """It holds no connections."""


def test_a_provider_declares_its_profile_and_the_loop_honours_its_window_and_its_advice(tmp_path: Path) -> None:
    (tmp_path / "long.md").write_text("".join(f"line {n} of a long file\n" for n in range(2_000)))
    model = OwnProvider()
    assert isinstance(model, Model) and context_window(model) == 2_048
    events: list[Event] = []
    rt = Runtime(model=model, workspace=tmp_path, store=False, extensions=Extensions(builtin_subagents=False))
    result = rt.run_sync("Read long.md.", sinks=[events.append])

    assert (result.status, result.stop_reason) == ("aborted", "repeated_failure")
    assert result.error is not None and result.error.endswith("Own advice: try own:large.")
    assert any(e.type == "context.cut" for e in events)  # cut to its 2,048 tokens, not the default 32,768
    assert len(str(model.requests[1].messages)) < 2_048 * 4


def test_the_built_in_providers_declare_their_profiles_from_their_options() -> None:
    plain = OpenAIModel("qwen2.5:7b", base_url="http://127.0.0.1:9/v1")
    assert plain.profile == ModelProfile(pricing=Pricing(provider="openai"))  # the table knows no price there
    local_like = OpenAIModel(
        "mine", base_url="http://127.0.0.1:9/v1", constrained_tools=True, context_window=8_192, when_stuck="Use more."
    )
    assert local_like.profile == ModelProfile(
        context_window=8_192,
        grounds_paths=True,
        when_stuck="Use more.",
        pricing=Pricing(provider="openai"),
    )
    claude = AnthropicModel("claude-opus-4-1", api_key="k")
    assert claude.profile == ModelProfile(
        context_window=200_000, pricing=Pricing(provider="anthropic", cache_apart=True)
    )
    with pytest.raises(UserError, match="context_window=0"):
        ModelProfile(context_window=0)
