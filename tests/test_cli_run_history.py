"""`delegate runs events` and `delegate runs export` through the real CLI, in subprocesses, against
real stores: a run's events as text or JSON Lines, tailed live from another process until the
run ends or its process dies, and the whole run as one JSON document."""

from __future__ import annotations

import copy
import json
import queue
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import sqlalchemy as sa

from delegate import RuntimeSettings, Store
from delegate.server import ServerSettings, create_app
from tests.cli_support import delegate, run_cli
from tests.durable_support import (
    FINAL_ANSWER,
    RUN_ARGS,
    SUBAGENTS,
    cli_env,
    keyed_responder,
    only_run,
    run_json,
    wait_for,
)
from tests.loopback_openai import OpenAIServer
from tests.loopback_server import LiveServer


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A workspace where `delegate run --json` ran the script to its end, and what it printed:
    made once for the module, each test reading a copy of its own (`_finished_run`)."""
    root = tmp_path_factory.mktemp("finished")
    FINAL_ANSWER.set()
    with OpenAIServer(keyed_responder) as server:
        result = run_json(run_cli(["run", "write the notes", *RUN_ARGS, "-w", str(root)], cli_env(server.base_url)))
    assert result["status"] == "completed"
    return root, result


def _finished_run(finished: tuple[Path, dict[str, Any]], root: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """`finished` copied into `root` (store and files: the test may change them), the environment
    of the CLI there, and the finished run's JSON."""
    shutil.copytree(finished[0], root, dirs_exist_ok=True)
    return cli_env("http://127.0.0.1:9/v1"), copy.deepcopy(finished[1])  # no model is asked again


def _stored(root: Path, run_id: str) -> list[dict[str, Any]]:
    with Store.for_workspace(root) as store:
        return [{"seq": n, **e.to_dict()} for n, e in enumerate(store.events(run_id), 1)]


