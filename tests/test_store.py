"""The store's contract, run against every backend (a SQLite file; PostgreSQL when DELEGATE_TEST_PG is set)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import TypeAdapter

from delegate import Event, Store, StoreError, Usage, UserError
from delegate._messages import Message, ReasoningPart, ToolCallPart
from delegate._record import Artifact, Skipped, TaskOutput
from delegate._store import Checkpoint, Migration
from delegate._store._schema import CORE_MIGRATIONS, _metadata
from delegate.models import ModelResponse
from delegate.testing import reply

CORE = [m.name for m in CORE_MIGRATIONS]


@dataclass(slots=True)
class _Slotted:
    a: Any
    _private: int = 0


@dataclass
class _Plain:
    a: int
    _private: int = 0
    when: datetime | None = None


def _event(run_id: str, n: int, **data: object) -> Event:
    return Event(type="tool.started", run_id=run_id, agent_id="lead", data={"n": n, **data}, ts=1000.0 + n)


def _subagent(id: str, **fields: Any) -> TaskOutput:
    values: dict[str, Any] = {
        "id": id,
        "type": "researcher",
        "description": "",
        "tool_call_id": None,
        "parent_agent_id": None,
        "status": "running",
        "stop_reason": None,
        "summary": "",
        "started_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        **fields,
    }
    return TaskOutput(**values)


class TestMigrations:
    def test_migrations_are_recorded_and_applying_them_again_does_nothing(self, store_url: str) -> None:
        # a new database, migrated here (the `store` fixture's SQLite files are copies of one)
        with Store.open(store_url) as store:
            assert store.applied_migrations() == list(CORE)
            assert store.migrate() == []
            assert store.applied_migrations() == list(CORE)

    def test_another_module_adds_its_tables_through_its_own_named_migrations(self, store: Store) -> None:
        calls: list[str] = []

        def create_things(conn: sa.Connection) -> None:
            calls.append("things")
            sa.Table("things", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True)).create(conn)

        extra = [Migration("test.0001_things", create_things)]
        assert store.migrate(extra) == ["test.0001_things"]
        assert store.migrate(extra) == []
        assert calls == ["things"]
        assert store.applied_migrations() == [*CORE, "test.0001_things"]
        with store.write() as conn:
            conn.execute(sa.text("INSERT INTO things (id) VALUES (1)"))

    def test_a_failing_migration_leaves_nothing_half_applied(self, store: Store) -> None:
        def create_then_fail(conn: sa.Connection) -> None:
            sa.Table("half", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True)).create(conn)
            raise RuntimeError("broken migration")

        with pytest.raises(RuntimeError, match="broken migration"):
            store.migrate([Migration("test.0001_half", create_then_fail)])
        assert store.applied_migrations() == list(CORE)
        with store.read() as conn:
            assert not sa.inspect(conn).has_table("half")

    def test_repeated_migration_names_are_refused(self, store: Store) -> None:
        def noop(conn: sa.Connection) -> None:
            pass

        with pytest.raises(ValueError, match="0001_core"):
            store.migrate([Migration("0001_core", noop)])

    def test_the_migrations_build_exactly_the_schema_the_queries_use(self, store: Store) -> None:
        with store.read() as conn:
            inspector = sa.inspect(conn)
            for table in _metadata.sorted_tables:
                columns = {c["name"] for c in inspector.get_columns(table.name)}
                assert columns == {c.name for c in table.columns}, table.name

    def test_processes_that_migrate_at_once_apply_each_migration_once(self, store_url: str, tmp_path: Path) -> None:
        go = tmp_path / "go"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _MIGRATE_SCRIPT, store_url, str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "ready"
            go.touch()
            outcomes = [proc.communicate(timeout=60) for proc in procs]
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(timeout=60)  # reaped even when the test failed
        assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outcomes]
        applied = sorted(out.strip() for out, _ in outcomes)
        assert applied == ["", ",".join([*CORE, "test.0001_slow"])]
        with Store.open(store_url) as opened:
            assert opened.applied_migrations() == [*CORE, "test.0001_slow"]


_MIGRATE_SCRIPT = """
import pathlib, sys, time
import sqlalchemy as sa
from delegate import Store
from delegate._store import Migration

def slow(conn):
    time.sleep(0.3)
    sa.Table("slow", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True)).create(conn)

