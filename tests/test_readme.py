"""The README's examples run as written: its Python session and its shell session, against loopback
servers standing in for OpenAI and Anthropic; docs/' Python blocks too."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from delegate.testing import is_lead
from tests import loopback_anthropic
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


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)


DOCS = Path(__file__).parent.parent / "docs"
SNIPPETS = [(doc.name, n) for doc in sorted(DOCS.glob("*.md")) for n, _ in enumerate(python_blocks(doc))]


def test_every_python_block_of_docs_is_run_here() -> None:
    """A new block in docs/ is added to `SNIPPETS` and so run by the test below: none is skipped
    (the one-line fragment that uses the README's `rt` runs with a runtime made for it)."""
    assert ("threads.md", 0) in SNIPPETS and ("models.md", 1) in SNIPPETS and len(SNIPPETS) >= 6


@pytest.mark.parametrize(("doc", "n"), SNIPPETS)
def test_a_docs_python_block_runs_as_written(tmp_path: Path, doc: str, n: int) -> None:
    """Each Python block of docs/ runs as written against the loopback OpenAI server: a block with
    a top-level `await` inside an event loop, a fragment using `rt` after one is made."""
    block = python_blocks(DOCS / doc)[n]
    if "await " in block:
        block = "import asyncio\nasync def main():\n" + textwrap.indent(block, "    ") + "\nasyncio.run(main())\n"
    if re.match(r"\w+ = rt\.", block):  # a fragment: the runtime it uses is the README's
        block = 'from delegate import Runtime\nrt = Runtime(model="openai:gpt-4.1-mini", workspace="./ws")\n' + block
    (tmp_path / "ws").mkdir()
    env = scrubbed_env() | {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}  # never asked
    with OpenAIServer(lambda body: Reply(content="Done.")) as server:
        env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key"}
        done = subprocess.run(
            [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, f"{doc} block {n}:\n{block}\n{done.stderr}"


def command_lines(doc: Path) -> list[str]:
    """Each `delegate ...` line of the doc's shell and console blocks, without its prompt, its
    environment assignments, its comment and what it pipes or redirects to."""
    lines: list[str] = []
    for kind, block in re.findall(r"```(bash|sh|console|)\n(.*?)```", doc.read_text(), re.S):
        for line in block.splitlines():
            if kind == "console" and not line.startswith("$ "):
                continue  # what a command printed
            line = re.sub(r"^(\w+=\S+ )+", "", line.strip().removeprefix("$ "))
            if line.startswith("delegate "):
                lines.append(re.split(r" #|\||>", line)[0])
    return lines


def test_every_flag_of_a_documented_command_is_one_that_command_takes() -> None:
    """A `delegate X --flag` the README or docs/ show is an option of `delegate X` (read from the
    CLI's own commands, as `--help` lists them): a renamed or dropped flag fails here."""
    import typer

    from delegate.cli import _agents, _batch, _chat, _demo, _eval, _memory, _runs, _serve
    from delegate.cli._main import app

    for face in (_agents, _batch, _serve, _demo, _runs, _chat, _memory, _eval):
        face.register(app)
    root = typer.main.get_command(app)
    wrong: list[tuple[str, str, str]] = []
    lines = [(doc.name, line) for doc in (README, *sorted(DOCS.glob("*.md"))) for line in command_lines(doc)]
    for doc, line in lines:
        command, words = root, line.split()[1:]
        for word in words:
            if word not in getattr(command, "commands", {}):
                if command.name == "eval":  # `delegate eval SUITE` is `delegate eval run SUITE`
                    command = command.commands["run"]
                break
            command = command.commands[word]
        assert not hasattr(command, "commands"), (doc, line)  # a command, not a group
        options = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
        flags = [w.split("=")[0] for w in words if w.startswith("-") and w != "-"]
        wrong += [(doc, line, flag) for flag in flags if flag not in options]
    assert len(lines) > 20 and wrong == []


def shell_blocks(doc: Path) -> list[str]:
    return re.findall(r"```(?:bash|sh)\n(.*?)```", doc.read_text(), re.S)


RUN_ELSEWHERE = {
    "bash scripts/demo.sh": "tests/test_demo.py runs `delegate demo`, what the script ends in",
    "bash scripts/test.sh": "the test suite itself: `.ci/run` runs it",
    "pip install": "installing the package: scripts/test.sh and scripts/demo.sh do it",
}
"""The README's shell blocks that this file does not run, each with where it is run: every other
block is run below, so a new one cannot rot unseen."""


def test_every_readme_shell_block_is_run_here_or_named_with_where_it_runs() -> None:
    blocks = shell_blocks(README)
    run_here = [b for b in blocks if not any(b.lstrip().startswith(start) for start in RUN_ELSEWHERE)]
    assert len(blocks) >= 4 and len(run_here) == 1 and "delegate run" in run_here[0]


class SlowOnce:
    """The lead's answers: a run asked for "slow work" is left hanging the first time (its process
    is killed meanwhile); one asked about auth writes docs/auth.md, then says it is done."""

    def __init__(self) -> None:
        self.hung = False

    def __call__(self, body: dict[str, Any]) -> Reply:
        asked = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if "slow work" in asked and not self.hung:
            self.hung = True
            return Reply(dribble=0.5)
        if "auth" in asked and not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[("write_file", {"path": "docs/auth.md", "content": "# Auth\n"})])
        return Reply(content="Done.")


def interrupted_run(workspace: Path, env: dict[str, str], server: OpenAIServer) -> tuple[str, str]:
    """The id of a `delegate run` made in a missing `workspace` and killed while its lead waited
    for the model, and what it said on stderr."""
    with open(workspace.parent / "killed.err", "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "delegate", "run", "slow work", "--model", "openai:gpt-4.1-mini", "-w", "ws"],
            cwd=workspace.parent,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        deadline = time.monotonic() + 60
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        err.seek(0)
        said = err.read()
    listed = subprocess.run(
        [sys.executable, "-m", "delegate", "runs", "list", "--json", "-w", str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    [run] = json.loads(listed.stdout)
    assert run["status"] == "interrupted"
    return run["run_id"], said


def test_the_readme_shell_session_runs_as_written(tmp_path: Path) -> None:
    """The README's shell block, as a script (`set -e`: every line must succeed), its `RUN_ID`
    the id of a run killed before it (the session resumes it, tails it and exports it). That run
    was the first `delegate run` in `./ws`, which did not exist: the CLI made it and said so."""
    [block] = [b for b in shell_blocks(README) if "delegate run" in b]
    bin_dir = Path(sys.executable).parent
    env = scrubbed_env() | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def anthropic(body: dict[str, Any]) -> loopback_anthropic.Reply:
        return loopback_anthropic.Reply("The entry points are login() and logout().")

    with OpenAIServer(SlowOnce()) as server, loopback_anthropic.AnthropicServer(anthropic) as claude:
        env |= {"OPENAI_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": claude.base_url}
        run_id, said = interrupted_run(tmp_path / "ws", env, server)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.replace("RUN_ID", run_id)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert "note: created the workspace folder 'ws'" in said
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ws/docs/auth.md").read_text() == "# Auth\n"
    answered = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert answered["final"] == "The entry points are login() and logout()."
    exported = json.loads((tmp_path / "ws/run.json").read_text())
    assert exported["run_id"] == run_id and exported["status"] == "completed"
    assert "general-purpose" in done.stdout  # `agents list`
