"""Text that is not UTF-8 breaks nothing: a file name with a byte 0xff, a command's output, a tool
that returns a lone surrogate and a model that sends one all reach the model, the events, the
store, `runs show --json`, the HTTP API and its event stream as the escapes `_text.py` documents
(`\\xff` for the byte, `\\ud800` for the surrogate), and the run completes, resumed or not."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx2

from delegate import CommandPolicy, Lead, Runtime, RuntimeSettings, Store, tool
from delegate._events import Event
from delegate._messages import ToolResultPart, messages_adapter
from delegate.models import ModelRequest, ModelResponse, OpenAIModel
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, reply, respond
from delegate.tools import BUILTIN_TOOLS
from tests.cli_support import delegate, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply
from tests.loopback_server import LiveServer

SANDBOX = shutil.which("bwrap") is not None
"""`bash ls` is one of the calls where commands can run (in bubblewrap)."""

ODD_NAME = b"caf\xff.txt"
"""A file name that is not UTF-8: Python reads it as `caf\\udcff.txt`."""


@tool
def lone(note: str) -> str:
    """Answer with half a surrogate pair and an undecodable byte, and what the model said."""
    return f"half a pair \ud800, a byte \udcfe; you said {note}"


def _workspace(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(os.fsencode(root), ODD_NAME), "wb") as file:
        file.write(b"x")
    return root


def _calls() -> list[tuple[str, dict[str, Any]]]:
    """`bash ls` (where commands run) and the tool, told a lone surrogate (as a model sends `"\\udcff"`)."""
    return [*([("bash", {"command": "ls"})] if SANDBOX else []), ("lone", {"note": "caf\udcff"})]


def _results(request: ModelRequest) -> dict[str, str]:
    return {p.name: p.content for m in request.messages for p in m.parts if isinstance(p, ToolResultPart)}


def _acts_then_answers(request: ModelRequest) -> ModelResponse:
    """Make the calls, then answer (with a lone surrogate of its own) what they gave back."""
    results = _results(request)
    if not results:
        return respond(_calls(), text="looking \ud800")
    return reply(f"seen \udcff: {' | '.join(results.values())}")


def _utf8(value: object) -> str:
    """`value` as JSON text, failing the test if any string in it cannot be encoded as UTF-8."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    text.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    return text


def _assert_escaped(results: dict[str, str]) -> None:
    assert results["lone"] == "half a pair \\ud800, a byte \\xfe; you said caf\\xff"
    if SANDBOX:
        assert "caf\\xff.txt" in results["bash"]  # the byte shown as \xff, not as U+FFFD
        assert "\ufffd" not in results["bash"]


def _assert_stored_whole(workspace: Path, run_id: str) -> None:
    """The run's events in the store, and `delegate runs show --json`, are valid UTF-8."""
    with Store.for_workspace(workspace) as store:
        _utf8([e.to_dict() for e in store.events(run_id)])
    shown = subprocess.run(
        delegate("runs", "show", run_id, "--json", "--workspace", str(workspace)),
        env=scrubbed_env(),
        capture_output=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout.decode("utf-8"))  # strict: a lone surrogate would not decode
    assert run["status"] == "completed"
    assert run["final"].startswith("seen \\xff: ")


def test_a_file_named_with_byte_0xff_and_a_tool_returning_a_lone_surrogate_leave_the_run_whole(
    tmp_path: Path,
) -> None:
    workspace = _workspace(tmp_path / "ws")
    model = FunctionModel(_acts_then_answers)
    seen: list[Event] = []
    runtime = Runtime(
        model=model,
        workspace=workspace,
        commands=CommandPolicy() if SANDBOX else None,
        lead=Lead(tools=[*BUILTIN_TOOLS, "task", lone]),
    )
    result = runtime.run_sync("look around", sinks=[seen.append])

    assert result.status == "completed", result.error
    for request in model.requests:  # what any provider would have been sent
        _utf8(messages_adapter().dump_python(request.messages, mode="python"))
    _assert_escaped(_results(model.requests[-1]))
    assert model.requests[-1].messages[1].parts[0].text == "looking \\ud800"  # the model's own, escaped
    _utf8([e.to_dict() for e in seen])  # what the terminal, the server's streams and traces get
    _assert_stored_whole(workspace, result.run_id)


