"""What a person approves is what they saw (issue 34, finding "a person approves a command they
were never shown"): on a terminal the waiting call's arguments were cut at 2,000 characters without
a word, so a `bash` command padded with a quoted string hid `touch PWNED` past character 2,000, the
person pressed `a`, and it ran; `runs show ID` listed waiting calls with no arguments at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.testing import is_lead
from tests.approvals_support import waiting_calls
from tests.cli_support import run_cli
from tests.durable_support import cli_env
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_chat import Pane
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture

PADDING = "x" * 2100
HIDDEN = f": '{PADDING}'; touch PWNED"
"""A command whose first 2,000 characters (as JSON, indented) show only a harmless no-op."""


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def hidden_tail(body: dict[str, Any]) -> Reply:
    """The lead runs the padded command itself, then answers with what it gave back."""
    messages = body["messages"]
    if not is_lead(body):
        return Reply(content="nothing to do")
    if sum(1 for m in messages if m["role"] == "assistant") == 0:
        return Reply(tool_calls=[("bash", {"command": HIDDEN})])
    return Reply(content=f"Done. {_text(messages[-1])[:200]}")


@pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("less") is None, reason="needs tmux and less")
@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")
def test_a_long_call_cannot_be_approved_on_a_terminal_before_the_person_sees_it_all(tmp_path: Path) -> None:
    with OpenAIServer(hidden_tail) as server:
        env = cli_env(server.base_url) | {"TERM": "xterm-256color", "HOME": str(tmp_path), "PAGER": "less"}
        args = ["run", "check", "--model", "openai:m", "--ask", "Bash", "--allow-commands"]
        pane = Pane(tmp_path, env, [*args, "-w", str(tmp_path)])
        try:
            screen = pane.wait_for("[v]iew all")
            assert "touch PWNED" not in screen
            assert "the arguments are 2,1" in screen and "characters long" in screen
            pane.type("a")  # approving blind is refused
            screen = pane.wait_for("see all of the arguments first")
            pane.type("v")  # the pager, at its end
            pane.wait_for("(END)")
            pane.key("G")
            screen = pane.wait_for("touch PWNED")
            pane.key("q")
            screen = pane.wait_for("[a]pprove, [d]eny", 1)
            pane.type("d")
            pane.wait_for("reason (given to the agent):")
            pane.type("it hides a touch")
            screen = pane.wait_for("CHAT-EXITED-0")
        finally:
            pane.close()
    assert not (tmp_path / "PWNED").exists()
    with Store.for_workspace(tmp_path) as store:
        [row] = store.approvals(store.list_runs()[0].id)
    assert (row.arguments["command"], row.decision) == (HIDDEN, "deny")


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")
def test_runs_show_and_runs_approve_show_the_whole_arguments_of_a_waiting_call(
    procs: Processes, tmp_path: Path
) -> None:
    """`runs show ID` lists each waiting call with its whole arguments; `runs approve` says what it
    decided, whole (a long one in a file, with its count of characters)."""
    with OpenAIServer(hidden_tail) as server:
        env = cli_env(server.base_url)
        args = ["run", "check", "--model", "openai:m", "--json", "--ask", "Bash", "--allow-commands"]
        proc = procs.spawn([*args, "-w", str(tmp_path)], env, tmp_path / "run.log")
        with Store.for_workspace(tmp_path) as store:
            [row] = waiting_calls(store)
        shown = run_cli(["runs", "show", row.run_id, "-w", str(tmp_path)], env=env)
        assert "waiting for a person" in shown.stdout and row.call_id in shown.stdout, shown.stdout
        assert json.dumps(HIDDEN) in "".join(shown.stdout.split("\n")), shown.stdout  # whole, however wrapped
        listed = json.loads(run_cli(["runs", "show", row.run_id, "--json", "-w", str(tmp_path)], env=env).stdout)
        assert listed["pending_approvals"][0]["arguments"]["command"] == HIDDEN
        decided = run_cli(["runs", "approve", row.run_id, "--all", "--deny", "-w", str(tmp_path)], env=env)
        assert f"{row.call_id} (bash): denied" in decided.stdout, decided.stdout
        assert "2,1" in decided.stdout and "characters" in decided.stdout
        assert proc.wait(120) == 0
    assert not (tmp_path / "PWNED").exists()
