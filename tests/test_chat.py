"""`delegate chat`: piped, one prompt a line and one JSON object per answer; on a terminal (a real
tmux pane), an interactive session with the live tree, Markdown answers, `/usage`, `/agents`,
Ctrl-C cancelling the running turn and Ctrl-D leaving."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import Store
from delegate.testing import is_lead
from tests.cli_support import delegate
from tests.durable_support import cli_env, wait_for
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_threads_cli import TRANSCRIPT_ONLY, this_turn, thread_responder

HOLD = "hold on"
"""A prompt whose answer waits until the test lets it go (or the turn is cancelled)."""


class Held:
    """Holds the lead's answer to `HOLD` until released; says when one is being held."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        turn = this_turn(body)["messages"]
        if is_lead(body) and HOLD in json.dumps(turn[1]):
            self.holding.set()
            self.release.wait(60)
            return Reply(content="held answer")
        answer = thread_responder(body)
        assert isinstance(answer, Reply)
        return answer


@pytest.fixture
def held() -> Iterator[tuple[OpenAIServer, Held]]:
    responder = Held()
    try:
        with OpenAIServer(responder) as server:
            yield server, responder
    finally:
        responder.release.set()


def test_piped_chat_answers_each_line_as_a_turn_of_one_thread(held: tuple[OpenAIServer, Held], tmp_path: Path) -> None:
    server, _ = held
    (tmp_path / "secret.txt").write_text(TRANSCRIPT_ONLY)
    proc = subprocess.run(
        delegate("chat", "--model", "openai:m", "-w", str(tmp_path)),
        input="map the auth flow\n\nnow fix the second point\n",
        env=cli_env(server.base_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert first["final"] == "Answer to map the auth flow."
    assert second["final"] == "Answer to now fix the second point."
    assert second["previous_run_id"] == first["run_id"] == second["thread_id"]
    last_lead = json.dumps([b for b in server.requests if is_lead(b)][-1])
    assert "Answer to map the auth flow." in last_lead and TRANSCRIPT_ONLY not in last_lead

    again = subprocess.run(
        delegate("chat", "--continue", "--json", "--model", "openai:m", "-w", str(tmp_path)),
        input="and the third\n",
        env=cli_env(server.base_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    (third,) = (json.loads(line) for line in again.stdout.splitlines())
    assert third["previous_run_id"] == second["run_id"] and third["thread_id"] == first["run_id"]


class Pane:
    """`delegate chat` in a real terminal: a tmux pane of a tmux server of its own."""

    def __init__(self, tmp_path: Path, env: dict[str, str], args: list[str]) -> None:
        self.socket = f"delegate-test-{uuid.uuid4().hex[:8]}"
        script = tmp_path / "chat.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        command = shlex.join(delegate(*args))
        script.write_text(f"{exports}{command}\necho CHAT-EXITED-$?\nsleep 600\n")
        self.tmux("new-session", "-d", "-x", "160", "-y", "60", "bash", str(script))

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-1000")

    def wait_for(self, text: str, count: int = 1, after: str = "") -> str:
        """The screen once `text` is on it `count` times (after the last `after`, when given). One
        capture a look, a tenth of a second apart: each look starts a tmux process, and a busy
        machine needs its CPU for the CLI."""

        def shown() -> str | None:
            screen = self.screen()
            shown_after = screen.split(after)[-1] if after else screen
            if (not after or after in screen) and shown_after.count(text) >= count:
                return screen
            time.sleep(0.1)
            return None

        return wait_for(shown, timeout=120, what=f"{text!r} on screen")

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-l", line)
        self.tmux("send-keys", "Enter")

    def key(self, name: str) -> None:
        self.tmux("send-keys", name)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_chat_on_a_terminal_answers_in_markdown_cancels_with_ctrl_c_and_leaves_with_ctrl_d(
    held: tuple[OpenAIServer, Held], tmp_path: Path
) -> None:
    server, responder = held
    env = cli_env(server.base_url) | {"TERM": "xterm-256color", "HOME": str(tmp_path)}
    pane = Pane(tmp_path, env, ["chat", "--model", "openai:m", "-w", str(tmp_path)])
    try:
        pane.wait_for("delegate chat")
        pane.type("map the \\")  # a line ending in \ goes on
        pane.type("auth flow")
        screen = pane.wait_for("input + ")
        assert "Answer to map the" in screen and "general-purpose: look" in screen  # the tree, kept
        pane.type("/usage")
        screen = pane.wait_for("thread run_")
        assert "1 turn" in screen
        pane.type("/agents")
        screen = pane.wait_for("Subagents of run")
        assert "sub1 [completed] general-purpose: look" in screen

        pane.type(HOLD)
        assert responder.holding.wait(60)
        pane.key("C-c")
        screen = pane.wait_for("cancelled")
        responder.release.set()
        pane.type("go on")
        pane.wait_for("Answer to go on.")
        pane.type("/usage")
        screen = pane.wait_for("3 turns")
        pane.key("C-d")
        pane.wait_for("CHAT-EXITED-0")
    finally:
        pane.close()
    with Store.for_workspace(tmp_path) as store:
        runs = list(reversed(store.list_runs()))
    assert [r.status for r in runs] == ["completed", "cancelled", "completed"]
    assert [r.prompt for r in runs] == ["map the \nauth flow", HOLD, "go on"]
    assert runs[2].previous_run_id == runs[1].id and runs[1].previous_run_id == runs[0].id
