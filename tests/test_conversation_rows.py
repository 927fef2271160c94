"""A completed subagent's conversation kept in its own row (`subagents.conversation`, its system
prompt once a run), and runs stored before core.0016 read the same after it, on each backend.

`fixtures/conversations_before_0016.json` holds the rows the code before that migration wrote (a
`checkpoints` row a conversation, `conversation`/`{agent_id}#{messages}`, its system prompt in
each) for a run interrupted after its sub1 completed and took a follow-up and its sub2 completed,
and what that code's model-calls route read of each. Each test of it builds the old schema with
the migrations before 0016, writes those rows, and opens the store with today's code.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from delegate import Runtime, Store
from delegate._store._schema import CORE_MIGRATIONS, migrations_table
from delegate._time import iso, utc_now
from delegate.models import ModelRequest, ModelResponse
from delegate.run import agent_calls
from delegate.testing import FunctionModel, call, is_lead, reply

FIXTURE = Path(__file__).with_name("fixtures") / "conversations_before_0016.json"
MIGRATION = "core.0016_subagent_conversations"


def _turns(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def _old_store(store_url: str, workspace: Path) -> tuple[Store, dict[str, Any]]:
    """A store with the schema and rows of the code before core.0016 (its run interrupted, in
    `workspace`), and what that code read; not migrated yet."""
    data = json.loads(FIXTURE.read_text())
    store = Store.open(store_url, migrate=False)
    with store.write() as conn:
        migrations_table.create(conn)
        for step in CORE_MIGRATIONS[: [m.name for m in CORE_MIGRATIONS].index(MIGRATION)]:
            step.apply(conn)
            conn.execute(migrations_table.insert().values(name=step.name, applied_at=iso(utc_now())))
        for table in ("runs", "events", "subagents", "checkpoints"):
            # ids of events and checkpoints left to the database (PostgreSQL's sequence), in order
            serial = table in ("events", "checkpoints")
            rows = [{k: v for k, v in r.items() if not (serial and k == "id")} for r in data["rows"][table]]
            if table == "runs":
                rows = [{**r, "workspace": str(workspace)} for r in rows]
            conn.execute(sa.table(table, *(sa.column(name) for name in rows[0])).insert(), rows)
    return store, data


def _kinds(store: Store, run_id: str) -> list[tuple[str, str]]:
    with store.read() as conn:
        query = sa.text("SELECT kind, key FROM checkpoints WHERE run_id = :run ORDER BY id")
        return [(kind, key) for kind, key in conn.execute(query, {"run": run_id}).all()]


def test_conversations_stored_before_move_into_their_rows_and_show_the_same_calls(
    store_url: str, tmp_path: Path
) -> None:
    store, data = _old_store(store_url, tmp_path)
    try:
        names = [m.name for m in CORE_MIGRATIONS]
        assert store.migrate() == names[names.index(MIGRATION) :]  # it, and every later one
        run = store.get_run(data["run_id"])
        assert run is not None and run.status == "interrupted"
        for agent_id, read in data["reads"].items():
            found = agent_calls(store, run, agent_id)
            assert found is not None and found.to_dict() == read, agent_id
        assert [k for k, _ in _kinds(store, run.id)] == ["answer", "answer", "answer", "system"]  # one prompt, once
        sub1 = store.subagent_conversation(run.id, "sub1")
        assert sub1 is not None and (sub1["messages"], len(sub1["follow_ups"])) == (1, 1)
    finally:
        store.close()


def test_a_run_stored_before_resumes_and_a_follow_up_continues_a_moved_conversation(
    store_url: str, tmp_path: Path
) -> None:
    store, data = _old_store(store_url, tmp_path)
    store.migrate()
    seen: list[list[str]] = []

    def resumed(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            seen.append([m.text for m in request.messages if m.role == "user"])
            return call("complete", summary="named another")
        return call("task_message", id="sub2", message="name one more") if _turns(request) == 3 else reply("done")

    async def resume() -> Any:
        runtime = Runtime(model=FunctionModel(resumed), workspace=tmp_path, store=store)
        try:
            return await runtime.resume(data["run_id"])
        finally:
            await runtime.aclose()

    try:
        result = asyncio.run(resume())
        assert result.status == "completed", result.error
        assert seen == [["name a colour", "name one more"]]  # sub2's own conversation, then the follow-up
        sub2 = next(r for r in result.subagents if r.id == "sub2")
        assert (sub2.messages, sub2.summary) == (1, "named another")
        run = store.get_run(data["run_id"])
        assert run is not None
        calls = agent_calls(store, run, "sub2")
        assert calls is not None and calls.why_not_kept is None
        assert calls.system == data["reads"]["sub2"]["system"]
        assert [m.text for m in calls.messages if m.role == "user"] == ["name a colour", "name one more"]
        assert [k for k, _ in _kinds(store, run.id)].count("system") == 1  # the same prompt, still once
    finally:
        store.close()


def test_each_completed_subagent_keeps_its_conversation_in_its_row_and_the_system_prompt_once(
    store: Store, tmp_path: Path
) -> None:
    lead = [  # three in the background, then a wait for them, then a follow-up to sub2
        call(
            "task", subagent_type="general-purpose", description="jobs", prompts=["a", "b", "c"], run_in_background=True
        ),
        call("task_wait"),
        call("task_message", id="sub2", message="and d"),
    ]

    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            said = [m.text for m in request.messages if m.role == "user"][-1]
            return call("complete", summary=f"did {said}")
        turn = _turns(request)
        return lead[turn] if turn < len(lead) else reply("done")

    async def run() -> Any:
        runtime = Runtime(model=FunctionModel(answer), workspace=tmp_path, store=store)
        try:
            return await runtime.run("three jobs and a follow-up")
        finally:
            await runtime.aclose()

    result = asyncio.run(run())
    assert result.status == "completed", result.error
    kinds = sorted(k for k in _kinds(store, result.run_id) if k[0] != "answer")
    assert [k[0] for k in kinds] == ["conversation", "system"] and kinds[0][1] == "end"  # the lead's, and one prompt
    stored = {a: store.subagent_conversation(result.run_id, a) for a in ("sub1", "sub2", "sub3")}
    assert {a: (c or {}).get("messages") for a, c in stored.items()} == {"sub1": 0, "sub2": 1, "sub3": 0}
    sub2 = stored["sub2"]
    assert sub2 is not None and [m["parts"][0]["text"] for m in sub2["conversation"] if m["role"] == "user"] == [
        "b",
        "and d",
    ]
    run_row = store.get_run(result.run_id)
    assert run_row is not None
    for agent_id in ("sub1", "sub2", "sub3"):
        calls = agent_calls(store, run_row, agent_id)
        assert calls is not None and calls.why_not_kept is None and calls.system == sub2["system"]
        assert all(c.answer_message is not None for c in calls.calls)


def test_a_follow_up_changes_its_record_only_once_the_record_as_it_ended_is_stored(
    store: Store, tmp_path: Path
) -> None:
    """A follow-up reuses its subagent's record: while it runs, the stored row must still say how
    the subagent ended (a crash then resumes from that), never `running` nor half of each."""
    run_ids: list[str] = []
    stored_during_follow_up: list[tuple[str, str, int]] = []
    lead = [  # in the background, so that the lead is offered task_message
        call(
            "task", subagent_type="general-purpose", description="job", prompt="name a colour", run_in_background=True
        ),
        call("task_wait"),
        call("task_message", id="sub1", message="and another"),
    ]

    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request):
            said = [m.text for m in request.messages if m.role == "user"]
            if len(said) == 2:  # the follow-up: the record as it ended is what the store holds
                row = store.subagent_record(run_ids[0], "sub1")
                assert row is not None
                stored_during_follow_up.append((row.status, row.summary, row.messages))
            return call("complete", summary=f"said {said[-1]}")
        turn = _turns(request)
        return lead[turn] if turn < len(lead) else reply("done")

    async def run() -> Any:
        runtime = Runtime(model=FunctionModel(answer), workspace=tmp_path, store=store, sinks=[_first_run_id(run_ids)])
        try:
            return await runtime.run("a job and a follow-up")
        finally:
            await runtime.aclose()

    # The writer is held back for a while (a busy disk): without waiting for it, the follow-up
    # would change the record before its row was written, and the row read `running`, or nothing.
    opened = threading.Event()
    write = store.record

    def held_back(*args: Any, **kwargs: Any) -> Any:
        opened.wait(10)
        return write(*args, **kwargs)

    store.record = held_back  # type: ignore[method-assign]
    opening = threading.Timer(0.3, opened.set)
    opening.start()
    try:
        result = asyncio.run(run())
    finally:
        opening.cancel()
        opened.set()
        del store.record
    assert result.status == "completed", result.error
    assert stored_during_follow_up == [("completed", "said name a colour", 0)]
    after = store.subagent_record(result.run_id, "sub1")
    assert after is not None and (after.status, after.summary, after.messages) == ("completed", "said and another", 1)


def _first_run_id(run_ids: list[str]) -> Any:
    def sink(event: Any) -> None:
        if not run_ids:
            run_ids.append(event.run_id)

    return sink
