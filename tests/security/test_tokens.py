"""Tokens that can be managed: `delegate users list|revoke|token`, on SQLite and PostgreSQL.

The finding of issue 9: tokens could not be revoked. Now `revoke` makes a running server refuse a
user's token at once (no restart), and `token` replaces it (the old one refused from then on).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pytest
import sqlalchemy as sa

from delegate import Store
from delegate._store._schema import CORE_MIGRATIONS, _core_tables_0001
from delegate._store._users import hash_token
from tests.security.server_support import Gate, api, live_server


def delegate(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, in a process of its own, on the same database as the server."""
    return subprocess.run(
        [sys.executable, "-m", "delegate", *args, "--db", db], capture_output=True, text=True, timeout=60, check=False
    )


def token_of(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_revoked_users_token_answers_401_at_once_and_a_new_token_lets_it_in(tmp_path: Path, store_url: str) -> None:
    alice = token_of(delegate("users", "add", "alice", db=store_url))
    bob = token_of(delegate("users", "add", "bob", db=store_url))
    with Store.open(store_url) as store, live_server(tmp_path, store) as server:
        with api(server, alice) as client:
            assert client.get("/runs").status_code == 200
            run_id = client.post("/runs", json={"prompt": "before"}).json()["run_id"]

            revoked = delegate("users", "revoke", "alice", db=store_url)
            assert revoked.returncode == 0, revoked.stderr
            refused = client.get("/runs")  # the same server, not restarted
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
            assert client.get(f"/runs/{run_id}").status_code == 401

        with api(server, bob) as client:
            assert client.get("/runs").status_code == 200  # others are untouched

        listed = json.loads(delegate("users", "list", "--json", db=store_url).stdout)
        assert [(u["name"], u["status"]) for u in listed] == [("alice", "revoked"), ("bob", "active")]
        table = delegate("users", "list", db=store_url).stdout.splitlines()  # as docs/http.md shows it
        assert table[0].split() == ["name", "status", "created", "(UTC)", "token", "made", "revoked"]
        alice_row = next(line.split() for line in table if line.startswith("alice"))
        minutes = [
            datetime.fromisoformat(listed[0][k]).astimezone(UTC).strftime("%Y-%m-%d %H:%M").split()
            for k in ("created_at", "token_created_at", "revoked_at")
        ]
        assert alice_row == ["alice", "revoked", *(part for when in minutes for part in when)]

        fresh = token_of(delegate("users", "token", "alice", db=store_url))
        assert fresh != alice
        with api(server, fresh) as client:
            runs = client.get("/runs").json()["runs"]
            assert [r["run_id"] for r in runs] == [run_id]  # its runs were kept
        with api(server, alice) as client:
            assert client.get("/runs").status_code == 401  # the old token stays refused

        listed = json.loads(delegate("users", "list", "--json", db=store_url).stdout)
        assert [(u["name"], u["status"]) for u in listed] == [("alice", "active"), ("bob", "active")]


def test_a_new_token_refuses_the_old_one_at_once(tmp_path: Path, store_url: str) -> None:
    with Store.open(store_url) as store, live_server(tmp_path, store) as server:
        _, old = store.add_user("carol")  # `delegate users add` is the first test's
        new = token_of(delegate("users", "token", "carol", db=store_url))
        with api(server, old) as client:
            assert client.get("/runs").status_code == 401
        with api(server, new) as client:
            assert client.get("/runs").status_code == 200


class Follower:
    """Reads one event stream to its end in a thread of its own, with a real HTTP client."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.lines: list[str] = []
        self.opened = threading.Event()
        self.spoke = threading.Event()
        """Set once the stream sent its first event."""
        self.ended = threading.Event()
        self.status: int | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            with httpx2.Client(timeout=120) as client, client.stream("GET", self.url, headers=headers) as response:
                self.status = response.status_code
                self.opened.set()
                for line in response.iter_lines():
                    self.lines.append(line)
                    if line.startswith("event: "):
                        self.spoke.set()
        finally:
            self.opened.set()
            self.ended.set()

    def events(self) -> list[str]:
        return [line.removeprefix("event: ") for line in self.lines if line.startswith("event: ")]


@pytest.mark.parametrize("command", ["revoke", "token"])
def test_taking_a_token_away_ends_the_event_streams_it_holds_open(tmp_path: Path, store_url: str, command: str) -> None:
    gate = Gate()  # the runs stay live until it opens: their streams would stay open
    with Store.open(store_url) as store, live_server(tmp_path, store, gate=gate) as server:
        (_, alice), (_, bob) = store.add_user("alice"), store.add_user("bob")  # `users add`: the first test
        streams: dict[str, Follower] = {}
        for name, token in (("alice", alice), ("bob", bob)):
            with api(server, token) as client:
                run_id = client.post("/runs", json={"prompt": "wait"}).json()["run_id"]
                batch = client.post(
                    "/batches", json={"type": "general-purpose", "items": [{"key": "a", "prompt": "p"}]}
                )
                assert batch.status_code == 201, batch.text  # no worker runs it: it stays queued
                batch_id = batch.json()["id"]
            streams[f"{name} run"] = Follower(f"{server.url}/api/v1/runs/{run_id}/events", token)
            streams[f"{name} batch"] = Follower(f"{server.url}/api/v1/batches/{batch_id}/events", token)
        bob_batch = batch_id
        for follower in streams.values():
            assert follower.spoke.wait(60) and follower.status == 200  # each stream is open and sending

        done = delegate("users", command, "alice", db=store_url)  # another process, the same database
        assert done.returncode == 0, done.stderr

        for name in ("alice run", "alice batch"):
            assert streams[name].ended.wait(60), f"{name}'s stream is still open"
            assert streams[name].events()[-1] == "token.revoked"
            assert '"code":"unauthorized"' in streams[name].lines[-2]
        assert not streams["bob run"].ended.is_set() and not streams["bob batch"].ended.is_set()
        with api(server, alice) as client:
            assert client.get(f"/runs/{run_id}/events").status_code == 401
            assert client.get("/runs").status_code == 401
        gate.release()
        assert streams["bob run"].ended.wait(60)
        assert streams["bob run"].events()[-1] == "run.completed"  # bob's stream went on to its end
        assert not streams["bob batch"].ended.is_set()
        with api(server, bob) as client:
            assert client.post(f"/batches/{bob_batch}/cancel").status_code == 200
        assert streams["bob batch"].ended.wait(60)
        assert streams["bob batch"].events()[-1] == "batch.status"


def test_an_unknown_user_is_a_clear_usage_error(store_url: str) -> None:
    for command in ("revoke", "token"):
        done = delegate("users", command, "nobody", db=store_url)
        assert done.returncode == 2
        assert "no user named 'nobody'" in done.stderr
        assert "delegate users list" in done.stderr
    assert delegate("users", "list", db=store_url).stdout.startswith("No users yet")


def test_a_store_from_before_revocation_is_migrated_and_its_tokens_keep_working(store_url: str) -> None:
    """A database made by the release before `core.0003_user_tokens`: its users come through."""
    with Store.open(store_url, migrate=False) as bare, bare.engine.begin() as conn:
        metadata = sa.MetaData()
        users = _core_tables_0001(metadata)[0]
        metadata.create_all(conn)
        migrations = sa.Table("migrations", sa.MetaData(), sa.Column("name", sa.Text), sa.Column("applied_at", sa.Text))
        migrations.create(conn)
        conn.execute(migrations.insert().values(name="0001_core", applied_at="2026-11-01T00:00:00+00:00"))
        created = "2026-11-01T00:00:00.000000+00:00"
        row = {"id": "u1", "name": "dave", "token_hash": hash_token("old-token"), "created_at": created}
        conn.execute(users.insert().values(row))
    with Store.open(store_url) as store:
        assert store.applied_migrations() == [m.name for m in CORE_MIGRATIONS]
        assert store.user_for_token("old-token") == "u1"
        (dave,) = store.list_users()
        assert (dave.name, dave.revoked, dave.token_created_at) == ("dave", False, dave.created_at)
        store.revoke_user("dave")
        assert store.user_for_token("old-token") is None
