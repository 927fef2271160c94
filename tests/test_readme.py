"""The README's Python session runs as written, against a loopback server standing in for OpenAI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from delegate.testing import is_lead
from tests.cli_support import scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

README = Path(__file__).parent.parent / "README.md"


def answer(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    if is_lead(body):
        if messages[-1]["role"] == "user":
            call = {"subagent_type": "researcher", "description": "map auth", "prompt": "Map the auth flow."}
            return Reply(tool_calls=[("task", call)])
        if not any(
            m["role"] == "tool" and "docs/auth.md" in m["content"] and "created" in m["content"] for m in messages
        ):
            return Reply(tool_calls=[("write_file", {"path": "docs/auth.md", "content": "# Auth\n"})])
        return Reply(content="Wrote docs/auth.md.")
    return Reply(tool_calls=[("complete", {"summary": "Login is in auth.py."})])


def test_the_readme_python_session_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has a Python session"
    (tmp_path / "ws").mkdir()
    env = scrubbed_env()
    with OpenAIServer(answer) as server:
        env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key"}
        done = subprocess.run(
            [sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Wrote docs/auth.md."
    assert "researcher completed 1" in done.stdout
    assert (tmp_path / "ws/docs/auth.md").read_text() == "# Auth\n"