def test_the_openai_sdk_sends_the_escapes_where_it_could_not_encode_the_surrogates(tmp_path: Path) -> None:
    """Through the real SDK and a loopback server: the arguments arrive as JSON `"\\udcff"`."""
    workspace = _workspace(tmp_path / "ws")

    def answer(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(content="looking \ud800", tool_calls=list(_calls()))
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return Reply(content=f"seen \udcff: {' | '.join(results)}")

    with OpenAIServer(answer) as server:
        model = OpenAIModel("gpt-test", base_url=server.base_url, api_key="test")
        runtime = Runtime(
            model=model,
            workspace=workspace,
            commands=CommandPolicy() if SANDBOX else None,
            lead=Lead(tools=[*BUILTIN_TOOLS, "task", lone]),
        )
        result = runtime.run_sync("look around")
        sent = server.requests[-1]["messages"]

    assert result.status == "completed", result.error
    tools = [m for m in sent if m["role"] == "tool"]
    by_name = {"lone" if m["content"].startswith("half a pair") else "bash": m["content"] for m in tools}
    _assert_escaped(by_name)
    assert next(m for m in sent if m["role"] == "assistant")["content"] == "looking \\ud800"
    _assert_stored_whole(workspace, result.run_id)


def test_a_run_interrupted_after_such_results_resumes_to_its_end(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path / "ws")

    async def interrupted() -> str:
        runtime: Runtime | None = None

        async def first(request: ModelRequest) -> ModelResponse:
            if not _results(request):
                return respond(_calls())
            assert runtime is not None
            runtime.interrupt()  # the process "dies" here: its answer and results are checkpointed
            await asyncio.Event().wait()
            raise AssertionError("not reached")

        runtime = Runtime(
            model=FunctionModel(first),
            workspace=workspace,
            commands=CommandPolicy() if SANDBOX else None,
            lead=Lead(tools=[*BUILTIN_TOOLS, "task", lone]),
        )
        async with runtime:
            result = await runtime.run("look around")
        assert result.status == "interrupted", result.error
        return result.run_id

    run_id = asyncio.run(interrupted())
    model = FunctionModel(_acts_then_answers)

    async def resumed() -> str:
        async with Runtime(
            model=model,
            workspace=workspace,
            commands=CommandPolicy() if SANDBOX else None,
            lead=Lead(tools=[*BUILTIN_TOOLS, "task", lone]),
        ) as runtime:
            result = await runtime.resume(run_id)
        assert result.status == "completed", result.error
        return result.run_id

    asyncio.run(resumed())
    _assert_escaped(_results(model.requests[-1]))  # the replayed results, as the model is sent them
    _assert_stored_whole(workspace, run_id)


def test_the_http_api_serves_such_a_run_and_its_event_stream_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Store.for_workspace(workspace) as store:
        user_id, token = store.add_user("alice")
        _workspace(workspace / ".delegate" / "users" / user_id)

        def answer(request: ModelRequest) -> ModelResponse:
            results = _results(request)
            if not results:  # the command's argument holds a lone surrogate, as a model may send
                calls = [("bash", {"command": "ls; echo 'said caf\udcff'"})] if SANDBOX else []
                return respond(calls, text="looking \ud800")
            return reply(f"seen \udcff: {' | '.join(results.values())}")

        runtime = RuntimeSettings(workspace=workspace, commands=CommandPolicy() if SANDBOX else None)
        config = ServerSettings(runtime=runtime, model=lambda _: FunctionModel(answer), run_batches=False)
        headers = {"Authorization": f"Bearer {token}"}
        with (
            LiveServer(create_app(config, store=store)) as server,
            httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as api,
        ):
            started = api.post("/runs", json={"prompt": "look around"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            with api.stream("GET", f"/runs/{run_id}/events") as response:
                assert response.status_code == 200
                raw = b"".join(response.iter_bytes())
            run = api.get(f"/runs/{run_id}")

    events = [
        json.loads(line.removeprefix(b"data: ").decode("utf-8"))  # strict UTF-8 and whole JSON
        for line in raw.splitlines()
        if line.startswith(b"data: ")
    ]
    assert b"event: run.completed" in raw
    assert any(e["data"].get("text") == "looking \\ud800" for e in events)  # the model's answer, in the stream
    assert run.status_code == 200, run.text
    final = run.json()["final"]
    assert final.startswith("seen \\xff: ")
    if SANDBOX:
        assert "caf\\xff.txt" in final
        assert "said caf\\xff" in final  # the argument the model sent, as the command was given it
