"""`delegate demo` with a capable model (the loopback server plays one): every part runs and writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from delegate.testing import is_lead
from tests.cli_support import scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply


def capable(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    last = messages[-1]
    if is_lead(body):
        if last["role"] == "user":
            docs = re.findall(r"docs/([a-z]+)\.txt", last["content"])
            prompts = [f"Summarise docs/{d}.txt into summaries/{d}.md" for d in docs]
            return Reply(
                tool_calls=[("task", {"subagent_type": "summarizer", "description": "summaries", "prompts": prompts})]
            )
        if not any(m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "write_file" for m in messages):
            return Reply(tool_calls=[("write_file", {"path": "report.md", "content": "four summaries\n"})])
        return Reply(content="Wrote report.md.")
    task = next(m["content"] for m in messages if m["role"] == "user")
    source, target = re.findall(r"(docs/\S+\.txt) into (summaries/\S+\.md)", task)[0]
    done = [m for m in messages if m["role"] == "tool"]
    if not done:
        return Reply(tool_calls=[("read_file", {"path": source})])
    if len(done) == 1:
        return Reply(tool_calls=[("write_file", {"path": target, "content": f"summary of {source}\n"})])
    return Reply(tool_calls=[("complete", {"summary": f"summarised {source}", "paths": [target]})])


def test_the_demo_delegates_writes_and_runs_a_batch(tmp_path: Path) -> None:
    env = scrubbed_env()
    with OpenAIServer(capable) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        done = subprocess.run(
            [sys.executable, "-m", "delegate", "demo", "--model", "openai:m", "-w", "demo"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    ws = tmp_path / "demo"
    names = ["bikes", "bread", "coffee", "sleep"]
    for name in names:
        assert (ws / f"summaries/{name}.md").read_text() == f"summary of docs/{name}.txt\n"
        assert (ws / f"summaries/batch-{name}.md").is_file()
    assert (ws / "report.md").read_text() == "four summaries\n"
    rows = [json.loads(line) for line in (ws / "results.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in rows) == names
    assert all(r["status"] == "succeeded" and r["acceptance"][0]["result"] == "holds" for r in rows)
    assert "written: demo/report.md (15 bytes): 'four summaries'" in done.stderr
    assert "the lead ran 4 subagents (completed) and 5 of 5 files it was asked for were written" in done.stderr
    assert "the batch ran 4 items (completed) and wrote 4 of 4 summaries" in done.stderr
