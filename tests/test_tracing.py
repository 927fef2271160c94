"""OpenTelemetry traces in the GenAI conventions, sent to a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import Lead, LoopSettings, ModelError, Runtime, Store
from delegate.models import ModelRequest, ModelResponse, OpenAIModel, Pricing
from delegate.run import _tracing
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, is_lead, reply, respond
from delegate.tools import tool
from tests.cli_support import scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply
from tests.loopback_otlp import OTLPReceiver

SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT = 1, 3
STATUS_ERROR = 2


def lead_and_two_helpers(body: dict[str, Any]) -> Reply:
    """The lead starts two subagents in one turn (two `task` calls, run in parallel), then answers;
    each subagent lists the folder and completes."""
    last = body["messages"][-1]
    if is_lead(body):
        if last["role"] == "user":
            return Reply(
                tool_calls=[
                    ("task", {"subagent_type": "explore", "description": f"look {n}", "prompt": f"SECRET-{n}"})
                    for n in ("a", "b")
                ],
                prompt_tokens=100,
                completion_tokens=30,
            )
        return Reply(content="ANSWER-TEXT both looked", prompt_tokens=200, completion_tokens=10)
    if last["role"] == "user":
        return Reply(tool_calls=[("list_dir", {"path": "."})], prompt_tokens=20, completion_tokens=4)
    return Reply(tool_calls=[("complete", {"summary": "looked"})], prompt_tokens=30, completion_tokens=6)


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[OTLPReceiver]:
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "tracing-test")
        yield receiver


async def traced_run(tmp_path: Path, prompt: str = "look at a and b") -> None:
    with OpenAIServer(lead_and_two_helpers) as server:
        model = OpenAIModel("gpt-test", base_url=server.base_url, api_key="k")
        result = await Runtime(model=model, workspace=tmp_path, store=False).run(prompt)
        await model.aclose()
    assert [s.status for s in result.subagents] == ["completed", "completed"]
    _tracing.flush_traces()


async def test_a_run_is_one_trace_with_each_subagent_under_the_task_call_that_started_it(
    tmp_path: Path, collector: OTLPReceiver
) -> None:
    await traced_run(tmp_path)
    lead = collector.one("invoke_agent lead")
    assert lead.parent_span_id == ""
    assert lead.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert lead.attributes["gen_ai.agent.name"] == "lead"
    assert lead.attributes["gen_ai.provider.name"] == "openai"
    assert lead.attributes["gen_ai.request.model"] == "gpt-test"
    assert (lead.attributes["gen_ai.usage.input_tokens"], lead.attributes["gen_ai.usage.output_tokens"]) == (300, 40)
    assert lead.resource["service.name"] == "tracing-test"

    tasks = collector.named("execute_tool task")
    assert len(tasks) == 2
    assert {t.parent_span_id for t in tasks} == {lead.span_id}
    helpers = collector.named("invoke_agent explore")
    assert len(helpers) == 2
    # each subagent is the only child agent of its own task call, in the lead's trace
    for task in tasks:
        (helper,) = [c for c in collector.children(task) if c.name == "invoke_agent explore"]
        assert helper.trace_id == lead.trace_id
        assert task.start_ns <= helper.start_ns <= helper.end_ns <= task.end_ns
        assert task.attributes["gen_ai.tool.name"] == "task"
        assert task.attributes["gen_ai.tool.call.id"].startswith("call_")
    assert {h.parent_span_id for h in helpers} == {t.span_id for t in tasks}
    # the two subagents ran in parallel: their spans overlap in time
    first, second = sorted(helpers, key=lambda s: s.start_ns)
    assert second.start_ns < first.end_ns

    for helper in helpers:
        (chat_1, chat_2) = sorted((c for c in collector.children(helper) if c.name == "chat gpt-test"), key=start)
        assert chat_1.kind == SPAN_KIND_CLIENT
        assert chat_1.attributes["gen_ai.operation.name"] == "chat"
        assert chat_1.attributes["gen_ai.request.model"] == "gpt-test"
        assert chat_1.attributes["gen_ai.provider.name"] == chat_1.attributes["gen_ai.system"] == "openai"
        assert (chat_1.attributes["gen_ai.usage.input_tokens"], chat_1.attributes["gen_ai.usage.output_tokens"]) == (
            20,
            4,
        )
        assert chat_2.attributes["gen_ai.usage.input_tokens"] == 30
        tools = sorted((c for c in collector.children(helper) if c.name.startswith("execute_tool")), key=start)
        assert [t.attributes["gen_ai.tool.name"] for t in tools] == ["list_dir", "complete"]
        assert chat_1.end_ns <= tools[0].start_ns <= tools[0].end_ns <= chat_2.start_ns
    lead_chats = [c for c in collector.children(lead) if c.name == "chat gpt-test"]
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in sorted(lead_chats, key=start)] == [
        ["tool_calls"],
        ["stop"],
    ]


def start(span: Any) -> int:
    return span.start_ns


CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "input.mime_type",
    "output.value",
    "output.mime_type",
    "delegate.content.omitted_messages",
}


def content_keys(span: Any) -> set[str]:
    return {
        k for k in span.attributes if k in CONTENT_KEYS or k.startswith(("llm.input_messages.", "llm.output_messages."))
    }


async def test_message_content_is_left_out_of_spans_by_default_and_the_kinds_and_tokens_are_not(
    tmp_path: Path, collector: OTLPReceiver
) -> None:
    await traced_run(tmp_path, prompt="PROMPT-TEXT look")
    assert collector.spans
    for span in collector.spans:
        assert content_keys(span) == set(), span.name
        assert not any(text in json.dumps(span.attributes) for text in ("PROMPT-TEXT", "SECRET-a", "ANSWER-TEXT"))
    lead = collector.one("invoke_agent lead")
    assert (lead.attributes["openinference.span.kind"], lead.attributes["agent.name"]) == ("AGENT", "lead")
    assert [lead.attributes[f"llm.token_count.{k}"] for k in ("prompt", "completion", "total")] == [300, 40, 340]
    chat = min((c for c in collector.children(lead) if c.name == "chat gpt-test"), key=start)
    assert (chat.attributes["openinference.span.kind"], chat.attributes["llm.model_name"]) == ("LLM", "gpt-test")
    assert [chat.attributes[f"llm.token_count.{k}"] for k in ("prompt", "completion", "total")] == [100, 30, 130]
    task = collector.named("execute_tool task")[0]
    assert (task.attributes["openinference.span.kind"], task.attributes["tool.name"]) == ("TOOL", "task")


def text(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


async def test_with_content_capture_each_agent_span_shows_its_prompt_and_its_answer(
    tmp_path: Path, collector: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await traced_run(tmp_path, prompt="PROMPT-TEXT look")
    lead = collector.one("invoke_agent lead")
    assert json.loads(lead.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [text("PROMPT-TEXT look")]}
    ]
    assert json.loads(lead.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [text("ANSWER-TEXT both looked")], "finish_reason": "stop"}
    ]
    assert content_keys(lead) == {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
    }
    assert (lead.attributes["input.value"], lead.attributes["input.mime_type"]) == ("PROMPT-TEXT look", "text/plain")
    assert (lead.attributes["output.value"], lead.attributes["output.mime_type"]) == (
        "ANSWER-TEXT both looked",
        "text/plain",
    )
    helpers = sorted(collector.named("invoke_agent explore"), key=lambda s: s.attributes["input.value"])
    assert [h.attributes["input.value"] for h in helpers] == ["SECRET-a", "SECRET-b"]
    assert [json.loads(h.attributes["gen_ai.input.messages"]) for h in helpers] == [
        [{"role": "user", "parts": [text("SECRET-a")]}],
        [{"role": "user", "parts": [text("SECRET-b")]}],
    ]
    # a subagent's answer is what its `complete` call delivered
    assert [h.attributes["output.value"] for h in helpers] == ["looked", "looked"]


async def test_with_content_capture_each_model_call_span_shows_what_it_was_sent_and_answered(
    tmp_path: Path, collector: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await traced_run(tmp_path, prompt="PROMPT-TEXT look")
    lead = collector.one("invoke_agent lead")
    first, final = sorted((c for c in collector.children(lead) if c.name == "chat gpt-test"), key=start)

    (instructions,) = json.loads(first.attributes["gen_ai.system_instructions"])
    assert instructions["type"] == "text" and instructions["content"].startswith(LEAD_INSTRUCTIONS)
    assert json.loads(first.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [text("PROMPT-TEXT look")]}
    ]
    assert first.attributes["input.value"] == first.attributes["gen_ai.input.messages"]
    assert first.attributes["input.mime_type"] == "application/json"
    (answer,) = json.loads(first.attributes["gen_ai.output.messages"])
    calls = [{"type": "tool_call", "id": p["id"], "name": "task", "arguments": p["arguments"]} for p in answer["parts"]]
    assert answer == {"role": "assistant", "parts": calls, "finish_reason": "tool_call"}
    assert [c["arguments"]["prompt"] for c in calls] == ["SECRET-a", "SECRET-b"]
    assert (first.attributes["output.value"], first.attributes["output.mime_type"]) == (
        first.attributes["gen_ai.output.messages"],
        "application/json",
    )
    oi = {k: v for k, v in first.attributes.items() if k.startswith(("llm.input_messages.", "llm.output_messages."))}
    assert oi == {
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": instructions["content"],
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": "PROMPT-TEXT look",
        "llm.output_messages.0.message.role": "assistant",
    } | {
        f"llm.output_messages.0.message.tool_calls.{j}.tool_call.{k}": v
        for j, call in enumerate(calls)
        for k, v in {
            "id": call["id"],
            "function.name": "task",
            "function.arguments": json.dumps(call["arguments"], ensure_ascii=False),
        }.items()
    }

    # the final call was sent the whole conversation: the prompt, the calls and their results
    sent = json.loads(final.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert [p["type"] for p in sent[2]["parts"]] == ["tool_call_response", "tool_call_response"]
    assert all("Summary: looked" in p["response"] for p in sent[2]["parts"])
    assert final.attributes["llm.input_messages.3.message.role"] == "tool"
    assert final.attributes["llm.input_messages.3.message.tool_call_id"] == calls[0]["id"]
    assert final.attributes["llm.input_messages.4.message.tool_call_id"] == calls[1]["id"]
    assert json.loads(final.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [text("ANSWER-TEXT both looked")], "finish_reason": "stop"}
    ]
    assert (final.attributes["output.value"], final.attributes["output.mime_type"]) == (
        "ANSWER-TEXT both looked",
        "text/plain",
    )
    assert final.attributes["llm.output_messages.0.message.content"] == "ANSWER-TEXT both looked"


async def test_with_content_capture_each_tool_span_shows_its_arguments_and_its_whole_result(
    tmp_path: Path, collector: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await traced_run(tmp_path, prompt="PROMPT-TEXT look")
    tasks = sorted(collector.named("execute_tool task"), key=lambda t: t.attributes["input.value"])
    for task, n in zip(tasks, "ab", strict=True):
        arguments = {"subagent_type": "explore", "description": f"look {n}", "prompt": f"SECRET-{n}"}
        assert json.loads(task.attributes["gen_ai.tool.call.arguments"]) == arguments
        assert task.attributes["input.value"] == task.attributes["gen_ai.tool.call.arguments"]
        assert task.attributes["input.mime_type"] == "application/json"
        assert task.attributes["gen_ai.tool.call.result"].endswith("Summary: looked")
        assert task.attributes["output.value"] == task.attributes["gen_ai.tool.call.result"]
        assert task.attributes["output.mime_type"] == "text/plain"


async def test_captured_content_is_bounded_with_a_note_of_what_was_cut(
    tmp_path: Path, collector: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    big = "x" * 50_000

    @tool
    def fetch(n: int) -> str:
        """Fetch a large page."""
        return f"PAGE-{n} " + "y" * 50_000

    def answer(request: ModelRequest) -> ModelResponse:
        turn = len(request.messages) // 2
        return respond([("fetch", {"n": turn})]) if turn < 4 else reply("read it")

    runtime = Runtime(
        model=FunctionModel(answer),
        workspace=tmp_path,
        store=False,
        lead=Lead(tools=[fetch]),
        loop=LoopSettings(context_window=1_000_000),
    )
    result = await runtime.run("PROMPT " + big)
    _tracing.flush_traces()
    assert result.final == "read it"
    lead = collector.one("invoke_agent lead")
    prompt = lead.attributes["input.value"]
    assert prompt == "PROMPT " + "x" * (_tracing.TEXT_LIMIT - len("PROMPT ")) + "… [cut: 50,007 characters in all]"
    reads = collector.named("execute_tool fetch")
    assert len(reads) == 4
    for read in reads:
        cut = read.attributes["gen_ai.tool.call.result"]
        assert len(cut) < _tracing.TEXT_LIMIT + 100 and cut.endswith("… [cut: 50,007 characters in all]")
    final = max((c for c in collector.children(lead) if c.name.startswith("chat")), key=start)
    sent = final.attributes["gen_ai.input.messages"]
    assert len(sent) <= _tracing.CONTENT_LIMIT
    kept = json.loads(sent)
    # the newest messages that fit are kept, the older ones counted
    assert 1 <= len(kept) < 9  # of the prompt, four calls and their four results
    assert final.attributes["delegate.content.omitted_messages"] == 9 - len(kept)
    assert kept[-1]["role"] == "tool" and kept[-1]["parts"][0]["type"] == "tool_call_response"
    for span in collector.spans:
        for key, value in span.attributes.items():
            assert not isinstance(value, str) or len(value) <= _tracing.CONTENT_LIMIT, (span.name, key)


async def test_no_spans_are_sent_when_the_sdk_is_disabled(
    tmp_path: Path, collector: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert _tracing.sinks() == []
    await traced_run(tmp_path)
    assert collector.posts == 0


def test_without_an_endpoint_a_run_imports_no_opentelemetry(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from delegate import Runtime\n"
        "from delegate.testing import ScriptedModel, reply\n"
        f"rt = Runtime(model=ScriptedModel([reply('hi')]), workspace={str(tmp_path)!r}, store=False)\n"
        "assert rt.run_sync('hello').final == 'hi'\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "delegate", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def cli_env(base_url: str, collector: OTLPReceiver, **extra: str) -> dict[str, str]:
    env = scrubbed_env("OTEL_")
    # a long export delay: only the flush at exit can send the spans in time
    return env | {"OPENAI_BASE_URL": base_url, "OTEL_BSP_SCHEDULE_DELAY": "600000"} | extra


def test_delegate_run_sends_its_spans_before_it_exits(tmp_path: Path) -> None:
    with OTLPReceiver() as collector, OpenAIServer(lead_and_two_helpers) as server:
        traces = f"{collector.endpoint}/v1/traces"
        env = cli_env(server.base_url, collector, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=traces)
        done = cli(["run", "look at a and b", "--model", "openai:gpt-test", "--json"], env, tmp_path)
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["run_id"]
        lead = collector.one("invoke_agent lead")
        assert lead.resource["service.name"] == "delegate"
        assert lead.resource["openinference.project.name"] == "delegate"
        assert lead.attributes["gen_ai.conversation.id"] == run_id
        assert len(collector.named("invoke_agent explore")) == 2
        assert all(s.trace_id == lead.trace_id for s in collector.spans)


def test_otel_service_name_names_the_service_and_the_openinference_project(tmp_path: Path) -> None:
    """Phoenix files a trace under its `openinference.project.name`: the service's name it is."""
    with OTLPReceiver() as collector, OpenAIServer(lead_and_two_helpers) as server:
        traces = f"{collector.endpoint}/v1/traces"
        env = cli_env(server.base_url, collector, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=traces)
        done = cli(["run", "look", "--model", "openai:gpt-test"], env | {"OTEL_SERVICE_NAME": "docs-bot"}, tmp_path)
        assert done.returncode == 0, done.stderr
        lead = collector.one("invoke_agent lead")
    assert (lead.resource["service.name"], lead.resource["openinference.project.name"]) == ("docs-bot", "docs-bot")


