"""A deterministic lead-and-subagents script for crash tests, served by the loopback OpenAI server.

Every answer is a function of the request alone (the lead's step, a subagent's prompt and step),
with usage that depends on it too, so an interrupted and resumed run can be compared with an
uninterrupted one: same final answer, same subagent records, same usage.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate._store import RunRow
from delegate.testing import is_lead
from tests.cli_support import scrubbed_env
from tests.loopback_openai import Fault, OpenAIServer, Reply

SUBAGENTS = 6
FINAL_ANSWER = threading.Event()
"""The lead's last answer waits for this: a test clears it while it kills runs, so no run can
finish before its kill lands, and sets it to let the run end."""
FINAL_ANSWER.set()
LATENCY = 0.03
"""Seconds each answer takes: long enough for kills to land in the middle of a run."""


def _first_user(body: dict[str, Any]) -> str:
    for message in body["messages"]:
        if message["role"] == "user":
            content = message["content"]
            return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return ""


def keyed_responder(body: dict[str, Any]) -> Reply | Fault:
    """The lead fans out to `SUBAGENTS` subagents, writes a report, then answers; each subagent
    writes one file and completes. Usage is keyed on what is asked, never on the order of asking."""
    time.sleep(LATENCY)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if is_lead(body):
        if turns == 0:
            prompts = [f"topic {i}: write notes/{i}.md" for i in range(SUBAGENTS)]
            task = {"subagent_type": "general-purpose", "description": "notes", "prompts": prompts}
            return Reply(content="Delegating.", tool_calls=[("task", task)], prompt_tokens=100, completion_tokens=40)
        if turns == 1:
            write = {"path": "report.md", "content": "all notes written\n"}
            return Reply(tool_calls=[("write_file", write)], prompt_tokens=200, completion_tokens=30)
        FINAL_ANSWER.wait(120)
        return Reply(content="Report written: report.md", prompt_tokens=300, completion_tokens=20)
    topic = _first_user(body).split(":")[0].removeprefix("topic ").strip()
    n = int(topic) if topic.isdigit() else 99
    if turns == 0:
        write = {"path": f"notes/{n}.md", "content": f"notes on topic {n}\n"}
        return Reply(tool_calls=[("write_file", write)], prompt_tokens=20 + n, completion_tokens=10 + n)
    done = {"summary": f"wrote notes on topic {n}", "paths": [f"notes/{n}.md"]}
    return Reply(tool_calls=[("complete", done)], prompt_tokens=40 + n, completion_tokens=5 + n)


@pytest.fixture
def openai() -> Iterator[OpenAIServer]:
    """A loopback OpenAI server answering `keyed_responder`; a test imports it to use it."""
    FINAL_ANSWER.set()
    try:
        with OpenAIServer(keyed_responder) as server:
            yield server
    finally:
        FINAL_ANSWER.set()  # never leave a responder thread waiting


def cli_env(base_url: str, db: str | None = None) -> dict[str, str]:
    env = scrubbed_env()
    env["OPENAI_BASE_URL"] = base_url
    env["OPENAI_API_KEY"] = "test"
    if db:
        env["DELEGATE_DB"] = db
    return env


RUN_ARGS = ("--model", "openai:m", "--max-parallel", "2", "--json")


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """What must be equal between an interrupted-and-resumed run and an uninterrupted one."""
    keep = ("id", "type", "description", "status", "stop_reason", "summary", "steps", "usage", "error")
    subagents = sorted(
        (
            {k: s[k] for k in keep} | {"artifacts": [Path(a["path"]).name for a in s["artifacts"]]}
            for s in result["subagents"]
        ),
        key=lambda s: s["id"],
    )
    return {
        "status": result["status"],
        "final": result["final"],
        "usage": result["usage"],
        "subagents": subagents,
    }


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "a condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def only_run(store: Store) -> RunRow | None:
    runs = store.list_runs(None)
    return runs[0] if runs else None


def run_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def workspace_files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".delegate" not in p.relative_to(root).parts
    }
