"""`delegate run` and `delegate serve` killed with SIGKILL at random points, on SQLite and
PostgreSQL: the run reads `interrupted`, resumes, and ends exactly as an uninterrupted run of the
same script does (final answer, subagent records, usage)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx2
import pytest

from delegate import Store
from delegate._record import END_STATUSES
from delegate._store import RunRow
from delegate.run import stored_result
from tests.cli_support import delegate
from tests.durable_support import (
    FINAL_ANSWER,
    RUN_ARGS,
    SUBAGENTS,
    cli_env,
    comparable,
    keyed_responder,
    only_run,
    run_json,
    wait_for,
    workspace_files,
)
from tests.loopback_openai import OpenAIServer

KILLS_PER_TEST = int(os.environ.get("DELEGATE_TEST_KILLS", "3"))
"""SIGKILLs a random-points test lands: three in the suite; a soak sets more (bench/README.md)."""
CHECKPOINTS = 3 + 1 + SUBAGENTS
"""What the script records: three answers of the lead, its write_file result, one per subagent."""


@pytest.fixture
def stores() -> Iterator[list[Store]]:
    """Stores a test opens, closed after it whatever happened."""
    opened: list[Store] = []
    yield opened
    for store in opened:
        store.close()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Any]:
    """The script run once, uninterrupted, in a workspace and on a server of its own: once for the
    module, since every answer of the script is a function of its request alone (a `delegate run`
    process a test, eight in all, was a fifth of the module's time). Read-only."""
    root = tmp_path_factory.mktemp("baseline")
    FINAL_ANSWER.set()
    with OpenAIServer(keyed_responder) as server:
        proc = subprocess.run(
            delegate("run", "write the notes", *RUN_ARGS, "-w", str(root)),
            env=cli_env(server.base_url),
            capture_output=True,
            text=True,
            timeout=120,
        )
    result = run_json(proc)
    assert result["status"] == "completed" and len(result["subagents"]) == SUBAGENTS
    return MappingProxyType({"result": comparable(result), "files": workspace_files(root)})


def _kill_when(proc: subprocess.Popen[str], store: Store, target: int) -> bool:
    """SIGKILL `proc` once its run has `target` checkpoints; False if it ended first."""

    def reached() -> bool:
        run = only_run(store)
        return proc.poll() is not None or (run is not None and len(store.checkpoints(run.id)) >= target)

    wait_for(reached, what=f"{target} checkpoints")
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return True


def test_delegate_run_killed_at_random_points_resumes_to_the_uninterrupted_result(
    procs: Processes,
    stores: list[Store],
    store_url: str,
    openai: OpenAIServer,
    baseline: Mapping[str, Any],
    tmp_path: Path,
) -> None:
    rng = random.Random(store_url.split(":")[0])
    root = tmp_path / "killed"
    root.mkdir()
    env = cli_env(openai.base_url, db=store_url)
    store = Store.open(store_url)
    stores.append(store)
    kills = 0
    args = ["run", "write the notes", *RUN_ARGS, "-w", str(root)]
    done = 0
    FINAL_ANSWER.clear()  # no run ends before its kill lands
    while kills < KILLS_PER_TEST:
        proc = procs.spawn(args, env, tmp_path / f"run{kills}.log")
        target = rng.randint(min(done, CHECKPOINTS - 1), min(CHECKPOINTS - 1, done + 3))
        if not _kill_when(proc, store, target):
            break
        kills += 1
        run = only_run(store)
        if run is None:
            continue  # killed before it was recorded: start it again
        assert run.status == "interrupted"  # never `running` once its process is gone
        done = len(store.checkpoints(run.id))
        args = ["run", "--resume", run.id, *RUN_ARGS[:2], "--json", "-w", str(root)]
    FINAL_ANSWER.set()
    final = subprocess.run(delegate(*args), env=env, capture_output=True, text=True, timeout=120)
    result = run_json(final)
    assert kills == KILLS_PER_TEST
    assert comparable(result) == baseline["result"]
    assert workspace_files(root) == baseline["files"]
    stored = stored_result(store, result["run_id"])
    assert stored is not None
    assert comparable(stored.to_dict()) == baseline["result"]  # what `delegate runs show` prints


class Processes:
    """Starts `delegate` processes for a test; whatever is still running when it ends is killed
    and reaped (a test that fails half-way leaves no server behind)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def spawn(self, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[str]:
        """Start `delegate ARGS...`, its output going to `log` (no pipe left open when it is killed)."""
        with log.open("w") as out:
            proc = subprocess.Popen(delegate(*args), env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        self.started.append(proc)
        return proc

    def serve(
        self, store_url: str, env: dict[str, str], root: Path, log: Path, *more: str
    ) -> tuple[subprocess.Popen[str], str]:
        """`delegate serve` on a free port (with the options `more`), and its URL once it says it is serving."""
        args = ["serve", "--port", "0", "--model", "openai:m", "-w", str(root), "--db", store_url, "--no-worker", *more]
        proc = self.spawn(args, env, log)

        def announced() -> str | bool:
            line = next((x for x in log.read_text().splitlines() if " at http://" in x), None)
            return line or proc.poll() is not None

        line = wait_for(announced, what="the server to listen")
        assert isinstance(line, str), log.read_text()
        return proc, line.split(" at ")[1].split()[0].rstrip("/")

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)


@pytest.fixture
def procs() -> Iterator[Processes]:
    processes = Processes()
    try:
        yield processes
    finally:
        processes.close()


@dataclass
class Served:
    """A run that user ada started over HTTP on a `delegate serve` of the test's store."""

    store: Store
    root: Path
    env: dict[str, str]
    headers: dict[str, str]
    proc: subprocess.Popen[str]
    url: str
    run_id: str


@pytest.fixture
def served(
    procs: Processes,
    stores: list[Store],
    store_url: str,
    openai: OpenAIServer,
    baseline: Mapping[str, Any],  # made first: its run needs FINAL_ANSWER, which this run holds back
    tmp_path: Path,
) -> Served:
    """The run, held before its final answer until the test sets `FINAL_ANSWER`."""
    root = tmp_path / "served"
    root.mkdir()
    env = cli_env(openai.base_url)
    store = Store.open(store_url)
    stores.append(store)
    _, token = store.add_user("ada")
    headers = {"Authorization": f"Bearer {token}"}
    proc, url = procs.serve(store_url, env, root, tmp_path / "serve0.log")
    FINAL_ANSWER.clear()
    body = {"prompt": "write the notes", "max_parallel": 2}
    run_id = httpx2.post(f"{url}/api/v1/runs", json=body, headers=headers, timeout=30).json()["run_id"]
    return Served(store, root, env, headers, proc, url, run_id)


def _ended(store: Store, run_id: str) -> RunRow:
    return wait_for(lambda: (r := store.get_run(run_id)) is not None and r.status in END_STATUSES and r, 120)


def _as_uninterrupted(store: Store, ended: RunRow, baseline: Mapping[str, Any]) -> None:
    """The run's result, subagent records, usage and files are those of the uninterrupted run."""
    stored = stored_result(store, ended.id)
    assert stored is not None
    assert comparable(stored.to_dict()) == baseline["result"]
    assert ended.workspace is not None  # the user's own folder of the served workspace
    assert workspace_files(Path(ended.workspace)) == baseline["files"]


def test_delegate_serve_killed_at_random_points_takes_its_run_over_on_restart(
    procs: Processes, served: Served, store_url: str, baseline: Mapping[str, Any], tmp_path: Path
) -> None:
    rng = random.Random(store_url.split(":")[0] + "serve")
    store, run_id, proc = served.store, served.run_id, served.proc
    done = 0
    for kill in range(KILLS_PER_TEST):
        target = rng.randint(min(done, CHECKPOINTS - 1), min(CHECKPOINTS - 1, done + 2))
        assert _kill_when(proc, store, target)
        run = store.get_run(run_id)
        assert run is not None and run.status == "interrupted"
        done = len(store.checkpoints(run_id))
        # a new server resumes the interrupted run when it starts
        proc, url = procs.serve(store_url, served.env, served.root, tmp_path / f"serve{kill + 1}.log")
    FINAL_ANSWER.set()
    try:
        ended = _ended(store, run_id)
        assert ended.status == "completed"
        answer = httpx2.get(f"{url}/api/v1/runs/{run_id}", headers=served.headers, timeout=30).json()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    _as_uninterrupted(store, ended, baseline)
    assert (answer["final"], answer["usage"]) == (baseline["result"]["final"], baseline["result"]["usage"])


def test_a_batch_worker_takes_over_the_run_of_a_killed_server_and_ends_it_as_uninterrupted(
    procs: Processes, served: Served, store_url: str, baseline: Mapping[str, Any], tmp_path: Path
) -> None:
    store, run_id, root = served.store, served.run_id, served.root
    assert _kill_when(served.proc, store, 1 + SUBAGENTS // 2)
    run = store.get_run(run_id)
    assert run is not None and run.status == "interrupted"
    worker_args = ["batch", "worker", "--model", "openai:m", "-w", str(root), "--db", store_url]
    worker = procs.spawn(worker_args, served.env, tmp_path / "worker.log")
    try:
        wait_for(lambda: (r := store.get_run(run_id)) is not None and r.status == "running", what="the takeover")
        FINAL_ANSWER.set()
        ended = _ended(store, run_id)
    finally:
        FINAL_ANSWER.set()
        worker.send_signal(signal.SIGINT)
        worker.wait(timeout=30)
    assert ended.status == "completed", (tmp_path / "worker.log").read_text()
    _as_uninterrupted(store, ended, baseline)
    assert ended.workspace == str(root.resolve() / ".delegate" / "users" / ended.user_id)
    assert not (root / "report.md").exists()  # nothing of the user's run lands in the operator's workspace


def test_a_killed_run_reads_interrupted_in_runs_list_and_show(
    procs: Processes, stores: list[Store], openai: OpenAIServer, tmp_path: Path
) -> None:
    env = cli_env(openai.base_url)
    proc = procs.spawn(["run", "write the notes", *RUN_ARGS, "-w", str(tmp_path)], env, tmp_path / "run.log")
    store = Store.for_workspace(tmp_path)
    stores.append(store)
    assert _kill_when(proc, store, 2)
    run = only_run(store)
    assert run is not None
    listed = subprocess.run(
        delegate("runs", "list", "--status", "interrupted", "--json", "-w", str(tmp_path)),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [run.id]  # one JSON array
    shown = run_json(
        subprocess.run(
            delegate("runs", "show", run.id, "--json", "-w", str(tmp_path)),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    )
    assert shown["status"] == "interrupted"
    assert shown["usage"]["input_tokens"] >= 0
    cancelled = subprocess.run(
        delegate("runs", "cancel", run.id, "-w", str(tmp_path)), env=env, capture_output=True, text=True, timeout=60
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"run {run.id}: cancelled"
    resumed = subprocess.run(
        delegate("run", "--resume", run.id, "--model", "openai:m", "-w", str(tmp_path)),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 2
    assert (
        resumed.stderr.strip()
        == f"error: run {run.id} already ended (cancelled): only an interrupted run can be resumed"
    )


def test_sigterm_and_sighup_cancel_delegate_run_and_record_it(
    procs: Processes, stores: list[Store], openai: OpenAIServer, tmp_path: Path
) -> None:
    env = cli_env(openai.base_url)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        root = tmp_path / sig.name
        root.mkdir()
        log = tmp_path / f"{sig.name}.log"
        proc = procs.spawn(["run", "write the notes", "--model", "openai:m", "-w", str(root)], env, log)
        store = Store.for_workspace(root)
        stores.append(store)
        wait_for(lambda s=store: (r := only_run(s)) is not None and len(s.checkpoints(r.id)) >= 1)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 1, log.read_text()
        assert log.read_text().strip().endswith("error: cancelled")
        run = only_run(store)
        assert run is not None and run.status == "cancelled"


def test_a_resumed_run_counts_what_it_spent_before_against_its_budget(
    procs: Processes, stores: list[Store], openai: OpenAIServer, tmp_path: Path
) -> None:
    """The script makes 15 requests (the lead 3, each subagent 2): under `--max-requests 14` an
    uninterrupted run ends `aborted` before its last answer, and so must one killed and resumed,
    whose replayed answers and reused subagents were requests of the same run."""
    budget = ["--max-requests", "14"]
    whole = tmp_path / "whole"
    whole.mkdir()
    env = cli_env(openai.base_url)
    uninterrupted = subprocess.run(
        delegate("run", "write the notes", *RUN_ARGS, *budget, "-w", str(whole)),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    expected = json.loads(uninterrupted.stdout.strip().splitlines()[-1])
    assert (expected["status"], expected["stop_reason"]) == ("aborted", "run_max_requests")
    root = tmp_path / "killed"
    root.mkdir()
    store = Store.for_workspace(root)
    stores.append(store)
    proc = procs.spawn(["run", "write the notes", *RUN_ARGS, *budget, "-w", str(root)], env, tmp_path / "run.log")
    assert _kill_when(proc, store, 1 + SUBAGENTS // 2)  # the lead's first answer and half the subagents
    run = only_run(store)
    assert run is not None and run.status == "interrupted"
    resumed = subprocess.run(
        delegate("run", "--resume", run.id, *RUN_ARGS[:2], *budget, "--json", "-w", str(root)),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (result["status"], result["stop_reason"]) == ("aborted", "run_max_requests")
    assert result["usage"] == expected["usage"]  # each answer counted once


def _stop_gracefully(proc: subprocess.Popen[str], sig: signal.Signals, log: Path) -> None:
    """Send `sig` and wait for the process to shut down (uvicorn raises SIGTERM again once it has)."""
    proc.send_signal(sig)
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()


def _left_interrupted(store: Store, run_id: str) -> None:
    """The run reads `interrupted` with its lease let go (so at once from any machine, not only
    once its heartbeat lapses), and no subagent of it was recorded as cancelled."""
    run = store.get_run(run_id)
    assert run is not None and (run.status, run.owner) == ("interrupted", None)
    assert {s.status for s in store.subagent_records(run_id)} <= {"completed"}


def test_a_server_stopped_with_sigterm_leaves_its_run_interrupted_and_the_next_server_finishes_it(
    procs: Processes, served: Served, store_url: str, baseline: Mapping[str, Any], tmp_path: Path
) -> None:
    store, run_id = served.store, served.run_id
    wait_for(lambda: len(store.checkpoints(run_id)) >= 1 + SUBAGENTS // 2, what="half the subagents")
    _stop_gracefully(served.proc, signal.SIGTERM, tmp_path / "serve0.log")
    _left_interrupted(store, run_id)
    proc, _ = procs.serve(store_url, served.env, served.root, tmp_path / "serve1.log")  # resumes it at start
    FINAL_ANSWER.set()
    try:
        ended = _ended(store, run_id)
    finally:
        _stop_gracefully(proc, signal.SIGTERM, tmp_path / "serve1.log")
    assert ended.status == "completed", (tmp_path / "serve1.log").read_text()
    _as_uninterrupted(store, ended, baseline)


def test_a_batch_worker_stopped_with_sigint_leaves_the_run_it_took_over_interrupted_for_the_next_worker(
    procs: Processes, served: Served, store_url: str, baseline: Mapping[str, Any], tmp_path: Path
) -> None:
    store, run_id, env = served.store, served.run_id, served.env
    assert _kill_when(served.proc, store, 1)  # the server dies; a worker takes its run over
    worker_args = ["batch", "worker", "--model", "openai:m", "-w", str(served.root), "--db", store_url]
    worker = procs.spawn(worker_args, env, tmp_path / "worker0.log")
    wait_for(lambda: len(store.checkpoints(run_id)) >= 1 + SUBAGENTS // 2, what="half the subagents")
    _stop_gracefully(worker, signal.SIGINT, tmp_path / "worker0.log")
    _left_interrupted(store, run_id)
    worker = procs.spawn(worker_args, env, tmp_path / "worker1.log")
    FINAL_ANSWER.set()
    try:
        ended = _ended(store, run_id)
    finally:
        _stop_gracefully(worker, signal.SIGINT, tmp_path / "worker1.log")
    assert ended.status == "completed", (tmp_path / "worker1.log").read_text()
    _as_uninterrupted(store, ended, baseline)