def test_runs_events_prints_a_run_s_events_in_order_as_json_lines_or_one_line_each(
    finished: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    env, result = _finished_run(finished, tmp_path)
    proc = run_cli(["runs", "events", result["run_id"], "--json", "-w", str(tmp_path)], env)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events == _stored(tmp_path, result["run_id"])
    assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.completed"
    assert sum(e["type"] == "subagent.completed" for e in events) == SUBAGENTS
    text = run_cli(["runs", "events", result["run_id"], "-w", str(tmp_path)], env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [str(e["seq"]) for e in events]
    assert [line.split()[3] for line in lines] == [e["type"] for e in events]
    assert lines[-1].split()[2] == "lead" and '"status": "completed"' in lines[-1]


def test_runs_export_is_the_run_its_subagents_and_every_event_in_one_json_document(
    finished: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    env, result = _finished_run(finished, tmp_path)
    proc = run_cli(["runs", "export", result["run_id"], "-w", str(tmp_path)], env)
    assert proc.returncode == 0, proc.stderr
    exported = json.loads(proc.stdout)
    shown = run_json(run_cli(["runs", "show", result["run_id"], "--json", "-w", str(tmp_path)], env))
    assert {k: v for k, v in exported.items() if k in shown} == shown  # what `runs show --json` prints
    assert (exported["prompt"], exported["model"]) == ("write the notes", "openai:m")
    assert exported["completed_at"] >= exported["created_at"]
    assert len(exported["subagents"]) == SUBAGENTS and exported["final"] == result["final"]
    assert exported["events"] == _stored(tmp_path, result["run_id"])


def test_a_run_has_one_json_that_show_list_export_and_http_give_with_the_same_keys_in_order(
    finished: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    env, result = _finished_run(finished, tmp_path)  # `delegate run --json`
    run_id, where = result["run_id"], ["-w", str(tmp_path)]
    shown = run_json(run_cli(["runs", "show", run_id, "--json", *where], env))
    assert list(shown.items()) == list(result.items())  # the same object, key for key
    exported = json.loads(run_cli(["runs", "export", run_id, *where], env).stdout)
    (listed,) = json.loads(run_cli(["runs", "list", "--json", *where], env).stdout)  # one JSON array
    with Store.for_workspace(tmp_path) as store:
        _, token = store.add_user("ada")
        with store.write() as conn:  # the CLI's run, made the HTTP user's to read it back there
            conn.execute(sa.text("UPDATE runs SET user_id = :u"), {"u": store.user_for_token(token)})
        app = create_app(ServerSettings(runtime=RuntimeSettings(workspace=tmp_path), run_batches=False), store=store)
        with (
            LiveServer(app) as server,
            httpx2.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}) as api,
        ):
            served = api.get(f"/runs/{run_id}").json()
            (served_line,) = api.get("/runs").json()["runs"]

    whole = [*result, "prompt", "model", "created_at", "completed_at"]
    assert list(served) == [*whole, "events"] and list(exported) == [*whole, "uploaded_files", "events"]
    for extended in (served, exported):
        assert {k: extended[k] for k in result} == result
    assert served["events"] == len(exported["events"])
    line_keys = [
        "run_id",
        "status",
        "usage",
        "thread_id",
        "previous_run_id",
        "prompt",
        "model",
        "created_at",
        "completed_at",
    ]
    counts = ["subagent_count", "failed_subagents", "running_subagents"]  # what a listing counts of them
    assert list(listed) == list(served_line) == [*line_keys, *counts]  # a listing keeps the whole's order
    assert (
        listed
        == served_line
        == {k: served[k] for k in line_keys}
        | {"subagent_count": len(served["subagents"]), "failed_subagents": 0, "running_subagents": 0}
    )


def test_runs_events_and_export_of_an_unknown_run_say_how_to_find_one(tmp_path: Path) -> None:
    env = cli_env("http://127.0.0.1:9")
    for command in ("events", "export"):
        proc = run_cli(["runs", command, "run_nope", "-w", str(tmp_path)], env)
        assert proc.returncode == 2
        assert proc.stderr.strip() == "error: no run 'run_nope': list the runs with `delegate runs list`"
        assert proc.stdout == ""


class _Lines:
    """The lines a process prints, read by a thread, so a test waits on them with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.lines.put(line)
        self.lines.put(None)

    def until(self, condition: Any, timeout: float = 60) -> list[dict[str, Any]]:
        """Events read until one meets `condition` (included)."""
        seen: list[dict[str, Any]] = []
        while True:
            line = self.lines.get(timeout=timeout)
            assert line is not None, f"the follower ended after {seen}"
            seen.append(json.loads(line))
            if condition(seen[-1]):
                return seen

    def rest(self) -> list[dict[str, Any]]:
        """Every event printed until the follower ends."""
        seen: list[dict[str, Any]] = []
        while (line := self.lines.get(timeout=60)) is not None:
            seen.append(json.loads(line))
        return seen


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts: any still running when it ends (it failed) is killed and reaped."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def _follow(
    env: dict[str, str], store: Store, root: Path, started: list[subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], _Lines, str]:
    """Start `delegate run` (it waits before its last answer) and a follower of its run."""
    FINAL_ANSWER.clear()
    run = subprocess.Popen(
        delegate("run", "write the notes", *RUN_ARGS, "-w", str(root)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.append(run)
    run_id = wait_for(lambda: (r := only_run(store)) is not None and r.id, what="the run to be recorded")
    follower = subprocess.Popen(
        delegate("runs", "events", run_id, "--json", "--follow", "-w", str(root)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    started.append(follower)
    return run, _Lines(follower), run_id


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        yield opened


def test_runs_events_follow_tails_a_run_of_another_process_until_it_ends(
    openai: OpenAIServer, store: Store, store_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    env = cli_env(openai.base_url, db=store_url)
    run, lines, run_id = _follow(env, store, tmp_path, started)
    try:
        early = lines.until(lambda e: e["type"] == "subagent.completed")
        current = store.get_run(run_id)
        assert current is not None and current.status == "running"  # printed while the run goes on
        FINAL_ANSWER.set()
        events = early + lines.rest()
    finally:
        FINAL_ANSWER.set()
        assert run.wait(timeout=120) == 0
    assert lines.proc.wait(timeout=30) == 0
    assert events[-1]["type"] == "run.completed" and events[-1]["data"]["status"] == "completed"
    assert events == [{"seq": n, **e.to_dict()} for n, e in enumerate(store.events(run_id), 1)]


def test_runs_events_follow_ends_with_interrupted_when_the_run_s_process_dies(
    openai: OpenAIServer, store: Store, store_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    env = cli_env(openai.base_url, db=store_url)
    run, lines, run_id = _follow(env, store, tmp_path, started)
    try:
        early = lines.until(lambda e: e["type"] == "subagent.completed")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        events = early + lines.rest()
    finally:
        FINAL_ANSWER.set()
    assert lines.proc.wait(timeout=30) == 0
    last = events[-1]
    assert (last["type"], last["data"]["status"]) == ("run.completed", "interrupted")
    stored = [{"seq": n, **e.to_dict()} for n, e in enumerate(store.events(run_id), 1)]
    assert events[:-1] == stored  # every stored event, then the terminal one (not stored)


def test_runs_list_shows_each_run_id_whole_on_an_80_column_pipe_and_says_when_a_filter_matches_none(
    finished: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    env, result = _finished_run(finished, tmp_path)  # a pipe: rich lays the table out in 80 columns
    table = run_cli(["runs", "list", "-w", str(tmp_path)], env | {"COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if line.startswith("run_")]
    assert row.split()[:2] == [result["run_id"], "completed"]  # what `--resume` and `runs show` take
    assert "thread" not in table.stdout  # no thread continues another: the column would repeat the id
    none = run_cli(["runs", "list", "--status", "interrupted", "-w", str(tmp_path)], env)
    assert (none.returncode, none.stdout.strip()) == (0, "No interrupted runs.")