def test_batch_items_are_traced_each_as_its_own_agent_span(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"key": f"item-{i}", "prompt": f"look {i}"}) + "\n" for i in range(3)))

    def complete(body: dict[str, Any]) -> Reply:
        return Reply(tool_calls=[("complete", {"summary": "looked"})], prompt_tokens=12, completion_tokens=3)

    with OTLPReceiver() as collector, OpenAIServer(complete) as server:
        env = cli_env(server.base_url, collector, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)
        done = cli(["batch", "submit", str(items), "--type", "explore", "--model", "openai:m"], env, tmp_path)
        assert done.returncode == 0, done.stderr
        batch_id = done.stdout.strip().splitlines()[-1]
        agents = collector.named("invoke_agent explore")
    assert sorted(a.attributes["delegate.batch.item.key"] for a in agents) == ["item-0", "item-1", "item-2"]
    assert {a.attributes["delegate.batch.id"] for a in agents} == {batch_id}
    assert all(a.attributes["delegate.batch.item.attempt"] == 1 for a in agents)
    assert len({a.trace_id for a in agents}) == 3
    for agent in agents:
        assert agent.parent_span_id == ""
        children = sorted(s.name for s in collector.children(agent))
        assert children == ["chat m", "execute_tool complete"]
        chat = next(s for s in collector.children(agent) if s.name == "chat m")
        assert chat.attributes["gen_ai.usage.input_tokens"] == 12


