"""What another process asked of a run (`delegate runs cancel`, `delegate runs stop`) that the run's
process had not taken yet when it was killed: the request is kept, not dropped by the kill. The
process is frozen (SIGSTOP) while the request is made, then killed, so the request lands between
two of its heartbeats every time."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import OperationalError

from delegate import Store
from tests.cli_support import run_cli
from tests.durable_support import cli_env, only_run, run_json, wait_for
from tests.loopback_openai import OpenAIServer
from tests.test_background_crashes import ARGS, Crew
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture


@contextmanager
def frozen_run(
    procs: Processes, store_url: str, root: Path
) -> Iterator[tuple[Crew, dict[str, str], Store, str, Callable[[], None]]]:
    """`delegate run` of a `Crew` on `store_url`, frozen (SIGSTOP) once `a` works in the
    background (sub1): the crew (released after the block), the environment that reaches it (the
    server is up while the block runs), the store, the run's id, and what SIGKILLs the process."""
    crew = Crew()
    with OpenAIServer(crew) as server, Store.open(store_url) as store:
        try:  # released before the server stops, which waits for the requests it holds
            env = cli_env(server.base_url, db=store_url)
            proc = procs.spawn(["run", "three jobs", *ARGS, "-w", str(root)], env, root / "run.log")
            wait_for(lambda: "a" in crew.holding, what="a to be working")
            run = wait_for(lambda: only_run(store), what="the run")
            wait_for(lambda: _started(store, run.id, "sub1"), what="sub1's start to be stored")
            wait_for(lambda: _frozen_between_writes(proc, store, run.id), what="a freeze outside a write")

            def kill() -> None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)

            yield crew, env, store, run.id, kill
        finally:
            for left in procs.started:  # killed before the server stops, which waits on their connections
                if left.poll() is None:
                    left.send_signal(signal.SIGKILL)
                    left.wait(timeout=30)
            crew.release.set()


def _frozen_between_writes(proc: subprocess.Popen[str], store: Store, run_id: str) -> bool:
    """SIGSTOP the run's process; only where it holds no lock the test's requests need (frozen
    inside a write, it would hold them for good): else let it go on a moment and say so."""
    proc.send_signal(signal.SIGSTOP)
    url = store.engine.url
    if url.get_backend_name() == "sqlite":
        between = _sqlite_unlocked(str(url.database))
    else:
        between = _run_row_free(store, run_id)
    if not between:
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    return between


def _sqlite_unlocked(path: str) -> bool:
    probe = sqlite3.connect(path, timeout=0)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.rollback()
        return True
    except sqlite3.OperationalError:  # locked by the frozen writer
        return False
    finally:
        probe.close()


def _run_row_free(store: Store, run_id: str) -> bool:
    """Whether the run's row can be locked at once on PostgreSQL: every stop and cancel request
    updates it, so a process frozen inside a transaction that holds it would block them for good."""
    try:
        with store.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1 FROM runs WHERE id = %(id)s FOR UPDATE NOWAIT", {"id": run_id})
            conn.rollback()
        return True
    except OperationalError:  # lock not available: held by the frozen writer
        return False


def _started(store: Store, run_id: str, agent_id: str) -> bool:
    """Whether the run's stored events hold the start of `agent_id` (the writer stores them a
    moment after they happen: a stop of a subagent not yet stored as started is refused)."""
    return any(e.type == "subagent.started" and e.agent_id == agent_id for e in store.events(run_id))


def test_a_subagent_asked_to_stop_just_before_its_run_was_killed_is_not_started_again_on_resume(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    with frozen_run(procs, store_url, tmp_path) as (crew, env, store, run_id, kill):
        store.request_stop(run_id, "sub1", "enough of a")
        kill()
        crew.release.set()
        result = run_json(run_cli(["run", "--resume", run_id, *ARGS, "-w", str(tmp_path)], env=env))
    sub1 = next(s for s in result["subagents"] if s["id"] == "sub1")
    assert (sub1["status"], sub1["stop_reason"], sub1["error"]) == ("cancelled", "stopped", "stopped: enough of a")
    assert crew.asked("job a", 1) == 1  # asked once, by the killed process: never started again


def test_a_run_asked_to_cancel_just_before_it_was_killed_is_cancelled_when_resumed_not_run_on(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    with frozen_run(procs, store_url, tmp_path) as (crew, env, store, run_id, kill):
        assert store.request_cancel(run_id).status == "running"  # asked of its process
        kill()
        asked = len(crew.bodies)
        resumed = run_cli(["run", "--resume", run_id, *ARGS, "-w", str(tmp_path)], env=env)
        shown = run_json(run_cli(["runs", "show", run_id, "--json", "-w", str(tmp_path)], env=env))
    assert resumed.returncode == 2 and "already ended (cancelled)" in resumed.stderr
    assert shown["status"] == "cancelled"
    assert asked == len(crew.bodies)  # nothing asked of a model again
