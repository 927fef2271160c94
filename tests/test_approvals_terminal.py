"""`delegate run` on a real terminal (a tmux pane) asks inline for each call that waits: deny with
a reason, approve always for the rule (later calls of it are not asked about), and the live tree
goes on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from delegate import Store
from tests.approvals_support import Writers
from tests.durable_support import cli_env
from tests.loopback_openai import OpenAIServer
from tests.test_chat import Pane

QUESTION = "[a]pprove, [d]eny, a[l]ways for this rule?"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_delegate_run_on_a_terminal_asks_inline_denies_with_a_reason_and_approves_always(tmp_path: Path) -> None:
    with OpenAIServer(Writers("a.md", "b.md", "c.md")) as server:
        env = cli_env(server.base_url) | {"TERM": "xterm-256color", "HOME": str(tmp_path)}
        args = ["run", "write the notes", "--model", "openai:m", "--ask", "Write", "--max-parallel", "1"]
        pane = Pane(tmp_path, env, [*args, "-w", str(tmp_path)])
        try:
            screen = pane.wait_for(QUESTION)
            assert "asks to call write_file" in screen and '"path": "a.md"' in screen
            pane.type("d")
            pane.wait_for("reason (given to the agent):")
            pane.type("a is not wanted")
            pane.wait_for(QUESTION, after='"path": "b.md"')  # the live tree may redraw over the first
            pane.type("l")
            screen = pane.wait_for("CHAT-EXITED-0")
        finally:
            pane.close()
    answer = " ".join(screen.split("Final answer")[-1].split())  # as read, whatever the wrapping
    assert "a person denied this call of write_file: a is not wanted" in answer
    with Store.for_workspace(tmp_path) as store:
        decided = [(a.arguments["path"], a.decision, a.reason) for a in store.approvals(store.list_runs()[0].id)]
    assert decided == [
        ("a.md", "deny", "a is not wanted"),
        ("b.md", "approve", "always"),
        ("c.md", "approve", "always"),
    ]
    assert not (tmp_path / "a.md").exists()
    assert (tmp_path / "b.md").exists() and (tmp_path / "c.md").exists()
