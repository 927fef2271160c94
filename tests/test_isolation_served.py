"""Overlay subagents under `delegate serve`, for two users at once: each user's layers merge into,
or leave untouched, that user's own workspace, and each sees only their own runs' records."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import Store
from delegate._record import END_STATUSES
from delegate.testing import is_lead
from tests.durable_support import cli_env, wait_for, workspace_files
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_isolation import _first_user, _tool_results, _turns, sandboxed  # noqa: F401 - a fixture
from tests.test_run_crashes import Processes

DEFINITIONS = {
    "builder": "tools: Bash, Write\nisolation: overlay\n",
    "slow": "isolation: overlay\ntimeout: 1\n",
    "checker": "tools: Read, Bash\n",
}


def _lead_of(body: dict[str, Any]) -> str:
    return _first_user(body).split(":")[0]


BOB_TASKS = [
    {"subagent_type": "builder", "description": "build", "prompt": "bob builds"},
    {"subagent_type": "slow", "description": "slow", "prompt": "bob is slow"},
    {"subagent_type": "checker", "description": "check", "prompt": "bob checks"},
]


class _Script:
    """Both users' leads and subagents: ada's two editors race on one file; bob's builder runs a
    command, his slow type writes three files and times out, his read-only checker writes."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=60)
        self.hang = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        turn = _turns(body)
        if is_lead(body):
            return self._lead(body, turn)
        prompt = _first_user(body)
        if prompt.startswith("ada writes"):
            steps = [
                ("read_file", {"path": "notes.txt"}),
                ("write_file", {"path": "notes.txt", "content": prompt + "\n"}),
                ("complete", {"summary": prompt, "paths": ["notes.txt"]}),
            ]
            if turn == 1:
                self.barrier.wait()  # both have read the file before either writes
            return Reply(tool_calls=[steps[turn]])
        if prompt == "bob is slow":
            if turn == 0:
                return Reply(tool_calls=[("write_file", {"path": f"slow{n}.txt", "content": "x"}) for n in range(3)])
            self.hang.wait(60)
            return Reply(content="too late")
        command = "echo built > out.txt" if prompt == "bob builds" else "echo no > out.txt"
        steps = [("bash", {"command": command}), ("complete", {"summary": "done"})]
        return Reply(tool_calls=[steps[turn]])

    def _lead(self, body: dict[str, Any], turn: int) -> Reply:
        if "warm up" in _first_user(body):
            return Reply(content="ready")
        if _lead_of(body) == "ada" and turn == 0:
            task = {"subagent_type": "general-purpose", "description": "edit", "isolation": "overlay"}
            return Reply(tool_calls=[("task", task | {"prompts": ["ada writes A", "ada writes B"]})])
        if _lead_of(body) == "bob" and turn < len(BOB_TASKS):
            return Reply(tool_calls=[("task", BOB_TASKS[turn])])
        return Reply(content=" | ".join(_tool_results(body)))


@pytest.mark.usefixtures("sandboxed")
def test_two_users_overlay_subagents_merge_conflict_time_out_and_refuse_each_in_their_own_workspace(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    for name, front in DEFINITIONS.items():
        (agents / f"{name}.md").write_text(f"---\nname: {name}\ndescription: {name}\n{front}---\nDo it.\n")
    script = _Script()
    root = tmp_path / "served"
    root.mkdir()
    store_url = f"sqlite:///{tmp_path / 'delegate.db'}"
    processes = Processes()
    try:
        with OpenAIServer(script) as server, Store.open(store_url) as store:
            tokens = {name: store.add_user(name)[1] for name in ("ada", "bob")}
            headers = {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}
            args = ["serve", "--port", "0", "--model", "openai:m", "-w", str(root), "--db", store_url]
            args += ["--no-worker", "--allow-commands", "--agents", str(agents)]
            log = tmp_path / "serve.log"
            proc = processes.spawn(args, cli_env(server.base_url), log)
            url = wait_for(lambda: _address(log) or proc.poll() is not None, what="the server to listen")
            assert isinstance(url, str), log.read_text()
            folders: dict[str, Path] = {}
            for name in ("ada", "bob"):  # each user's workspace exists once a run of theirs has started
                run = _start(url, headers[name], f"{name}: warm up")
                _ended(url, headers[name], run)
                stored = store.get_run(run)
                assert stored is not None and stored.workspace is not None
                folders[name] = Path(stored.workspace)
            (folders["ada"] / "notes.txt").write_text("draft\n")
            bob_before = workspace_files(folders["bob"])
            runs = {name: _start(url, headers[name], f"{name}: go") for name in ("ada", "bob")}
            ended = {name: _ended(url, headers[name], run) for name, run in runs.items()}
            other = httpx2.get(f"{url}/api/v1/runs/{runs['bob']}", headers=headers["ada"], timeout=30)
    finally:
        script.hang.set()
        processes.close()
    assert other.status_code == 404  # ada never sees bob's run, nor its records
    ada = ended["ada"]["subagents"]
    assert sorted(bool(s["conflicts"]) for s in ada) == [False, True]
    winner = next(s for s in ada if not s["conflicts"])
    assert (folders["ada"] / "notes.txt").read_text() == winner["summary"] + "\n"
    builder, slow, checker = ended["bob"]["subagents"]
    assert [c["path"] for c in builder["changes"]] == ["out.txt"] and builder["conflicts"] == []
    assert slow["status"] == "timed_out" and slow["layer"] and len(slow["changes"]) == 3
    assert checker["isolation"] == "read-only" and [c["path"] for c in checker["conflicts"]] == ["out.txt"]
    assert workspace_files(folders["bob"]) == bob_before | {"out.txt": "built\n"}
    assert "notes.txt" not in workspace_files(folders["bob"]) and "out.txt" not in workspace_files(folders["ada"])


def _address(log: Path) -> str | None:
    line = next((x for x in log.read_text().splitlines() if " at http://" in x), None)
    return line.split(" at ")[1].split()[0].rstrip("/") if line else None


def _start(url: str, headers: dict[str, str], prompt: str) -> str:
    answer = httpx2.post(f"{url}/api/v1/runs", json={"prompt": prompt, "max_parallel": 2}, headers=headers, timeout=30)
    assert answer.status_code in (200, 201, 202), answer.text
    return str(answer.json()["run_id"])


def _ended(url: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = httpx2.get(f"{url}/api/v1/runs/{run_id}", headers=headers, timeout=30).json()
        return run if run["status"] in END_STATUSES else None

    return wait_for(done, timeout=120, what=f"run {run_id} to end")