def test_delegate_serve_sends_the_spans_of_its_runs_as_it_shuts_down(tmp_path: Path) -> None:
    with Store.for_workspace(tmp_path) as store:
        _, token = store.add_user("alice")
    with OTLPReceiver() as collector, OpenAIServer(lead_and_two_helpers) as server:
        env = cli_env(server.base_url, collector, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, PYTHONUNBUFFERED="1")
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "delegate", "serve", "--port", str(port), "--workspace", str(tmp_path), *SERVING],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        url, headers = f"http://127.0.0.1:{port}/api/v1", {"Authorization": f"Bearer {token}"}
        try:
            run_id = post_when_up(f"{url}/runs", {"prompt": "look at a and b"}, headers, process)["run_id"]
            deadline = time.monotonic() + 60
            while httpx2.get(f"{url}/runs/{run_id}", headers=headers, timeout=60).json()["status"] == "running":
                assert time.monotonic() < deadline, "the run did not end within 60 s"
                time.sleep(0.1)
            assert collector.posts == 0  # the export delay is long: nothing is sent while serving
        finally:
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        lead = collector.one("invoke_agent lead")
        assert lead.attributes["gen_ai.conversation.id"] == run_id
        assert len(collector.named("invoke_agent explore")) == 2


SERVING = ["--model", "openai:gpt-test", "--no-worker"]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post_when_up(url: str, body: dict[str, Any], headers: dict[str, str], process: subprocess.Popen[str]) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"serve exited early: {process.communicate()}"
        try:
            return httpx2.post(url, json=body, headers=headers, timeout=60).json()
        except httpx2.ConnectError:  # not listening yet (a slow answer is not retried: it would start a second run)
            time.sleep(0.1)
    raise AssertionError("serve did not answer within 60 s")