store = Store.open(sys.argv[1], migrate=False)
go = pathlib.Path(sys.argv[2])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
print(",".join(store.migrate([Migration("test.0001_slow", slow)])), flush=True)
store.close()
"""


class TestUsers:
    def test_a_new_user_is_found_by_its_token_and_only_a_hash_of_it_is_stored(self, store: Store) -> None:
        user_id, token = store.add_user("ann")
        assert store.user_for_token(token) == user_id
        with store.read() as conn:
            stored = conn.execute(sa.text("SELECT * FROM users")).mappings().one()
        assert token not in {str(v) for v in stored.values()}
        assert stored["token_hash"] == hashlib.sha256(token.encode()).hexdigest()

    def test_a_wrong_token_finds_no_user(self, store: Store) -> None:
        _, token = store.add_user("ann")
        assert store.user_for_token(token + "x") is None
        assert store.user_for_token("") is None

    def test_each_user_gets_its_own_token(self, store: Store) -> None:
        ann_id, ann_token = store.add_user("ann")
        bob_id, bob_token = store.add_user("bob")
        assert ann_token != bob_token
        assert (store.user_for_token(ann_token), store.user_for_token(bob_token)) == (ann_id, bob_id)

    def test_a_second_user_with_the_same_name_is_refused_with_a_message(self, store: Store) -> None:
        store.add_user("ann")
        with pytest.raises(UserError, match="'ann' already exists"):
            store.add_user("ann")

    def test_an_empty_user_name_is_refused(self, store: Store) -> None:
        with pytest.raises(UserError, match="needs a name"):
            store.add_user("  ")


class TestRuns:
    def test_a_run_starts_running_and_keeps_how_it_finished(self, store: Store) -> None:
        run = store.create_run(prompt="map the auth flow", model="test:scripted", workspace="/ws")
        started = store.get_run(run.id)
        assert started == run
        assert started.status == "running" and started.completed_at is None
        assert started.usage == Usage()

        usage = Usage(input_tokens=120, output_tokens=30, requests=2)
        assert store.finish_run(run.id, "completed", final="docs/auth.md written", usage=usage)

        done = store.get_run(run.id)
        assert done is not None
        assert (done.status, done.final, done.usage, done.error) == ("completed", "docs/auth.md written", usage, None)
        assert done.completed_at is not None and done.completed_at >= done.created_at
        assert done.created_at.utcoffset() == timedelta(0)
        assert abs(done.created_at - datetime.now(UTC)) < timedelta(minutes=1)

    def test_a_finished_run_keeps_its_first_ending(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        assert store.finish_run(run.id, "cancelled", error="cancelled by the user")
        assert not store.finish_run(run.id, "completed", final="late answer")
        done = store.get_run(run.id)
        assert done is not None
        assert (done.status, done.final, done.error) == ("cancelled", None, "cancelled by the user")

    def test_finishing_an_unknown_run_raises_store_error(self, store: Store) -> None:
        with pytest.raises(StoreError, match="no run 'nope'"):
            store.finish_run("nope", "error", error="boom")

    def test_finishing_a_run_as_running_is_refused(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        with pytest.raises(ValueError, match="final status"):
            store.finish_run(run.id, "running")

    def test_an_unknown_run_is_none(self, store: Store) -> None:
        assert store.get_run("nope") is None

    def test_another_users_run_is_invisible(self, store: Store) -> None:
        ann, _ = store.add_user("ann")
        bob, _ = store.add_user("bob")
        run = store.create_run(prompt="ann's secret", model="m", user_id=ann)
        assert store.get_run(run.id, user_id=ann) == run
        assert store.get_run(run.id, user_id=bob) is None
        assert store.list_runs(bob) == []
        assert [r.id for r in store.list_runs(ann)] == [run.id]

    def test_runs_are_listed_newest_first_a_page_at_a_time(self, store: Store) -> None:
        ann, _ = store.add_user("ann")
        ids = [store.create_run(prompt=f"p{i}", model="m", user_id=ann).id for i in range(5)]
        store.create_run(prompt="no user", model="m")
        newest_first = list(reversed(ids))
        assert [r.id for r in store.list_runs(ann)] == newest_first
        assert [r.id for r in store.list_runs(ann, limit=2, offset=1)] == newest_first[1:3]
        assert len(store.list_runs()) == 6

    def test_run_summaries_list_the_token_holders_runs_and_none_for_a_token_unknown_or_revoked(
        self, store: Store
    ) -> None:
        ann, token = store.add_user("ann")
        ids = [store.create_run(prompt=f"p{i} " + "x" * 300, model="m", user_id=ann).id for i in range(3)]
        store.create_run(prompt="no user", model="m")
        summaries = store.run_summaries(token, limit=2, offset=1)
        assert summaries is not None
        assert [s.id for s in summaries] == [ids[1], ids[0]]
        assert summaries[0].prompt == store.list_runs(ann, limit=2, offset=1)[0].prompt[:200]
        assert store.run_summaries(token + "x") is None
        store.revoke_user("ann")
        assert store.run_summaries(token) is None

    def test_a_run_of_an_unknown_user_is_refused(self, store: Store) -> None:
        with pytest.raises(sa.exc.IntegrityError):
            store.create_run(prompt="p", model="m", user_id="nobody")


class TestEvents:
    def test_events_come_back_in_order_and_numbered_from_one(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        sent = [
            Event(type="run.started", run_id=run.id, agent_id="lead", data={"prompt": "p"}, ts=1.5),
            Event(
                type="subagent.started",
                run_id=run.id,
                agent_id="sub-1",
                parent_agent_id="lead",
                tool_call_id="call_1",
                data={"nested": {"list": [1, 2.5, None, "é"]}},
                ts=2.25,
            ),
        ]
        store.add_events(sent)
        store.add_events([_event(run.id, 3)])
        assert store.events(run.id) == [*sent, _event(run.id, 3)]
        assert store.events(run.id, after_seq=2) == [_event(run.id, 3)]
        assert store.events(run.id, after_seq=1, limit=1) == [sent[1]]
        got = store.get_run(run.id)
        assert got is not None and got.event_count == 3

    def test_event_data_of_any_json_shape_reads_back_as_a_json_reader_sees_it(self, store: Store) -> None:
        """What the fast encoder leaves to pydantic's (an integer past 64 bits, a set, a key that is
        not text, a lone surrogate) is stored as before; a date is ISO text with Z."""
        run = store.create_run(prompt="p", model="m")
        when = datetime(2026, 1, 2, 3, 4, 5, 600, tzinfo=UTC)
        data = {"big": 2**70, "set": {3}, "keys": {1: "a"}, "bad": "x\udc80", "when": when, "pair": (1, None)}
        store.add_events([_event(run.id, 1, **data), _event(run.id, 2, when=when)])
        first, second = (e.data for e in store.events(run.id))
        assert first == {
            "n": 1,
            "big": 2**70,
            "set": [3],
            "keys": {"1": "a"},
            "bad": "x\\x80",
            "when": "2026-01-02T03:04:05.000600Z",
            "pair": [1, None],
        }
        assert second == {"n": 2, "when": "2026-01-02T03:04:05.000600Z"}

    def test_dataclasses_in_event_data_read_back_field_by_field_in_order_without_private_names(
        self, store: Store
    ) -> None:
        """A slotted dataclass (a conversation's messages and parts) is written by delegate's own
        field reader, a plain one by its attributes: both as orjson wrote them before."""
        run = store.create_run(prompt="p", model="m")
        when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        plain = _Plain(1, when=when)
        plain.extra = [_Slotted(a=(1, None))]  # pyright: ignore[reportAttributeAccessIssue]
        said = Message(
            role="assistant",
            parts=[ReasoningPart(text="hm"), ToolCallPart(id="c1", name="read", arguments={"at": _Slotted(a=when)})],
            metadata={"plain": plain},
        )
        store.add_events([_event(run.id, 1, said=said, twice=[said, said])])
        said_back = {
            "role": "assistant",
            "parts": [
                {"text": "hm", "signature": None, "kind": "reasoning"},
                {
                    "id": "c1",
                    "name": "read",
                    "arguments": {"at": {"a": "2026-01-02T03:04:05Z"}},
                    "raw_arguments": None,
                    "kind": "tool_call",
                },
            ],
            "name": None,
            "hidden": False,
            "metadata": {"plain": {"a": 1, "when": "2026-01-02T03:04:05Z", "extra": [{"a": [1, None]}]}},
        }
        (event,) = store.events(run.id)
        assert event.data == {"n": 1, "said": said_back, "twice": [said_back, said_back]}

    def test_events_of_several_runs_in_one_call_are_numbered_per_run(self, store: Store) -> None:
        a = store.create_run(prompt="a", model="m").id
        b = store.create_run(prompt="b", model="m").id
        store.add_events([_event(a, 1), _event(b, 1), _event(a, 2)])
        store.add_events([_event(b, 2)])
        assert [e.data["n"] for e in store.events(a)] == [1, 2]
        assert [e.data["n"] for e in store.events(b, after_seq=1)] == [2]

    def test_events_of_an_unknown_run_are_refused_and_nothing_of_the_call_is_stored(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        with pytest.raises(StoreError, match="create the run"):
            store.add_events([_event(run.id, 1), _event("nope", 1)])
        assert store.events(run.id) == []
        store.add_events([_event(run.id, 1)])
        assert [e.data["n"] for e in store.events(run.id)] == [1]

    def test_event_data_that_is_not_json_is_stored_as_text(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        store.add_events([_event(run.id, 1, path=Path("a/b.md"), when=datetime(2026, 1, 1, tzinfo=UTC))])
        [back] = store.events(run.id)
        assert back.data["path"] == "a/b.md"
        assert back.data["when"].startswith("2026-01-01")

    def test_ten_thousand_events_go_in_and_out_quickly(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        sent = [_event(run.id, n, text="x" * 100) for n in range(10_000)]
        start = time.perf_counter()
        store.add_events(sent)
        written = time.perf_counter() - start
        start = time.perf_counter()
        back = store.events(run.id)
        read = time.perf_counter() - start
        assert back == sent
        # About 10 µs an event on SQLite and 50 µs on PostgreSQL here; the bound leaves room for slow CI.
        assert written < 5.0 and read < 5.0, (written, read)

    def test_threads_appending_to_one_run_get_gapless_numbers(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        errors = _in_threads(8, lambda i: [store.add_events([_event(run.id, i * 100 + k)]) for k in range(20)])
        assert errors == []
        numbers = [e.data["n"] for e in store.events(run.id)]
        assert len(numbers) == 160 and len(set(numbers)) == 160
        assert store.events(run.id, after_seq=159) == [store.events(run.id)[-1]]


class TestProgress:
    def test_a_recorders_batch_larger_than_one_statement_is_stored_whole_and_in_order(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        events = [_event(run.id, n) for n in range(1_234)]
        checkpoints = [Checkpoint(run_id=run.id, kind="tool", key=f"call_{n}", data={"n": n}) for n in range(1_234)]
        again = Checkpoint(run_id=run.id, kind="tool", key="call_7", data={"n": "second"})
        ended = _subagent("sub-600", status="completed", summary="done", seq=600)
        subagents = [(run.id, _subagent(f"sub-{n}"), None, None) for n in range(1_234)] + [
            (run.id, ended, "call_9#0", None)
        ]
        store.record(events, [*checkpoints, again], subagents)
        assert [e.data["n"] for e in store.events(run.id)] == list(range(1_234))
        kept = Checkpoint(run_id=run.id, kind="subagent", key="call_9#0", data={"record": ended.to_dict(), "seq": 600})
        assert store.checkpoints(run.id) == [*checkpoints, kept]  # the first of a key wins; the record is kept
        records = {r.id: r for r in store.subagent_records(run.id)}
        assert len(records) == 1_234 and records["sub-600"] == ended  # the later record of an id wins

    def test_events_stored_many_to_a_row_read_back_from_any_number_on(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        other = store.create_run(prompt="q", model="m")
        sent = [_event(run.id, n) for n in range(150)]
        store.record([*sent[:100], _event(other.id, 0), *sent[100:]])
        store.record([_event(run.id, 150)])
        sent.append(_event(run.id, 150))
        with store.read() as conn:  # 64 + 36 events, then 50, then 1: four rows for 151 events
            assert conn.execute(sa.text("SELECT count(*) FROM events WHERE run_id = :id"), {"id": run.id}).scalar() == 4
        for after in range(len(sent) + 1):
            assert store.events(run.id, after_seq=after) == sent[after:]
            assert store.events(run.id, after_seq=after, limit=7) == sent[after : after + 7]
        assert store.events(other.id) == [_event(other.id, 0)]
        got = store.get_run(run.id)
        assert got is not None and got.event_count == 151

    def test_a_released_run_reads_interrupted_at_once_and_can_be_claimed(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m", owner="elsewhere|1|a")
        assert not store.release_run(run.id, "elsewhere|2|b")  # not its owner
        assert store.release_run(run.id, "elsewhere|1|a", Usage(input_tokens=7))
        released = store.get_run(run.id)
        assert released is not None
        assert (released.status, released.owner, released.usage.input_tokens) == ("interrupted", None, 7)
        assert store.claim_run(run.id, "elsewhere|3|c").owner == "elsewhere|3|c"
        assert not store.release_run(run.id, "elsewhere|1|a")


class TestSubagents:
    def test_subagent_records_round_trip_in_the_order_the_lead_called_them(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        later = datetime(2026, 1, 2, 3, 5, 0, tzinfo=UTC)
        full = _subagent(
            "sub-2",
            seq=0,
            started_at=later,
            parent_agent_id="lead",
            description="map the auth flow",
            tool_call_id="call_7",
            status="completed",
            stop_reason="stop_tool",
            steps=4,
            usage=Usage(input_tokens=50, output_tokens=9, requests=4),
            summary="Auth goes through middleware.",
            result={"files": 3, "entry": "auth.py"},
            artifacts=[Artifact(path="/ws/docs/auth.md", relative_path="docs/auth.md", size=812, fs_type="file")],
            skipped=[Skipped(path="docs/missing.md", reason="not found")],
            acceptance=[{"criterion": "file:docs/auth.md non-empty", "result": "PASS", "evidence": "812 bytes"}],
            completed_at=later + timedelta(seconds=30),
            model="openai:small",
        )
        store.add_subagent_records(run.id, [_subagent("sub-1", seq=1), full])
        first, second = store.subagent_records(run.id)
        assert first == full
        assert (second.id, second.status, second.usage, second.artifacts, second.seq) == (
            "sub-1",
            "running",
            Usage(),
            [],
            1,
        )

    def test_a_stored_record_reads_back_as_the_dictionary_it_was_written_from(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        record = _subagent("sub-1", status="error", stop_reason="crash", error="boom", result=[1, "two"])
        store.add_subagent_records(run.id, [record])
        [read] = store.subagent_records(run.id)
        assert read.to_dict() == record.to_dict()
        assert TaskOutput.from_dict(record.to_dict()) == record

    def test_recording_a_subagent_again_replaces_its_record(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        store.add_subagent_records(run.id, [_subagent("sub-1")])
        [started] = store.subagent_records(run.id)
        ended = _subagent("sub-1", status="error", stop_reason="crash", error="boom", steps=2)
        store.add_subagent_records(run.id, [ended, ended])
        assert started.status == "running"
        assert store.subagent_records(run.id) == [ended]

    def test_an_invalid_subagent_record_is_refused_before_anything_is_stored(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        bad = _subagent("sub-2", status="exploded")
        with pytest.raises(StoreError, match="'sub-2'"):
            store.add_subagent_records(run.id, [_subagent("sub-1"), bad])
        naive = _subagent("sub-3", started_at=datetime(2026, 1, 1))
        with pytest.raises(ValueError, match="timezone"):
            store.add_subagent_records(run.id, [naive])
        assert store.subagent_records(run.id) == []

    def test_a_record_that_is_not_one_is_refused_saying_what_does_not_fit(self) -> None:
        data = _subagent("sub-1").to_dict() | {"status": "exploded"}
        with pytest.raises(ValueError, match="status"):
            TaskOutput.from_dict(data)


class TestDamagedRows:
    """A row changed outside delegate is reported where it is, never returned as garbage."""

    def _corrupt(self, store: Store, sql: str, **params: object) -> None:
        with store.write() as conn:
            assert conn.execute(sa.text(sql), params).rowcount == 1

    def test_a_run_with_invalid_usage_json_raises_a_store_error_naming_the_column(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        self._corrupt(store, "UPDATE runs SET usage = '{not json' WHERE id = :id", id=run.id)
        with pytest.raises(StoreError, match=rf"runs row '{run.id}' column 'usage'"):
            store.get_run(run.id)

    def test_a_run_with_an_unknown_status_raises_a_store_error(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        self._corrupt(store, "UPDATE runs SET status = 'exploded' WHERE id = :id", id=run.id)
        with pytest.raises(StoreError, match="status"):
            store.list_runs()

    def test_a_damaged_run_raises_a_store_error_in_a_run_summary_too(self, store: Store) -> None:
        ann, token = store.add_user("ann")
        run = store.create_run(prompt="p", model="m", user_id=ann)
        self._corrupt(store, "UPDATE runs SET status = 'exploded' WHERE id = :id", id=run.id)
        with pytest.raises(StoreError, match=rf"(?s)runs row '{run.id}'.*status"):
            store.run_summaries(token)

    def test_a_run_with_a_timestamp_without_timezone_raises_a_store_error(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        self._corrupt(store, "UPDATE runs SET created_at = '2026-01-01T00:00:00' WHERE id = :id", id=run.id)
        with pytest.raises(StoreError, match="created_at"):
            store.get_run(run.id)

    def test_an_event_with_invalid_data_raises_a_store_error(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        store.add_events([_event(run.id, 1)])
        store.add_events([_event(run.id, 2)])
        store.add_events([_event(run.id, n) for n in (3, 4, 5)])  # one row
        self._corrupt(store, "UPDATE events SET data = '[1, 2' WHERE run_id = :id AND seq = 2", id=run.id)
        with pytest.raises(StoreError, match=r"number 2\)"):
            store.events(run.id)
        assert len(store.events(run.id, limit=1)) == 1
        self._corrupt(store, "UPDATE events SET data = '[]' WHERE run_id = :id AND seq = 5", id=run.id)
        with pytest.raises(StoreError, match=r"numbers 3 to 5\) .*it holds 0 events, not 3"):
            store.events(run.id, after_seq=2)

    def test_subagent_artifacts_of_the_wrong_shape_raise_a_store_error(self, store: Store) -> None:
        run = store.create_run(prompt="p", model="m")
        store.add_subagent_records(run.id, [_subagent("sub-1")])
        self._corrupt(store, "UPDATE subagents SET artifacts = '{\"a\": 1}' WHERE id = :id", id=f"{run.id}/sub-1")
        with pytest.raises(StoreError, match=f"subagents row '{run.id}/sub-1'"):
            store.subagent_records(run.id)


class TestConcurrentWriters:
    def test_threads_writing_at_once_all_succeed(self, store: Store) -> None:
        def work(i: int) -> None:
            run = store.create_run(prompt=f"p{i}", model="m")
            for k in range(10):
                store.add_events([_event(run.id, k * 5 + j) for j in range(5)])
            store.add_subagent_records(run.id, [_subagent(f"sub-{i}")])
            store.finish_run(run.id, "completed", final="ok")

        assert _in_threads(8, work) == []
        runs = store.list_runs()
        assert len(runs) == 8 and {r.status for r in runs} == {"completed"}
        assert all(len(store.events(r.id)) == 50 for r in runs)


def _in_threads(count: int, work: object) -> list[BaseException]:
    """Run `work(i)` in `count` threads released together; return what they raised."""
    assert callable(work)
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def test_a_recorded_answer_stored_before_finish_reason_was_named_so_resumes_with_it(store: Store) -> None:
    """Migration core.0008: a lead's answer checkpointed with the old `stop_reason` key reads back
    with the provider's word as `finish_reason`."""
    responses: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
    old = responses.dump_python(reply("cut sh"), mode="json")
    old["stop_reason"] = "max_tokens"
    del old["finish_reason"]
    run = store.create_run(prompt="p", model="m")
    store.record(checkpoints=[Checkpoint(run_id=run.id, kind="answer", key="1", data=old)])
    with store.write() as conn:  # the database as a release before core.0008 left it
        conn.execute(sa.text("DELETE FROM migrations WHERE name = 'core.0008_finish_reason'"))

    assert store.migrate() == ["core.0008_finish_reason"]
    (answer,) = store.checkpoints(run.id)
    assert "stop_reason" not in answer.data
    resumed = responses.validate_python(answer.data)
    assert (resumed.text, resumed.finish_reason) == ("cut sh", "max_tokens")


# -- opening a store and SQLite specifics ----------------------------------------------------------


def test_a_workspace_store_lives_in_dot_delegate(tmp_path: Path) -> None:
    with Store.for_workspace(tmp_path) as opened:
        assert opened.applied_migrations() == list(CORE)
    assert (tmp_path / ".delegate" / "delegate.db").is_file()


def test_a_plain_path_and_a_sqlite_url_open_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "store.db"
    with Store.open(path) as first:
        first.add_user("ann")
    with Store.open(f"sqlite:///{path}") as second, pytest.raises(UserError):
        second.add_user("ann")


@pytest.mark.parametrize("url", ["postgresql://u:secret@127.0.0.1:1/db", "postgres://u@127.0.0.1:1/db"])
def test_postgresql_urls_are_driven_by_psycopg(url: str) -> None:
    opened = Store.open(url, migrate=False)  # no connection is made until the first query
    assert opened.engine.url.drivername == "postgresql+psycopg"
    opened.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@127.0.0.1/db", "unsupported database"),
        ("sqlite://", "not an in-memory database"),
        ("sqlite:///:memory:", "not an in-memory database"),
        ("not a url://", "not a database URL"),
    ],
)
def test_unsupported_database_urls_say_what_to_use(url: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        Store.open(url)


def test_a_database_password_is_not_shown_in_errors() -> None:
    with pytest.raises(UserError) as info:
        Store.open("mysql://u:hunter2@127.0.0.1/db")
    assert "hunter2" not in str(info.value)


def test_sqlite_connections_use_wal_a_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as opened, opened.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_a_sqlite_writer_waits_for_another_writer_instead_of_failing(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as opened:
        holding = threading.Event()

        def hold_the_write_lock() -> None:
            with opened.write() as conn:
                conn.execute(sa.text("INSERT INTO migrations VALUES ('test.hold', 'now')"))
                holding.set()
                time.sleep(0.5)

        holder = threading.Thread(target=hold_the_write_lock)
        holder.start()
        assert holding.wait(60)
        start = time.perf_counter()
        opened.add_user("ann")
        waited = time.perf_counter() - start
        holder.join()
        assert waited > 0.3
        assert "test.hold" in opened.applied_migrations()


def test_opening_a_new_store_waits_for_a_writer_that_has_not_switched_it_to_wal(tmp_path: Path) -> None:
    # A process making the file (still in rollback mode) holds its write lock; SQLite answers the
    # switch to WAL with "database is locked" at once, without its busy timeout (CI found two
    # processes opening one new store failing this way).
    path = tmp_path / "s.db"
    maker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    maker.execute("CREATE TABLE made_first (id INTEGER)")
    maker.execute("BEGIN IMMEDIATE")
    maker.execute("INSERT INTO made_first VALUES (1)")
    releaser = threading.Timer(0.3, maker.execute, args=("COMMIT",))
    releaser.start()
    start = time.perf_counter()
    try:
        with Store.open(path) as opened, opened.read() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("SELECT id FROM made_first").scalars().all() == [1]
    finally:
        releaser.join()
        maker.close()
    assert time.perf_counter() - start > 0.25


def test_stores_of_one_database_share_its_engine_until_the_last_is_closed(tmp_path: Path) -> None:
    first, second = Store.open(tmp_path / "s.db"), Store.open(f"sqlite:///{tmp_path / 's.db'}")
    assert first.engine is second.engine  # what it compiled serves both
    run = first.create_run(prompt="p", model="m")
    first.close()
    first.close()  # a second close does not close the other's connections
    assert second.get_run(run.id) is not None
    pool = second.engine.pool
    second.close()
    assert pool.checkedin() == 0  # the last close let the file go
    with Store.open(tmp_path / "s.db") as third:  # and the next open works on it as before
        assert third.get_run(run.id) is not None


def test_stores_sharing_an_engine_are_not_capped_at_one_stores_connections(tmp_path: Path) -> None:
    """30 threads of three handles of one SQLite file each hold a connection at the same moment (a
    pool of 15 would leave half of them waiting, and the barrier broken)."""
    stores = [Store.open(tmp_path / "s.db") for _ in range(3)]
    together = threading.Barrier(30, timeout=60)

    def hold(i: int) -> None:
        with stores[i % 3].read() as conn:
            conn.exec_driver_sql("SELECT 1")
            together.wait()

    try:
        assert _in_threads(30, hold) == []
    finally:
        for each in stores:
            each.close()


def test_a_store_file_deleted_between_opens_is_made_again_with_its_tables(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as opened:
        opened.create_run(prompt="p", model="m")
    for leftover in tmp_path.glob("s.db*"):
        leftover.unlink()
    with Store.open(tmp_path / "s.db") as again:
        assert again.applied_migrations() == list(CORE)
        assert again.list_runs() == []


def test_two_store_objects_on_one_sqlite_file_write_at_once(tmp_path: Path) -> None:
    stores = [Store.open(tmp_path / "s.db") for _ in range(2)]
    try:
        run = stores[0].create_run(prompt="p", model="m")
        errors = _in_threads(2, lambda i: [stores[i].add_events([_event(run.id, k)]) for k in range(50)])
        assert errors == []
        assert len(stores[1].events(run.id)) == 100
    finally:
        for each in stores:
            each.close()