async def test_a_failed_tool_call_and_a_subagent_whose_model_failed_are_error_spans(
    tmp_path: Path, collector: OTLPReceiver
) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) > 1:
                return reply("done")
            return respond(
                [
                    ("read_file", {"path": "missing.md"}),
                    ("task", {"subagent_type": "explore", "description": "d", "prompt": "p"}),
                ]
            )
        raise ModelError("the provider is down")

    result = await Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False).run("go")
    _tracing.flush_traces()
    assert result.subagents[0].status == "error"
    read = collector.one("execute_tool read_file")
    assert (read.status_code, read.attributes["error.type"]) == (STATUS_ERROR, "tool_error")
    helper = collector.one("invoke_agent explore")
    assert (helper.status_code, helper.attributes["error.type"]) == (STATUS_ERROR, "error")
    (chat,) = [c for c in collector.children(helper) if c.name.startswith("chat")]
    assert chat.status_code == STATUS_ERROR and chat.attributes["gen_ai.provider.name"] == "test"
    lead = collector.one("invoke_agent lead")
    assert lead.status_code != STATUS_ERROR and lead.attributes["delegate.agent.status"] == "completed"


def test_an_endpoint_without_the_otel_extra_warns_once_and_the_run_goes_on(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.exporter.otlp.proto.http.trace_exporter'] = None  # as if not installed\n"
        "from delegate import Runtime\n"
        "from delegate.testing import ScriptedModel, reply\n"
        f"rt = Runtime(model=ScriptedModel([reply('hi'), reply('again')]), workspace={str(tmp_path)!r}, store=False)\n"
        "print(rt.run_sync('hello').final, rt.run_sync('hello').final)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "hi again"
    assert done.stderr.count("pip install 'delegate[otel]'") == 1


async def test_model_call_and_agent_spans_carry_their_cost_in_dollars(tmp_path: Path, collector: OTLPReceiver) -> None:
    with OpenAIServer(lead_and_two_helpers) as server:
        model = OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="k", pricing=Pricing(provider="openai"))
        result = await Runtime(model=model, workspace=tmp_path, store=False).run("look")
        await model.aclose()
    _tracing.flush_traces()
    lead = collector.one("invoke_agent lead")
    assert lead.attributes["llm.cost.total"] == result.lead_usage.cost_usd
    chats = [c for c in collector.children(lead) if c.name == "chat gpt-4.1-mini"]
    assert sum(c.attributes["llm.cost.total"] for c in chats) == pytest.approx(result.lead_usage.cost_usd)
    helpers = collector.named("invoke_agent explore")
    assert sorted(h.attributes["llm.cost.total"] for h in helpers) == sorted(s.usage.cost_usd for s in result.subagents)
